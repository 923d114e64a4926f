"""Multi-head scaled dot-product attention with a key/value cache for incremental decoding."""

from __future__ import annotations

import keras
from keras import ops

from tf_transformer import _keras_internals
from tf_transformer.layers import _quantized, masking
from tf_transformer.layers._cache import (
    GROWING_CACHE_KEYS,
    CrossAttentionCache,
    GrowingSelfAttentionCache,
    SelfAttentionBuffer,
)
from tf_transformer.layers._ops import dense, gather, matmul_keys, softmax, split


@keras.saving.register_keras_serializable(package="tf_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head scaled dot-product attention (Vaswani et al., 2017, section 3.2).

    MultiHead(Q, K, V) = Concat(head_1..head_h) W^O with head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k))
    V W_i^V. W^K and W^V are one fused kernel (`key_value_kernel`), so keys and values come from one
    matmul and a decoder can compute them once for cross-attention. The softmax always runs in float32.

    Args:
        num_heads: number of heads h.
        d_model: width of the output (and of the queries' input in the paper).
        d_k: width of each head's queries and keys; None means d_model / num_heads.
        d_v: width of each head's values; None means d_model / num_heads.
        attention_dropout: dropout rate on the attention weights.
        attention_window: None, or r to let self-attention see only keys with |i - j| <= r
            (the paper's restricted self-attention). Not applied to cross-attention.
        use_bias: whether the projections have biases.

    Call arguments:
        query: `[batch, query_len, d_in]`.
        value: `[batch, key_len, d_value]` for cross-attention; None for self-attention over `query`.
        attention_mask: boolean, broadcastable to `[batch, num_heads, query_len, key_len]`,
            True where the query may attend (see `tf_transformer.layers.masking`).
        cache: for decoding; its type (see `KeyValueCache`) says the mode. A self-attention cache from
            `empty_cache`, with `decode_index`: either a `SelfAttentionBuffer` `{"key": [batch, num_heads,
            max_len, d_k], "value": [..., d_v]}` where the keys and values of `query` are written at positions
            `decode_index ...`, or a `GrowingSelfAttentionCache` `{"past_key": [batch, num_heads, decode_index,
            d_k], "past_value": [..., d_v]}` that they extend; the query attends causally to the cache
            (positions after its own are masked). Or a `CrossAttentionCache` from `compute_key_value(memory)`,
            without `decode_index`: keys and values precomputed for cross-attention; `value` must then be
            None. Such a cache of `cache_batch` rows also serves a query of `cache_batch * k` rows, each k
            consecutive rows sharing one cache row (beam search's hypotheses of a sentence), with an
            `attention_mask` of `cache_batch` rows.
        decode_index: the absolute position of the first query (int scalar) in incremental decoding.
        training: whether dropout is active.
        return_attention_scores: also return the float32 weights `[batch, num_heads, query_len, key_len]`.

    Returns:
        `[batch, query_len, d_model]`; then the updated cache when `decode_index` is given; then the
        attention weights when `return_attention_scores` is True.

    Mask behaviour: masked positions get a large finite negative logit, so a fully masked row yields
    uniform weights and no NaN.

    Example:

    >>> import numpy as np
    >>> attention = MultiHeadAttention(num_heads=2, d_model=8)
    >>> x = np.random.rand(3, 5, 8).astype("float32")
    >>> tuple(attention(x).shape)
    (3, 5, 8)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, https://arxiv.org/abs/1706.03762
    """

    # Kernels that `quantize` makes int8, each with the axis its scales reduce (the input axis).
    INT8_KERNELS = {"query_kernel": 0, "key_value_kernel": 0, "output_kernel": 0}

    def __init__(
        self,
        num_heads,
        d_model,
        d_k=None,
        d_v=None,
        attention_dropout=0.0,
        attention_window=None,
        use_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if (d_k is None or d_v is None) and d_model % num_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}. "
                "Fix: choose d_model a multiple of num_heads, or pass d_k and d_v."
            )
        self.num_heads = num_heads
        self.d_model = d_model
        self.d_k = d_k
        self.d_v = d_v
        self.attention_dropout = attention_dropout
        self.attention_window = attention_window
        self.use_bias = use_bias
        self.key_dim = d_k if d_k is not None else d_model // num_heads
        self.value_dim = d_v if d_v is not None else d_model // num_heads
        self.dropout_layer = keras.layers.Dropout(attention_dropout, name="attention_dropout", dtype=self.dtype_policy)

    def build(self, query_shape, value_shape=None):
        query_dim = query_shape[-1]
        value_dim = query_dim if value_shape is None else value_shape[-1]
        keys, values = self.num_heads * self.key_dim, self.num_heads * self.value_dim
        self.query_kernel = self.add_weight(name="query_kernel", shape=(query_dim, keys), initializer="glorot_uniform")
        # [W^K | W^V]: one matmul gives keys and values.
        self.key_value_kernel = self.add_weight(
            name="key_value_kernel", shape=(value_dim, keys + values), initializer="glorot_uniform"
        )
        self.output_kernel = self.add_weight(
            name="output_kernel", shape=(values, self.d_model), initializer="glorot_uniform"
        )
        if self.use_bias:
            self.query_bias = self.add_weight(name="query_bias", shape=(keys,), initializer="zeros")
            self.key_value_bias = self.add_weight(name="key_value_bias", shape=(keys + values,), initializer="zeros")
            self.output_bias = self.add_weight(name="output_bias", shape=(self.d_model,), initializer="zeros")

    def quantize(self, mode=None, type_check=True, config=None):
        """Weight-only int8 (`mode="int8"`): the three kernels become int8 with one float32 scale per output
        channel (`<kernel>_scale`); biases and activations stay float. In place, for inference."""
        del type_check, config  # Keras' arguments (its wrapper of `quantize` makes a config); the scheme is fixed
        if _quantized.check_mode(mode) == _quantized.INT8:
            for name, axis in self.INT8_KERNELS.items():
                _quantized.quantize_variable(self, name, axis)
            _keras_internals.mark_quantized(self)

    def _split_heads(self, x, head_dim):
        # [batch, length, num_heads * head_dim] -> [batch, num_heads, length, head_dim]: heads lead, so every
        # attention product is a plain batched matmul (an einsum over [b, l, h, d] transposes at each call: slow).
        batch, length = ops.shape(x)[:2]
        x = ops.reshape(x, (batch, length, self.num_heads, head_dim))
        return ops.transpose(x, (0, 2, 1, 3))

    def compute_key_value(self, value):
        """Keys and values `[batch, num_heads, key_len, d_k or d_v]` of `value` `[batch, key_len, d_value]`:
        the cache of cross-attention, a `CrossAttentionCache`."""
        # Also called outside `call` (to fill a decoding cache), where Keras does not autocast.
        dtype = self.compute_dtype
        bias = ops.cast(self.key_value_bias, dtype) if self.use_bias else None
        key_value = dense(ops.cast(value, dtype), _quantized.read(self, "key_value_kernel", dtype), bias)
        key, value = split(key_value, [self.num_heads * self.key_dim, self.num_heads * self.value_dim], axis=-1)
        key, value = self._split_heads(key, self.key_dim), self._split_heads(value, self.value_dim)
        return CrossAttentionCache(key=key, value=value)

    def empty_cache(self, batch_size, max_length, dtype=None):
        """An empty self-attention cache for incremental decoding.

        With `max_length` (an int or int scalar tensor): a `SelfAttentionBuffer`, zeros `{"key": [batch_size,
        num_heads, max_length, d_k], "value": [..., d_v]}`, written in place at each call's `decode_index`. Its
        shape never changes, which XLA needs, but every step rewrites the whole buffer.

        With `max_length=None`: a `GrowingSelfAttentionCache` `{"past_key": [batch_size, num_heads, 0, d_k],
        "past_value": [..., d_v]}` that each call extends by its new positions, so a step copies only the
        filled part. A TensorFlow while loop carrying it needs the shape invariant `[batch, num_heads, None, d]` on
        its length axis (its `shape_invariants()`, which the decoders use); it does not compile under XLA.
        """
        dtype = dtype or self.compute_dtype
        if max_length is None:
            cache_type, names, length = GrowingSelfAttentionCache, GROWING_CACHE_KEYS, 0
        else:
            cache_type, names, length = SelfAttentionBuffer, ("key", "value"), max_length
        return cache_type(
            {
                names[0]: ops.zeros((batch_size, self.num_heads, length, self.key_dim), dtype),
                names[1]: ops.zeros((batch_size, self.num_heads, length, self.value_dim), dtype),
            }
        )

    def call(
        self,
        query,
        value=None,
        attention_mask=None,
        cache=None,
        decode_index=None,
        training=None,
        return_attention_scores=False,
    ):
        growing = isinstance(cache, GrowingSelfAttentionCache)
        incremental = growing or isinstance(cache, SelfAttentionBuffer)
        precomputed = isinstance(cache, CrossAttentionCache)
        _check_cache(cache, incremental, precomputed, value, decode_index)
        is_self_attention = value is None and not precomputed

        query_heads = dense(
            query, _quantized.read(self, "query_kernel", query.dtype), self.query_bias if self.use_bias else None
        )
        if precomputed:
            # Beam search: k consecutive query rows (one sentence's hypotheses) share one cache row. Their
            # queries become k * query_len positions of that row, so the cache is read once, not k times.
            query_heads = ops.reshape(query_heads, (ops.shape(cache["key"])[0], -1, query_heads.shape[-1]))
        # Scaling the queries is cheaper than scaling the [query_len, key_len] logits.
        query_heads = self._split_heads(query_heads, self.key_dim) * ops.cast(self.key_dim**-0.5, query.dtype)

        if precomputed:
            key_value = cache
        else:
            key_value = self.compute_key_value(query if value is None else value)
        if growing:
            key_value = {
                name: ops.concatenate([cache[past], key_value[name]], axis=2)
                for name, past in zip(("key", "value"), GROWING_CACHE_KEYS, strict=True)
            }
        elif incremental:
            key_value = SelfAttentionBuffer(
                (name, _write_at(cache[name], key_value[name], decode_index)) for name in key_value
            )

        # [batch, num_heads, query_len, key_len]
        logits = matmul_keys(query_heads, key_value["key"])
        query_length, key_length = ops.shape(logits)[2:]
        offset = decode_index if incremental else 0
        mask = attention_mask
        # A single query at the end of a growing cache sees every key: no look-ahead mask to apply.
        if incremental and not (growing and query.shape[1] == 1):
            mask = masking.combine_masks(mask, masking.look_ahead_mask(query_length, key_length, offset))
        if self.attention_window is not None and (is_self_attention or incremental):
            mask = masking.combine_masks(
                mask, masking.window_mask(query_length, key_length, self.attention_window, offset)
            )
        logits = ops.cast(logits, "float32")
        if mask is not None:
            logits = ops.where(mask, logits, masking.mask_value("float32"))
        weights = softmax(logits)
        dropped = self.dropout_layer(ops.cast(weights, query_heads.dtype), training=training)

        context = ops.transpose(ops.matmul(dropped, key_value["value"]), (0, 2, 1, 3))  # [batch, query_len, h, d_v]
        query_rows, query_length = ops.shape(query)[:2]
        context = ops.reshape(context, (query_rows, query_length, self.num_heads * self.value_dim))
        output = dense(
            context, _quantized.read(self, "output_kernel", context.dtype), self.output_bias if self.use_bias else None
        )
        if precomputed and return_attention_scores:
            # [cache rows, h, k * query_len, keys] -> [query rows, h, query_len, keys]
            cache_rows, keys = ops.shape(weights)[0], ops.shape(weights)[-1]
            weights = ops.reshape(weights, (cache_rows, self.num_heads, -1, query_length, keys))
            weights = ops.reshape(
                ops.transpose(weights, (0, 2, 1, 3, 4)), (query_rows, self.num_heads, query_length, keys)
            )

        results = [output]
        if growing:
            results.append(
                GrowingSelfAttentionCache(zip(GROWING_CACHE_KEYS, (key_value["key"], key_value["value"]), strict=True))
            )
        elif incremental:
            results.append(key_value)
        if return_attention_scores:
            results.append(weights)
        return results[0] if len(results) == 1 else tuple(results)

    def compute_output_shape(self, query_shape, value_shape=None):
        return tuple(query_shape[:-1]) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            d_model=self.d_model,
            d_k=self.d_k,
            d_v=self.d_v,
            attention_dropout=self.attention_dropout,
            attention_window=self.attention_window,
            use_bias=self.use_bias,
        )
        return config


def _check_cache(cache, incremental, precomputed, value, decode_index):
    """Errors for a cache that `MultiHeadAttention.call` cannot use with the other arguments."""
    if cache is None:
        return
    if not (incremental or precomputed):
        raise TypeError(
            f"cache: expected a KeyValueCache (SelfAttentionBuffer, GrowingSelfAttentionCache or "
            f"CrossAttentionCache), got {type(cache).__name__}. Fix: make it with `empty_cache` (self-attention) "
            "or `compute_key_value` (cross-attention), and pass on the cache each call returns."
        )
    if incremental and decode_index is None:
        raise ValueError(
            f"cache: a {type(cache).__name__} needs `decode_index`, the position of the first query. "
            "Fix: pass decode_index, or a `compute_key_value` cache for cross-attention."
        )
    if precomputed and decode_index is not None:
        raise ValueError(
            "cache: a CrossAttentionCache takes no `decode_index` (it holds a memory's keys, not a sequence's). "
            "Fix: pass decode_index=None, or an `empty_cache` cache for incremental self-attention."
        )
    if precomputed and value is not None:
        raise ValueError("A precomputed key/value cache replaces `value`: pass value=None with it.")


def _write_at(cache, update, index):
    """`cache` `[batch, heads, max_len, d]` with `update` `[batch, heads, n, d]` at positions index..index+n-1.

    A select rather than a scatter or a pad: the index may be a loop variable, and XLA needs compile-time
    pad sizes. One graph for eager, traced and XLA-compiled calls. The usual single step (n = 1, known while
    tracing) broadcasts the update; longer updates gather row j - index of the update for row j.
    """
    max_length, length = ops.shape(cache)[2], ops.shape(update)[2]
    positions = ops.arange(max_length)
    if update.shape[2] == 1:
        return ops.where(ops.reshape(ops.equal(positions, index), (1, 1, -1, 1)), update, cache)
    written = ops.reshape((positions >= index) & (positions < index + length), (1, 1, -1, 1))
    spread = gather(update, ops.clip(positions - index, 0, length - 1), axis=2)
    return ops.where(written, spread, cache)
