"""Tests of MultiHeadAttention against a NumPy reference, plus masks, windows and the decoding cache."""

import keras
import numpy as np
import pytest
from keras.ops import convert_to_numpy

from tf_transformer.layers import MultiHeadAttention, masking

TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def randomize(layer, seed=0, scale=0.3):
    """Give every weight (biases included) random non-zero values."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(rng.normal(scale=scale, size=weight.shape).astype(np.float32))


def softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def reference_attention(layer, query, value=None, mask=None):
    """NumPy multi-head attention with the layer's weights: returns (output, weights)."""
    value = query if value is None else value
    h, d_k = layer.num_heads, layer.key_dim
    d_v = getattr(layer, "value_dim", d_k)
    query = np.asarray(query, np.float64)
    value = np.asarray(value, np.float64)
    wq = convert_to_numpy(layer.query_kernel).astype(np.float64)
    wkv = convert_to_numpy(layer.key_value_kernel).astype(np.float64)
    wo = convert_to_numpy(layer.output_kernel).astype(np.float64)
    q, kv = query @ wq, value @ wkv
    if layer.use_bias:
        q = q + convert_to_numpy(layer.query_bias)
        kv = kv + convert_to_numpy(layer.key_value_bias)
    # key_value_kernel is [W^K | W^V]: the first h*d_k columns give keys, the rest values.
    assert kv.shape[-1] == h * d_k + h * d_v
    k, v = kv[..., : h * d_k], kv[..., h * d_k :]

    def split(t, width):  # [B, L, h*width] -> [B, h, L, width]
        return t.reshape(t.shape[0], t.shape[1], h, width).transpose(0, 2, 1, 3)

    q, k, v = split(q, d_k), split(k, d_k), split(v, d_v)
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d_k)
    if mask is not None:
        logits = np.where(np.broadcast_to(mask, logits.shape), logits, -1e9)
    weights = softmax(logits)
    context = (weights @ v).transpose(0, 2, 1, 3).reshape(query.shape[0], query.shape[1], h * d_v)
    output = context @ wo
    if layer.use_bias:
        output = output + convert_to_numpy(layer.output_bias)
    return output, weights


def built_layer(query, value=None, seed=0, **kwargs):
    kwargs.setdefault("num_heads", 2)
    kwargs.setdefault("d_model", 8)
    layer = MultiHeadAttention(**kwargs)
    layer(query, value)
    randomize(layer, seed)
    return layer


def random_inputs(*shape, seed=1):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def causal_case(batch, length, **kwargs):
    """Inputs `[batch, length, 8]`, a built layer and its full causal self-attention output (NumPy)."""
    x = random_inputs(batch, length, 8)
    layer = built_layer(x, **kwargs)
    return x, layer, convert_to_numpy(layer(x, attention_mask=masking.look_ahead_mask(length)))


# --- numerics against the reference -------------------------------------------------------------------


def test_self_attention_with_padding_mask_matches_reference():
    x = random_inputs(2, 5, 8)
    ids = np.array([[3, 4, 5, 0, 0], [1, 2, 3, 4, 0]])
    mask = (ids != 0)[:, None, None, :]
    layer = built_layer(x)
    output, weights = layer(x, attention_mask=keras.ops.convert_to_tensor(mask), return_attention_scores=True)
    expected_output, expected_weights = reference_attention(layer, x, mask=mask)
    assert output.shape == (2, 5, 8) and weights.shape == (2, 2, 5, 5)
    np.testing.assert_allclose(convert_to_numpy(output), expected_output, **TOLERANCE)
    np.testing.assert_allclose(convert_to_numpy(weights), expected_weights, **TOLERANCE)
    # Padded keys get exactly zero weight.
    assert np.all(convert_to_numpy(weights)[0, :, :, 3:] == 0)


def test_cross_attention_with_different_lengths_matches_reference():
    query, memory = random_inputs(2, 3, 8, seed=1), random_inputs(2, 6, 12, seed=2)
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)[:, None, None, :]
    layer = built_layer(query, memory)
    assert layer.key_value_kernel.shape == (12, 16)
    output, weights = layer(query, memory, attention_mask=mask, return_attention_scores=True)
    expected_output, expected_weights = reference_attention(layer, query, memory, mask)
    assert weights.shape == (2, 2, 3, 6)
    np.testing.assert_allclose(convert_to_numpy(output), expected_output, **TOLERANCE)
    np.testing.assert_allclose(convert_to_numpy(weights), expected_weights, **TOLERANCE)


