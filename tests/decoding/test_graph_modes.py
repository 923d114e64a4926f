"""One code path: the decoders give the eager results inside tf.function (unknown shapes) and under XLA."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_transformer as tft
from tf_transformer.decoding import DecodingSettings, beam_search, constraints, greedy_decode, loop, sample_decode

DECODERS = {
    "greedy": lambda model, source, **kw: greedy_decode(model, source, DecodingSettings(max_decode_length="x+3"), **kw),
    "beam": lambda model, source, **kw: beam_search(
        model, source, DecodingSettings(beam_size=3, n_best=2, max_decode_length="x+3"), **kw
    ),
    "sample": lambda model, source, **kw: sample_decode(
        model, source, DecodingSettings(method="sample", top_k=10, seed=3, max_decode_length="x+3"), **kw
    ),
}
UNKNOWN_SHAPE = [tf.TensorSpec([None, None], tf.int32)]


@pytest.mark.parametrize("method", sorted(DECODERS))
def test_tf_function_and_xla_equal_eager(one_layer_model, helpers, method):
    model = one_layer_model
    decode = DECODERS[method]
    sources = helpers.make_sources([5, 3, 4], seed=13)
    eager_ids, eager_scores = decode(model, sources)

    # An unknown batch size and source length: one trace serves every shape.
    traced = tf.function(lambda source: decode(model, source), input_signature=UNKNOWN_SHAPE)
    ids, scores = traced(tf.constant(sources))
    np.testing.assert_array_equal(ids, eager_ids)
    np.testing.assert_allclose(scores, eager_scores, atol=1e-5)
    other_ids, _ = traced(tf.constant(helpers.make_sources([2, 3], seed=14)))
    helpers.check_output_convention(other_ids)
    assert other_ids.shape[-1] == 3 + 3 and traced.experimental_get_tracing_count() == 1

    compiled = tf.function(lambda source: decode(model, source, jit_compile=True), jit_compile=True)
    xla_ids, xla_scores = compiled(tf.constant(sources))
    if method == "sample":
        # XLA's Philox stream differs from the CPU kernel's: other samples, but reproducible ones.
        again_ids, again_scores = compiled(tf.constant(sources))
        np.testing.assert_array_equal(again_ids, xla_ids)
        helpers.check_output_convention(xla_ids)
    else:
        np.testing.assert_array_equal(xla_ids, eager_ids)
        np.testing.assert_allclose(xla_scores, eager_scores, atol=1e-4)


def test_the_decoders_grow_their_cache_except_for_xla(one_layer_model, helpers):
    # Graph mode grows the self-attention cache (cheaper steps); XLA needs the fixed buffer. The test above
    # checks that both give the eager results; this one that each mode really gets its own cache.
    sources = helpers.make_sources([4, 2], seed=15)
    memory, _ = one_layer_model.encode(sources)
    settings = DecodingSettings(max_decode_length="x+3")
    plan = constraints.plan_lengths(one_layer_model.config, tf.constant(sources), settings)
    names = {jit: set(loop.init_decoding_cache(one_layer_model, memory, plan, jit)[0]["self"]) for jit in (False, True)}
    assert names == {False: {"past_key", "past_value"}, True: {"key", "value"}}


@pytest.mark.parametrize("method", sorted(DECODERS))
def test_fixed_caches_also_decode_outside_xla(one_layer_model, helpers, method):
    sources = helpers.make_sources([5, 3, 4], seed=16)
    ids, scores = DECODERS[method](one_layer_model, sources)
    fixed_ids, fixed_scores = DECODERS[method](one_layer_model, sources, jit_compile=True)
    np.testing.assert_array_equal(fixed_ids, ids)
    np.testing.assert_allclose(fixed_scores, scores, atol=1e-5)


def test_xla_without_jit_compile_fails_naming_the_fix(one_layer_model, helpers):
    # A growing cache cannot compile (XLA needs fixed shapes); the error quotes the loop's name, the fix.
    compiled = tf.function(lambda source: DECODERS["greedy"](one_layer_model, source), jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="pass_jit_compile_True"):
        compiled(tf.constant(helpers.make_sources([4, 2], seed=17)))


@pytest.mark.parametrize("method", sorted(DECODERS))
def test_jit_compile_must_be_a_bool(one_layer_model, helpers, method):
    with pytest.raises(ValueError, match="jit_compile: must be True or False"):
        DECODERS[method](one_layer_model, helpers.make_sources([3], seed=18), jit_compile="yes")


@pytest.fixture
def mixed_float16():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def test_mixed_precision_model_decodes_in_a_graph(mixed_float16, helpers):
    model = tft.Transformer(helpers.TINY.replace(num_encoder_layers=1, num_decoder_layers=1))
    sources = helpers.make_sources([5, 3], seed=14)
    model((sources, sources[:, :2]))
    assert model.init_cache(model.encode(sources)[0], 4)[0]["self"]["key"].dtype == tf.float16
    ids, scores = tf.function(lambda source: DECODERS["beam"](model, source))(sources)
    helpers.check_output_convention(ids)
    assert scores.dtype == tf.float32 and np.isfinite(scores).all()


def test_a_saved_model_decodes_like_the_python_model(one_layer_model, helpers, tmp_path):
    module = tf.Module()
    module.model = one_layer_model
    module.translate = tf.function(
        lambda source: dict(zip(("ids", "scores"), DECODERS["greedy"](one_layer_model, source), strict=True)),
        input_signature=UNKNOWN_SHAPE,
    )
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.translate})
    loaded = tf.saved_model.load(str(tmp_path))
    sources = helpers.make_sources([5, 3, 4], seed=15)
    outputs = loaded.signatures["serving_default"](source=tf.constant(sources))
    ids, scores = DECODERS["greedy"](one_layer_model, sources)
    np.testing.assert_array_equal(outputs["ids"], ids)
    np.testing.assert_allclose(outputs["scores"], scores, atol=1e-5)
