"""Tests of the encoder/decoder layers and stacks: NumPy references (post- and pre-norm), causality,
padding invariance, cached decoding against full recomputation, and attention-score shapes."""

import keras
import numpy as np
import pytest
from keras.ops import convert_to_numpy

from tf_transformer.layers import Decoder, DecoderLayer, Encoder, EncoderLayer, masking

TOLERANCE = dict(rtol=1e-5, atol=1e-5)
D_MODEL, HEADS, D_FF = 8, 2, 16


def randomize(layer, seed=0):
    """Random values for every weight (LayerNorm gammas around 1, everything else around 0)."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        center = 1.0 if weight.path.endswith("gamma") else 0.0
        weight.assign((center + rng.normal(scale=0.3, size=weight.shape)).astype(np.float32))
    return layer


def random_inputs(*shape, seed=1):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


# --- NumPy reference ---------------------------------------------------------------------------------


def softmax(logits):
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def reference_attention(layer, query, value, mask=None):
    h, d_k = layer.num_heads, layer.key_dim
    d_v = getattr(layer, "value_dim", d_k)
    q = query @ convert_to_numpy(layer.query_kernel) + convert_to_numpy(layer.query_bias)
    kv = value @ convert_to_numpy(layer.key_value_kernel) + convert_to_numpy(layer.key_value_bias)
    k, v = kv[..., : h * d_k], kv[..., h * d_k :]

    def split(t, width):
        return t.reshape(t.shape[0], t.shape[1], h, width).transpose(0, 2, 1, 3)

    q, k, v = split(q, d_k), split(k, d_k), split(v, d_v)
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d_k)
    if mask is not None:
        logits = np.where(np.broadcast_to(mask, logits.shape), logits, -1e9)
    context = (softmax(logits) @ v).transpose(0, 2, 1, 3).reshape(query.shape[0], query.shape[1], h * d_v)
    return context @ convert_to_numpy(layer.output_kernel) + convert_to_numpy(layer.output_bias)


def reference_layer_norm(norm, x):
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + norm.epsilon) * convert_to_numpy(norm.gamma) + convert_to_numpy(norm.beta)


def reference_feed_forward(ffn, x):
    hidden = np.maximum(0.0, x @ convert_to_numpy(ffn.inner.kernel) + convert_to_numpy(ffn.inner.bias))
    return hidden @ convert_to_numpy(ffn.outer.kernel) + convert_to_numpy(ffn.outer.bias)


def residual(layer, norm, x, sublayer):
    """Post-norm LN(x + F(x)) (the paper) or pre-norm x + F(LN(x))."""
    if layer.norm_first:
        return x + sublayer(reference_layer_norm(norm, x))
    return reference_layer_norm(norm, x + sublayer(x))


def reference_encoder_layer(layer, x, mask=None):
    x = np.asarray(x, np.float64)
    x = residual(layer, layer.self_attention_norm, x, lambda y: reference_attention(layer.self_attention, y, y, mask))
    return residual(layer, layer.feed_forward_norm, x, lambda y: reference_feed_forward(layer.feed_forward, y))


def reference_decoder_layer(layer, x, memory, self_mask=None, memory_mask=None):
    x, memory = np.asarray(x, np.float64), np.asarray(memory, np.float64)
    x = residual(
        layer, layer.self_attention_norm, x, lambda y: reference_attention(layer.self_attention, y, y, self_mask)
    )
    x = residual(
        layer,
        layer.cross_attention_norm,
        x,
        lambda y: reference_attention(layer.cross_attention, y, memory, memory_mask),
    )
    return residual(layer, layer.feed_forward_norm, x, lambda y: reference_feed_forward(layer.feed_forward, y))


# --- single layers against the reference -------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
@pytest.mark.parametrize("epsilon", [1e-6, 0.1])
def test_encoder_layer_matches_reference(norm_first, epsilon):
    x = random_inputs(2, 5, D_MODEL)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)[:, None, None, :]
    layer = EncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.5, norm_first=norm_first, layer_norm_epsilon=epsilon)
    layer(x)
    randomize(layer)
    output = convert_to_numpy(layer(x, attention_mask=mask, training=False))
    np.testing.assert_allclose(output, reference_encoder_layer(layer, x, mask), **TOLERANCE)
    # Dropout is really there: training=True changes the output.
    assert not np.allclose(convert_to_numpy(layer(x, attention_mask=mask, training=True)), output)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_layer_matches_reference(norm_first):
    x, memory = random_inputs(2, 4, D_MODEL, seed=1), random_inputs(2, 6, D_MODEL, seed=2)
    self_mask = np.tril(np.ones((4, 4), bool))[None, None]
    memory_mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)[:, None, None, :]
    layer = DecoderLayer(D_MODEL, HEADS, D_FF, dropout=0.5, norm_first=norm_first)
    layer(x, memory)
    randomize(layer)
    output = convert_to_numpy(layer(x, memory, self_attention_mask=self_mask, memory_mask=memory_mask, training=False))
    expected = reference_decoder_layer(layer, x, memory, self_mask, memory_mask)
    np.testing.assert_allclose(output, expected, **TOLERANCE)


# --- stacks --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_stack_structure_and_numerics(norm_first):
    x = random_inputs(2, 5, D_MODEL)
    mask = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], bool)[:, None, None, :]
    encoder = Encoder(num_layers=3, d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF, norm_first=norm_first)
    encoder(x)
    randomize(encoder)
    assert len(encoder.layers) == 3
    assert all(isinstance(layer, EncoderLayer) for layer in encoder.layers)
    if norm_first:
        assert encoder.final_norm is not None
        assert "final_norm" in [sublayer.name for sublayer in encoder._layers]
    else:
        assert encoder.final_norm is None
    expected = x
    for layer in encoder.layers:
        expected = reference_encoder_layer(layer, expected, mask)
    if norm_first:
        expected = reference_layer_norm(encoder.final_norm, expected)
    np.testing.assert_allclose(convert_to_numpy(encoder(x, attention_mask=mask)), expected, **TOLERANCE)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_stack_structure_and_numerics(norm_first):
    x, memory = random_inputs(2, 4, D_MODEL, seed=1), random_inputs(2, 3, D_MODEL, seed=2)
    self_mask = np.tril(np.ones((4, 4), bool))[None, None]
    decoder = Decoder(num_layers=2, d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF, norm_first=norm_first)
    decoder(x, memory)
    randomize(decoder)
    assert len(decoder.layers) == 2
    assert (decoder.final_norm is not None) == norm_first
    expected = x
    for layer in decoder.layers:
        expected = reference_decoder_layer(layer, expected, memory, self_mask)
    if norm_first:
        expected = reference_layer_norm(decoder.final_norm, expected)
    np.testing.assert_allclose(
        convert_to_numpy(decoder(x, memory, self_attention_mask=self_mask)), expected, **TOLERANCE
    )


def make_decoder(norm_first, seed=0, **kwargs):
    decoder = Decoder(num_layers=2, d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF, norm_first=norm_first, **kwargs)
    decoder(random_inputs(1, 2, D_MODEL), random_inputs(1, 3, D_MODEL))
    return randomize(decoder, seed)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_is_causal(norm_first):
    length = 6
    x, memory = random_inputs(2, length, D_MODEL, seed=1), random_inputs(2, 4, D_MODEL, seed=2)
    decoder = make_decoder(norm_first)
    look_ahead = masking.look_ahead_mask(length)
    base = convert_to_numpy(decoder(x, memory, self_attention_mask=look_ahead))
    for t in range(length - 1):
        changed = x.copy()
        changed[:, t + 1 :] = random_inputs(2, length - t - 1, D_MODEL, seed=10 + t)
        output = convert_to_numpy(decoder(changed, memory, self_attention_mask=look_ahead))
        np.testing.assert_allclose(output[:, : t + 1], base[:, : t + 1], **TOLERANCE)
        assert not np.allclose(output[:, t + 1 :], base[:, t + 1 :])  # the test can fail


@pytest.mark.parametrize(
    "norm_first,window", [(False, None), (True, None), (False, 1)], ids=["post_norm", "pre_norm", "post_norm_window"]
)
def test_decoder_cached_decoding_equals_full(norm_first, window):
    batch, length = 2, 5
    x, memory = random_inputs(batch, length, D_MODEL, seed=1), random_inputs(batch, 4, D_MODEL, seed=2)
    memory_mask = masking.padding_mask(np.array([[3, 4, 0, 0], [1, 2, 3, 4]]))
    decoder = make_decoder(norm_first, attention_window=window)
    full = convert_to_numpy(
        decoder(x, memory, self_attention_mask=masking.look_ahead_mask(length), memory_mask=memory_mask)
    )
    cache = decoder.init_cache(memory, length)
    assert len(cache) == 2
    for i in range(length):
        output, cache = decoder(x[:, i : i + 1], None, memory_mask=memory_mask, cache=cache, decode_index=i)
        np.testing.assert_allclose(convert_to_numpy(output), full[:, i : i + 1], **TOLERANCE)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_padding_invariance(norm_first):
    real = random_inputs(2, 4, D_MODEL, seed=1)
    ids = np.array([[5, 6, 7, 0], [5, 6, 7, 8]])
    encoder = Encoder(num_layers=2, d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF, norm_first=norm_first)
    encoder(real)
    randomize(encoder)
    base = convert_to_numpy(encoder(real, attention_mask=masking.padding_mask(ids)))
    # Three extra padded positions with arbitrary (large) values.
    longer = np.concatenate([real, 10 * random_inputs(2, 3, D_MODEL, seed=2)], axis=1)
    longer_ids = np.concatenate([ids, np.zeros((2, 3), int)], axis=1)
    output = convert_to_numpy(encoder(longer, attention_mask=masking.padding_mask(longer_ids)))
    np.testing.assert_allclose(output[0, :3], base[0, :3], **TOLERANCE)
    np.testing.assert_allclose(output[1, :4], base[1, :4], **TOLERANCE)
    # Without the mask the padding does leak in.
    unmasked = convert_to_numpy(encoder(longer))
    assert not np.allclose(unmasked[1, :4], base[1, :4], atol=1e-3)


def test_attention_score_shapes():
    batch, source, target = 2, 5, 3
    x, memory = random_inputs(batch, target, D_MODEL), random_inputs(batch, source, D_MODEL)
    encoder = Encoder(num_layers=2, d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF)
    output, scores = encoder(memory, return_attention_scores=True)
    assert output.shape == (batch, source, D_MODEL)
    assert isinstance(scores, list) and len(scores) == 2
    assert all(tuple(s.shape) == (batch, HEADS, source, source) for s in scores)

    decoder = Decoder(num_layers=3, d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF)
    output, scores = decoder(
        x, memory, self_attention_mask=masking.look_ahead_mask(target), return_attention_scores=True
    )
    assert output.shape == (batch, target, D_MODEL)
    assert isinstance(scores, list) and len(scores) == 3
    for self_scores, cross_scores in scores:
        assert tuple(self_scores.shape) == (batch, HEADS, target, target)
        assert tuple(cross_scores.shape) == (batch, HEADS, target, source)
        np.testing.assert_allclose(convert_to_numpy(self_scores).sum(-1), 1.0, rtol=1e-5)
        assert np.all(
            convert_to_numpy(self_scores)[..., np.triu_indices(target, 1)[0], np.triu_indices(target, 1)[1]] == 0
        )


@pytest.fixture
def mixed_float16():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def dtypes_of(cache):
    """The dtype of each tensor of a cache: a nest of lists and dicts (the caches' dict subclasses included)."""
    if isinstance(cache, dict):
        return {name: dtypes_of(value) for name, value in cache.items()}
    if isinstance(cache, (list, tuple)):
        return [dtypes_of(value) for value in cache]
    return keras.backend.standardize_dtype(cache.dtype)


def test_cached_decoding_under_mixed_precision(mixed_float16):
    batch, length = 2, 3
    source, x = random_inputs(batch, 4, D_MODEL, seed=1), random_inputs(batch, length, D_MODEL, seed=2)
    encoder = Encoder(num_layers=1, d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF)
    decoder = Decoder(num_layers=1, d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF)
    memory = encoder(source)
    assert keras.backend.standardize_dtype(memory.dtype) == "float16"
    full = convert_to_numpy(decoder(x, memory, self_attention_mask=masking.look_ahead_mask(length))).astype(np.float32)
    cache = decoder.init_cache(memory, length)
    for i in range(length):
        dtypes = dtypes_of(cache)
        output, cache = decoder(x[:, i : i + 1], None, cache=cache, decode_index=i)
        # A tf.while_loop needs the cache to keep its dtypes from step to step.
        assert dtypes_of(cache) == dtypes
        np.testing.assert_allclose(
            convert_to_numpy(output).astype(np.float32), full[:, i : i + 1], atol=1e-2, rtol=1e-2
        )