def test_explicit_d_k_with_heads_times_d_k_not_d_model():
    x = random_inputs(2, 4, 8)
    layer = built_layer(x, num_heads=2, d_model=8, d_k=5)  # d_v stays d_model / h = 4
    assert layer.query_kernel.shape == (8, 10)
    assert layer.key_value_kernel.shape == (8, 10 + 8)
    assert layer.output_kernel.shape == (8, 8)
    output, weights = layer(x, return_attention_scores=True)
    expected_output, expected_weights = reference_attention(layer, x)
    assert output.shape == (2, 4, 8)
    np.testing.assert_allclose(convert_to_numpy(output), expected_output, **TOLERANCE)
    np.testing.assert_allclose(convert_to_numpy(weights), expected_weights, **TOLERANCE)


def test_explicit_d_k_and_d_v_with_d_model_not_divisible_by_heads():
    x = random_inputs(2, 4, 8)
    layer = built_layer(x, num_heads=3, d_model=8, d_k=5, d_v=3)
    assert layer.query_kernel.shape == (8, 15)
    assert layer.key_value_kernel.shape == (8, 15 + 9)
    assert layer.output_kernel.shape == (9, 8)
    output, weights = layer(x, return_attention_scores=True)
    expected_output, expected_weights = reference_attention(layer, x)
    assert output.shape == (2, 4, 8)
    np.testing.assert_allclose(convert_to_numpy(output), expected_output, **TOLERANCE)
    np.testing.assert_allclose(convert_to_numpy(weights), expected_weights, **TOLERANCE)


def test_non_zero_biases_are_used():
    x = random_inputs(1, 4, 8)
    layer = built_layer(x, seed=3)
    assert all(
        np.abs(convert_to_numpy(b)).sum() > 0 for b in (layer.query_bias, layer.key_value_bias, layer.output_bias)
    )
    np.testing.assert_allclose(convert_to_numpy(layer(x)), reference_attention(layer, x)[0], **TOLERANCE)
    layer.output_bias.assign(np.zeros(8, np.float32))
    layer.key_value_bias.assign(np.zeros(16, np.float32))
    np.testing.assert_allclose(convert_to_numpy(layer(x)), reference_attention(layer, x)[0], **TOLERANCE)


def test_without_bias_matches_reference():
    x = random_inputs(2, 4, 8)
    layer = built_layer(x, use_bias=False)
    assert len(layer.weights) == 3
    np.testing.assert_allclose(convert_to_numpy(layer(x)), reference_attention(layer, x)[0], **TOLERANCE)


def test_attention_dropout_inactive_at_inference():
    x = random_inputs(2, 4, 8)
    layer = built_layer(x, attention_dropout=0.5)
    np.testing.assert_allclose(
        convert_to_numpy(layer(x, training=False)), reference_attention(layer, x)[0], **TOLERANCE
    )
    assert not np.allclose(convert_to_numpy(layer(x, training=True)), convert_to_numpy(layer(x, training=False)))


# --- masks, precision, windows -------------------------------------------------------------------------


def fully_masked_row_mask():
    mask = np.ones((2, 1, 4, 4), bool)
    mask[0, :, 1, :] = False  # query 1 of example 0 may attend nowhere
    return mask


@pytest.fixture
def global_policy(request):
    """Set the global Keras dtype policy for one test, then restore float32."""
    keras.mixed_precision.set_global_policy(request.param)
    yield request.param
    keras.mixed_precision.set_global_policy("float32")


def check_fully_masked_row(layer, x):
    assert all(weight.dtype == "float32" for weight in layer.weights)
    mask = fully_masked_row_mask()
    output, weights = layer(x, attention_mask=mask, return_attention_scores=True)
    assert keras.backend.standardize_dtype(weights.dtype) == "float32"
    assert keras.backend.standardize_dtype(output.dtype) == layer.compute_dtype
    assert np.isfinite(convert_to_numpy(output).astype(np.float32)).all()
    assert np.isfinite(convert_to_numpy(weights)).all()
    np.testing.assert_allclose(convert_to_numpy(weights)[0, :, 1], np.full((2, 4), 0.25), atol=1e-6)
    expected, _ = reference_attention(layer, x, mask=mask)
    loose = TOLERANCE if layer.compute_dtype == "float32" else dict(atol=5e-2, rtol=5e-2)
    np.testing.assert_allclose(convert_to_numpy(output).astype(np.float32), expected, **loose)


