"""MaskedCrossEntropy against a NumPy reference that builds the full label-smoothed distribution."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.training import MaskedCrossEntropy

VOCAB = 6


def reference(y_true, logits, eps, pad_id=0, weights=None):
    """Mean over non-pad tokens of -sum_k q_k log softmax(z)_k, q = (1 - eps) onehot(y) + eps / V."""
    logits = np.asarray(logits, np.float64)
    vocab = logits.shape[-1]
    q = (1.0 - eps) * np.eye(vocab)[y_true] + eps / vocab
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    token_losses = -(q * log_probs).sum(-1)
    w = (y_true != pad_id).astype(np.float64)
    if weights is not None:
        w = w * np.broadcast_to(weights if weights.ndim == 2 else weights[:, None], w.shape)
    return (token_losses * w).sum() / w.sum() if w.sum() else 0.0


def example(seed=0):
    rng = np.random.default_rng(seed)
    y_true = np.array([[3, 1, 5, 2, 0], [4, 2, 0, 0, 0], [1, 1, 1, 5, 3]])
    logits = rng.normal(scale=2.0, size=(3, 5, VOCAB)).astype(np.float32)
    return y_true, logits


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_matches_smoothed_reference(eps):
    y_true, logits = example()
    value = MaskedCrossEntropy(label_smoothing=eps)(y_true, logits)
    assert value.dtype == "float32" and value.shape == ()
    np.testing.assert_allclose(float(value), reference(y_true, logits, eps), rtol=1e-5)


def test_eps_zero_is_sparse_cross_entropy_on_real_tokens():
    y_true, logits = example()
    real = y_true != 0
    expected = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y_true[real], logits[real])
    np.testing.assert_allclose(float(MaskedCrossEntropy()(y_true, logits)), float(expected), rtol=1e-5)


def test_padding_logits_do_not_matter():
    y_true, logits = example()
    loss = MaskedCrossEntropy(label_smoothing=0.1)
    changed = logits.copy()
    pad = y_true == 0
    changed[pad] = np.random.default_rng(1).normal(scale=50.0, size=changed[pad].shape)
    assert float(loss(y_true, changed)) == pytest.approx(float(loss(y_true, logits)), rel=1e-6)
    changed[pad] = np.nan  # even non-finite logits at padding are ignored
    assert float(loss(y_true, changed)) == pytest.approx(float(loss(y_true, logits)), rel=1e-6)


def test_all_padding_is_zero_with_finite_gradient():
    logits = tf.Variable(np.random.default_rng(2).normal(size=(2, 3, VOCAB)).astype(np.float32))
    with tf.GradientTape() as tape:
        value = MaskedCrossEntropy(label_smoothing=0.1)(np.zeros((2, 3), np.int32), logits)
    assert float(value) == 0.0
    gradient = tape.gradient(value, logits)
    assert np.all(np.isfinite(gradient.numpy()))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_logits_give_float32(dtype):
    y_true, logits = example()
    loss = MaskedCrossEntropy(label_smoothing=0.1)
    value = loss(y_true, tf.cast(logits, dtype))
    assert value.dtype == "float32"
    rounded = tf.cast(tf.cast(logits, dtype), "float32").numpy()
    np.testing.assert_allclose(float(value), reference(y_true, rounded, 0.1), rtol=1e-5)
    np.testing.assert_allclose(float(value), float(loss(y_true, logits)), rtol=2e-2)


def test_sample_weight_multiplies_token_weights():
    y_true, logits = example()
    loss = MaskedCrossEntropy(label_smoothing=0.1)
    per_sequence = np.array([1.0, 3.0, 0.0], np.float32)
    np.testing.assert_allclose(
        float(loss(y_true, logits, sample_weight=per_sequence)),
        reference(y_true, logits, 0.1, weights=per_sequence),
        rtol=1e-5,
    )
    per_token = np.random.default_rng(3).uniform(size=y_true.shape).astype(np.float32)
    np.testing.assert_allclose(
        float(loss(y_true, logits, sample_weight=per_token)),
        reference(y_true, logits, 0.1, weights=per_token),
        rtol=1e-5,
    )


def test_reduction_none_and_sum():
    y_true, logits = example()
    per_token = MaskedCrossEntropy(label_smoothing=0.1, reduction="none")(y_true, logits)
    assert per_token.shape == y_true.shape
    assert np.all(per_token.numpy()[y_true == 0] == 0.0)
    total = MaskedCrossEntropy(label_smoothing=0.1, reduction="sum")(y_true, logits)
    np.testing.assert_allclose(float(total), reference(y_true, logits, 0.1) * np.sum(y_true != 0), rtol=1e-5)
    with pytest.raises(ValueError, match="reduction"):
        MaskedCrossEntropy(reduction="sum_over_batch_size")


def test_config_round_trip():
    loss = MaskedCrossEntropy(label_smoothing=0.1, pad_id=0, name="xent")
    config = loss.get_config()
    assert config["label_smoothing"] == 0.1 and config["pad_id"] == 0 and config["name"] == "xent"
    assert MaskedCrossEntropy.from_config(config).get_config() == config
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert isinstance(revived, MaskedCrossEntropy)
    assert revived.get_config() == config


# Runs in a fresh interpreter: the CPU must be split into 2 logical devices before TF runs any op.
_DISTRIBUTED_FIT = textwrap.dedent(
    """
    import json
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    import numpy as np
    from tf_transformer.training import MaskedCrossEntropy

    rng = np.random.default_rng(0)
    vocab, length = 7, 5
    x = rng.integers(1, vocab, size=(8, length))
    y = rng.integers(1, vocab, size=(8, length))
    # Batches of 4 split 2 + 2 across replicas; the first replica gets far fewer real tokens, so a
    # per-replica mean averaged over replicas would differ from the global token mean.
    lengths = np.array([1, 2, 5, 5, 0, 1, 5, 4])
    y = np.where(np.arange(length)[None] < lengths[:, None], y, 0)

    def fit(strategy):
        keras.utils.set_random_seed(1)
        with strategy.scope():
            model = keras.Sequential([
                keras.Input((length,), dtype="int32"),
                keras.layers.Embedding(vocab, 8),
                keras.layers.Dense(vocab),
            ])
            model.compile(optimizer=keras.optimizers.SGD(0.5), loss=MaskedCrossEntropy(label_smoothing=0.1))
        history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
        return history.history["loss"], [w.numpy() for w in model.weights]

    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    plain_loss, plain_weights = fit(tf.distribute.get_strategy())
    mirrored_loss, mirrored_weights = fit(mirrored)
    print(json.dumps({
        "replicas": mirrored.num_replicas_in_sync,
        "plain": plain_loss,
        "mirrored": mirrored_loss,
        "weight_diff": max(float(np.abs(a - b).max()) for a, b in zip(plain_weights, mirrored_weights)),
    }))
    """
)


def test_mirrored_strategy_fit_matches_single_device():
    root = pathlib.Path(__file__).resolve().parents[2]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-c", _DISTRIBUTED_FIT], capture_output=True, text=True, env=env, cwd=root, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["replicas"] == 2
    np.testing.assert_allclose(report["mirrored"], report["plain"], rtol=1e-5)
    assert report["weight_diff"] < 1e-5
