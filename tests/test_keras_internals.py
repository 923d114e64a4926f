"""The Keras and TensorFlow internals tf_transformer/_keras_internals.py relies on are still there and still behave
as it assumes; these tests are the first to fail on an upgrade that moves them, and say what broke."""

import gc

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_transformer import _keras_internals


def upgrade_message(what):
    return (
        f"{_keras_internals.versions()} broke what tf_transformer/_keras_internals.py relies on (last checked with "
        f"keras {_keras_internals.CHECKED_KERAS_VERSION}, tensorflow {_keras_internals.CHECKED_TENSORFLOW_VERSION}): "
        f"{what}. Fix: use a public API if the new version has one, else adapt the module's function to the new "
        "internals; until then pin the checked versions."
    )


def int8_config():
    return keras.quantizers.Int8QuantizationConfig(
        weight_quantizer=keras.quantizers.AbsMaxQuantizer(axis=0), activation_quantizer=None
    )


def built_dense(seed=0):
    keras.utils.set_random_seed(seed)
    dense = keras.layers.Dense(5, name="dense")
    dense.build((None, 4))
    return dense


def test_the_internals_are_there():
    problems = _keras_internals.relied_on_problems()
    assert not problems, upgrade_message("; ".join(problems))


def test_op_determinism_can_be_read_and_turned_off():
    was = _keras_internals.op_determinism_enabled()
    try:
        tf.config.experimental.enable_op_determinism()
        assert _keras_internals.op_determinism_enabled(), upgrade_message("is_op_determinism_enabled misreads")
        _keras_internals.disable_op_determinism()
        assert not _keras_internals.op_determinism_enabled(), upgrade_message("disable_op_determinism did nothing")
    finally:
        if was:
            tf.config.experimental.enable_op_determinism()


def test_sublayers_lists_the_whole_tree():
    inner = keras.layers.Dense(2, name="inner")
    outer = keras.Sequential([keras.Sequential([inner], name="middle")], name="outer")
    names = [layer.name for layer in _keras_internals.sublayers(outer)]
    assert "middle" in names and "inner" in names and "outer" not in names, upgrade_message(
        f"_flatten_layers no longer walks nested layers (got {names})"
    )
    assert _keras_internals.sublayers(outer, include_self=True)[0] is outer, upgrade_message(
        "_flatten_layers(include_self=True) no longer lists the layer first"
    )


def test_a_built_layer_takes_new_variables_only_unlocked_and_drops_one_without_collecting(monkeypatch):
    dense = built_dense()
    with pytest.raises(ValueError, match="already built"):  # the lock that `unlocked_variables` lifts
        dense.add_weight(name="extra", shape=(1,))
    collections = []
    monkeypatch.setattr(gc, "collect", lambda *args, **kwargs: collections.append(1) or 0)  # the test's, not code's
    with _keras_internals.unlocked_variables(dense):
        _keras_internals.drop_variable(dense, "bias")
        dense.bias = dense.add_weight(name="bias", shape=(5,), initializer="ones")
    assert dense._tracker.locked, upgrade_message("the tracker was not locked again")
    assert collections == [], upgrade_message("dropping a variable ran gc.collect()")
    paths = [variable.path for variable in dense.weights]
    assert sorted(paths) == ["dense/bias", "dense/kernel"], upgrade_message(f"the variables are now {paths}")
    np.testing.assert_array_equal(dense.bias.numpy(), np.ones(5))


def test_quantize_dense_int8_is_keras_own_int8_dense(monkeypatch):
    ours, theirs = built_dense(), built_dense()
    theirs.quantize("int8", config=int8_config())
    collections = []
    monkeypatch.setattr(gc, "collect", lambda *args, **kwargs: collections.append(1) or 0)
    _keras_internals.quantize_dense_int8(ours, int8_config())
    assert collections == [], upgrade_message("quantize_dense_int8 ran gc.collect()")
    for name in ("quantization_mode", "inputs_quantizer"):
        assert getattr(ours, name) == getattr(theirs, name), upgrade_message(f"Dense.quantize now sets {name}")
    assert ours.dtype_policy.name == theirs.dtype_policy.name, upgrade_message("Dense.quantize sets another policy")
    assert [(v.path, v.dtype) for v in ours.weights] == [(v.path, v.dtype) for v in theirs.weights], upgrade_message(
        "Dense.quantize now builds other variables"
    )
    for mine, keras_own in zip(ours.weights, theirs.weights, strict=True):
        np.testing.assert_array_equal(mine.numpy(), keras_own.numpy())
    assert _keras_internals.dense_kernel_variable(ours).dtype == "int8", upgrade_message("_kernel is not the int8 one")
    rows = np.random.default_rng(0).normal(size=(3, 4)).astype("float32")
    np.testing.assert_allclose(ours(rows), theirs(rows), rtol=1e-6)
    with pytest.raises(ValueError, match="already quantized"):
        _keras_internals.quantize_dense_int8(ours, int8_config())


def test_a_layer_marked_quantized_is_refused_a_second_quantize():
    class Own(keras.layers.Layer):
        def quantize(self, mode=None, type_check=True, config=None):
            _keras_internals.mark_quantized(self)

    layer = Own()
    layer.build(None)
    layer.quantize("int8")
    with pytest.raises(ValueError, match="already quantized"):
        layer.quantize("int8")