@pytest.mark.parametrize(
    "policy",
    [
        None,
        "mixed_float16",
        "mixed_bfloat16",
    ],
)
def test_fully_masked_row_is_finite(policy):
    x = random_inputs(2, 4, 8)
    kwargs = {} if policy is None else {"dtype": policy}
    check_fully_masked_row(built_layer(x, **kwargs), x)


@pytest.mark.parametrize("global_policy", ["mixed_float16", "mixed_bfloat16"], indirect=True)
def test_fully_masked_row_is_finite_under_global_mixed_policy(global_policy):
    x = random_inputs(2, 4, 8)
    check_fully_masked_row(built_layer(x), x)


@pytest.mark.parametrize("window", [0, 1, 2])
def test_window_restricts_self_attention(window):
    x = random_inputs(2, 6, 8)
    layer = built_layer(x, attention_window=window)
    output, weights = layer(x, return_attention_scores=True)
    weights = convert_to_numpy(weights)
    distance = np.abs(np.arange(6)[:, None] - np.arange(6)[None, :])
    assert np.all(weights[:, :, distance > window] == 0.0)
    assert np.all(weights[:, :, distance <= window] > 0.0)
    expected_output, expected_weights = reference_attention(layer, x, mask=distance <= window)
    np.testing.assert_allclose(convert_to_numpy(output), expected_output, **TOLERANCE)
    np.testing.assert_allclose(weights, expected_weights, **TOLERANCE)


def test_window_not_applied_to_cross_attention():
    query, memory = random_inputs(2, 6, 8, seed=1), random_inputs(2, 6, 8, seed=2)
    layer = built_layer(query, memory, attention_window=1)
    output, weights = layer(query, memory, return_attention_scores=True)
    assert np.all(convert_to_numpy(weights) > 0.0)
    expected_output, expected_weights = reference_attention(layer, query, memory)
    np.testing.assert_allclose(convert_to_numpy(output), expected_output, **TOLERANCE)
    np.testing.assert_allclose(convert_to_numpy(weights), expected_weights, **TOLERANCE)
    # Nor with a precomputed cross-attention cache.
    _, cached_weights = layer(query, cache=layer.compute_key_value(memory), return_attention_scores=True)
    np.testing.assert_allclose(convert_to_numpy(cached_weights), expected_weights, **TOLERANCE)


# --- incremental decoding ------------------------------------------------------------------------------


@pytest.mark.parametrize("window,widths", [(None, {}), (1, {}), (None, {"d_k": 3, "d_v": 5})])
def test_cached_decoding_one_step_at_a_time_equals_full(window, widths):
    batch, length = 2, 5
    x = random_inputs(batch, length, 8)
    layer = built_layer(x, attention_window=window, **widths)
    cache = layer.empty_cache(batch, length)
    assert cache["key"].shape == (batch, 2, length, widths.get("d_k", 4))
    assert cache["value"].shape == (batch, 2, length, widths.get("d_v", 4))
    for i in range(length):
        output, cache, weights = layer(x[:, i : i + 1], cache=cache, decode_index=i, return_attention_scores=True)
        prefix = x[:, : i + 1]
        full = layer(prefix, attention_mask=masking.look_ahead_mask(i + 1))
        np.testing.assert_allclose(convert_to_numpy(output), convert_to_numpy(full)[:, -1:], **TOLERANCE)
        # Also against the reference with the causal (and window) mask.
        mask = np.tril(np.ones((i + 1, i + 1), bool))
        if window is not None:
            mask &= np.abs(np.arange(i + 1)[:, None] - np.arange(i + 1)[None, :]) <= window
        np.testing.assert_allclose(
            convert_to_numpy(output), reference_attention(layer, prefix, mask=mask)[0][:, -1:], **TOLERANCE
        )
        # Cache slots after the current position get no weight.
        assert weights.shape == (batch, 2, 1, length)
        assert np.all(convert_to_numpy(weights)[..., i + 1 :] == 0.0)


@pytest.mark.parametrize("window", [None, 1])
def test_cached_decoding_several_positions_at_once(window):
    batch, length = 2, 6
    x, layer, full = causal_case(batch, length, attention_window=window)
    cache = layer.empty_cache(batch, length)
    output, cache = layer(x[:, :3], cache=cache, decode_index=0)
    np.testing.assert_allclose(convert_to_numpy(output), full[:, :3], **TOLERANCE)
    output, cache = layer(x[:, 3:5], cache=cache, decode_index=3)
    np.testing.assert_allclose(convert_to_numpy(output), full[:, 3:5], **TOLERANCE)
    output, cache = layer(x[:, 5:6], cache=cache, decode_index=5)
    np.testing.assert_allclose(convert_to_numpy(output), full[:, 5:6], **TOLERANCE)
    # The cache holds the keys and values of every position.
    expected = layer.compute_key_value(x)
    np.testing.assert_allclose(convert_to_numpy(cache["key"]), convert_to_numpy(expected["key"]), **TOLERANCE)
    np.testing.assert_allclose(convert_to_numpy(cache["value"]), convert_to_numpy(expected["value"]), **TOLERANCE)


def test_cached_decoding_combines_user_mask():
    batch, length = 2, 4
    x = random_inputs(batch, length, 8)
    layer = built_layer(x)
    pad = np.array([[1, 0, 1, 1], [1, 1, 1, 1]], bool)[:, None, None, :]
    full = convert_to_numpy(layer(x, attention_mask=masking.combine_masks(pad, masking.look_ahead_mask(length))))
    cache = layer.empty_cache(batch, length)
    for i in range(length):
        output, cache = layer(x[:, i : i + 1], attention_mask=pad, cache=cache, decode_index=i)
        np.testing.assert_allclose(convert_to_numpy(output), full[:, i : i + 1], **TOLERANCE)


@pytest.mark.parametrize("window", [None, 1])
def test_a_growing_cache_equals_the_fixed_buffer_and_the_full_pass(window):
    batch, length = 2, 6
    x, layer, full = causal_case(batch, length, attention_window=window)
    growing, fixed = layer.empty_cache(batch, None), layer.empty_cache(batch, length)
    assert set(growing) == {"past_key", "past_value"} and growing["past_key"].shape == (batch, 2, 0, 4)
    # Several positions at once, then one at a time, as a decoder fed a prefix would do.
    for start, stop in [(0, 3), (3, 4), (4, 5), (5, 6)]:
        output, growing = layer(x[:, start:stop], cache=growing, decode_index=start)
        fixed_output, fixed = layer(x[:, start:stop], cache=fixed, decode_index=start)
        np.testing.assert_allclose(convert_to_numpy(output), full[:, start:stop], **TOLERANCE)
        np.testing.assert_allclose(convert_to_numpy(output), convert_to_numpy(fixed_output), **TOLERANCE)
        assert growing["past_key"].shape == (batch, 2, stop, 4)
    np.testing.assert_allclose(convert_to_numpy(growing["past_key"]), convert_to_numpy(fixed["key"]), **TOLERANCE)
    np.testing.assert_allclose(convert_to_numpy(growing["past_value"]), convert_to_numpy(fixed["value"]), **TOLERANCE)


@pytest.mark.tensorflow_only  # tf.function graphs and XLA: the decoding loops are TensorFlow's (tft.decoding)
def test_a_growing_cache_in_a_graph_loop_with_a_relaxed_length():
    import tensorflow as tf

    batch, length = 2, 5
    x, layer, full = causal_case(batch, length)

    @tf.function
    def decode_all(inputs):
        def body(index, outputs, cache):
            output, cache = layer(inputs[:, index : index + 1], cache=cache, decode_index=index)
            return index + 1, outputs.write(index, output[:, 0]), cache

        cache = layer.empty_cache(batch, None)
        invariants = {name: tf.TensorShape([batch, 2, None, 4]) for name in cache}
        _, outputs, cache = tf.while_loop(
            lambda index, *_: index < length,
            body,
            (tf.constant(0), tf.TensorArray(tf.float32, size=length), cache),
            shape_invariants=(tf.TensorShape([]), tf.TensorShape(None), invariants),
        )
        return tf.transpose(outputs.stack(), [1, 0, 2]), cache

    outputs, cache = decode_all(tf.constant(x))
    np.testing.assert_allclose(convert_to_numpy(outputs), full, **TOLERANCE)
    assert cache["past_key"].shape == (batch, 2, length, 4)


@pytest.mark.tensorflow_only  # tf.function graphs and XLA: the decoding loops are TensorFlow's (tft.decoding)
@pytest.mark.parametrize("window", [None, 2])
def test_cached_decoding_under_xla_with_tensor_index(window):
    import tensorflow as tf

    batch, length = 2, 5
    x = random_inputs(batch, length, 8)
    layer = built_layer(x, attention_window=window)

    @tf.function(jit_compile=True)
    def step(inputs, cache, index):
        return layer(inputs, cache=cache, decode_index=index)

    eager_cache, xla_cache = layer.empty_cache(batch, length), layer.empty_cache(batch, length)
    for i in range(length):
        eager, eager_cache = layer(x[:, i : i + 1], cache=eager_cache, decode_index=i)
        compiled, xla_cache = step(tf.constant(x[:, i : i + 1]), xla_cache, tf.constant(i, tf.int32))
        np.testing.assert_allclose(convert_to_numpy(compiled), convert_to_numpy(eager), **TOLERANCE)
    np.testing.assert_allclose(convert_to_numpy(xla_cache["key"]), convert_to_numpy(eager_cache["key"]), **TOLERANCE)
    # One trace serves every step.
    assert step.experimental_get_tracing_count() == 1


# --- cross-attention cache and errors ------------------------------------------------------------------


def test_precomputed_cross_attention_cache_equals_cross_attention():
    query, memory = random_inputs(2, 3, 8, seed=1), random_inputs(2, 5, 8, seed=2)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)[:, None, None, :]
    layer = built_layer(query, memory)
    kv = layer.compute_key_value(memory)
    assert kv["key"].shape == (2, 2, 5, 4) and kv["value"].shape == (2, 2, 5, 4)
    cached, cached_weights = layer(query, attention_mask=mask, cache=kv, return_attention_scores=True)
    direct, direct_weights = layer(query, memory, attention_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(convert_to_numpy(cached), convert_to_numpy(direct), **TOLERANCE)
    np.testing.assert_allclose(convert_to_numpy(cached_weights), convert_to_numpy(direct_weights), **TOLERANCE)
    np.testing.assert_allclose(
        convert_to_numpy(cached), reference_attention(layer, query, memory, mask)[0], **TOLERANCE
    )


@pytest.mark.parametrize("query_length", [1, 3])
def test_a_cross_attention_cache_row_serves_k_consecutive_query_rows(query_length):
    # Beam search: 3 hypotheses (consecutive rows) per sentence share the sentence's keys and values.
    sentences, beams = 2, 3
    memory = random_inputs(sentences, 5, 8, seed=2)
    query = random_inputs(sentences * beams, query_length, 8, seed=3)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)[:, None, None, :]
    layer = built_layer(query[:sentences], memory)
    shared, shared_weights = layer(
        query, attention_mask=mask, cache=layer.compute_key_value(memory), return_attention_scores=True
    )
    assert shared.shape == (sentences * beams, query_length, 8)
    assert shared_weights.shape == (sentences * beams, 2, query_length, 5)
    tiled_memory, tiled_mask = np.repeat(memory, beams, axis=0), np.repeat(mask, beams, axis=0)
    expected, expected_weights = reference_attention(layer, query, tiled_memory, tiled_mask)
    np.testing.assert_allclose(convert_to_numpy(shared), expected, **TOLERANCE)
    np.testing.assert_allclose(convert_to_numpy(shared_weights), expected_weights, **TOLERANCE)


def test_value_and_precomputed_cache_together_raise():
    query, memory = random_inputs(2, 3, 8, seed=1), random_inputs(2, 5, 8, seed=2)
    layer = built_layer(query, memory)
    with pytest.raises(ValueError, match="value=None"):
        layer(query, memory, cache=layer.compute_key_value(memory))


def test_d_model_not_divisible_by_heads_raises():
    with pytest.raises(ValueError, match="d_model=10.*num_heads=3"):
        MultiHeadAttention(num_heads=3, d_model=10)
    # With explicit per-head widths it is allowed.
    layer = MultiHeadAttention(num_heads=3, d_model=10, d_k=4, d_v=2)
    assert (layer.key_dim, layer.value_dim) == (4, 2)
