"""One Transformer decoder layer: masked self-attention, encoder-decoder attention, feed-forward."""

from __future__ import annotations

import keras

from tf_transformer.layers._building import build_sublayer
from tf_transformer.layers.attention import MultiHeadAttention
from tf_transformer.layers.feed_forward import FeedForward


@keras.saving.register_keras_serializable(package="tf_transformer")
class DecoderLayer(keras.layers.Layer):
    """Decoder layer (Vaswani et al., 2017, section 3.1), with a key/value cache for decoding.

    Sublayers: masked self-attention, attention over the encoder output ("memory"), feed-forward; each
    wrapped post-norm (the paper) or pre-norm as in `EncoderLayer`.

    Args:
        d_model, num_heads, d_ff, dropout, attention_dropout, d_k, d_v, norm_first, attention_window,
        layer_norm_epsilon, activation: as in `EncoderLayer` (the window restricts self-attention only).

    Call arguments:
        inputs: `[batch, target_len, d_model]`.
        memory: encoder output `[batch, source_len, d_model]`; may be None when `cache` holds its keys.
        self_attention_mask: boolean broadcastable to `[batch, heads, target_len, target_len]`, normally
            `combine_masks(padding_mask(target_ids), look_ahead_mask(target_len))`. True = may attend.
        memory_mask: boolean broadcastable to `[batch, heads, target_len, source_len]`, normally
            `padding_mask(source_ids)`.
        cache: for incremental decoding, `{"self": ..., "cross": {"key", "value"}}` from
            `Decoder.init_cache`; the self-attention part (a fixed buffer or a growing cache, see
            `MultiHeadAttention.empty_cache`) is updated at `decode_index`.
        decode_index: the absolute position of the first input (int scalar) when decoding with `cache`.
            Causal masking of the cache is then automatic.
        training: whether dropout is active.
        return_attention_scores: also return `(self_weights, cross_weights)`.

    Returns:
        `[batch, target_len, d_model]`; then the updated cache if `decode_index` is given; then the
        attention weights if asked.

    Example:

    >>> import numpy as np
    >>> layer = DecoderLayer(d_model=8, num_heads=2, d_ff=16)
    >>> memory = np.random.rand(2, 6, 8).astype("float32")
    >>> layer(np.random.rand(2, 5, 8).astype("float32"), memory).shape
    TensorShape([2, 5, 8])

    Reference: Vaswani et al., 2017, https://arxiv.org/abs/1706.03762
    """

    def __init__(
        self,
        d_model,
        num_heads,
        d_ff,
        dropout=0.1,
        attention_dropout=0.0,
        d_k=None,
        d_v=None,
        norm_first=False,
        attention_window=None,
        layer_norm_epsilon=1e-6,
        activation="relu",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.d_k = d_k
        self.d_v = d_v
        self.norm_first = norm_first
        self.attention_window = attention_window
        self.layer_norm_epsilon = layer_norm_epsilon
        self.activation = activation
        self.self_attention = MultiHeadAttention(
            num_heads,
            d_model,
            d_k=d_k,
            d_v=d_v,
            attention_dropout=attention_dropout,
            attention_window=attention_window,
            name="self_attention",
            dtype=self.dtype_policy,
        )
        self.self_attention_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="self_attention_norm", dtype=self.dtype_policy
        )
        self.cross_attention = MultiHeadAttention(
            num_heads,
            d_model,
            d_k=d_k,
            d_v=d_v,
            attention_dropout=attention_dropout,
            name="cross_attention",
            dtype=self.dtype_policy,
        )
        self.cross_attention_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="cross_attention_norm", dtype=self.dtype_policy
        )
        self.feed_forward = FeedForward(
            d_model, d_ff, activation=activation, name="feed_forward", dtype=self.dtype_policy
        )
        self.feed_forward_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="feed_forward_norm", dtype=self.dtype_policy
        )
        self.dropout_layer = keras.layers.Dropout(dropout, name="dropout", dtype=self.dtype_policy)

    def build(self, inputs_shape, memory_shape=None):
        memory_shape = inputs_shape if memory_shape is None else memory_shape
        build_sublayer(self.self_attention, inputs_shape)
        build_sublayer(self.cross_attention, inputs_shape, memory_shape)
        for sublayer in (
            self.self_attention_norm,
            self.cross_attention_norm,
            self.feed_forward,
            self.feed_forward_norm,
        ):
            build_sublayer(sublayer, inputs_shape)

    def init_cache(self, memory, max_length):
        """A cache for decoding up to `max_length` tokens against `memory` `[batch, source_len, d_model]`;
        `max_length=None` gives a growing self-attention cache (see `MultiHeadAttention.empty_cache`)."""
        batch_size = keras.ops.shape(memory)[0]
        return {
            "self": self.self_attention.empty_cache(batch_size, max_length, self.compute_dtype),
            "cross": self.cross_attention.compute_key_value(memory),
        }

    def call(
        self,
        inputs,
        memory=None,
        self_attention_mask=None,
        memory_mask=None,
        cache=None,
        decode_index=None,
        training=None,
        return_attention_scores=False,
    ):
        incremental = cache is not None and decode_index is not None

        x = self.self_attention_norm(inputs) if self.norm_first else inputs
        if incremental:
            attended, self_cache, self_scores = self.self_attention(
                x,
                attention_mask=self_attention_mask,
                cache=cache["self"],
                decode_index=decode_index,
                training=training,
                return_attention_scores=True,
            )
        else:
            attended, self_scores = self.self_attention(
                x, attention_mask=self_attention_mask, training=training, return_attention_scores=True
            )
        x = inputs + self.dropout_layer(attended, training=training)
        if not self.norm_first:
            x = self.self_attention_norm(x)

        y = self.cross_attention_norm(x) if self.norm_first else x
        if cache is not None:
            attended, cross_scores = self.cross_attention(
                y, attention_mask=memory_mask, cache=cache["cross"], training=training, return_attention_scores=True
            )
        else:
            attended, cross_scores = self.cross_attention(
                y, memory, attention_mask=memory_mask, training=training, return_attention_scores=True
            )
        x = x + self.dropout_layer(attended, training=training)
        if not self.norm_first:
            x = self.cross_attention_norm(x)

        y = self.feed_forward_norm(x) if self.norm_first else x
        x = x + self.dropout_layer(self.feed_forward(y), training=training)
        if not self.norm_first:
            x = self.feed_forward_norm(x)

        results = [x]
        if incremental:
            results.append({"self": self_cache, "cross": cache["cross"]})
        if return_attention_scores:
            results.append((self_scores, cross_scores))
        return results[0] if len(results) == 1 else tuple(results)

    def compute_output_shape(self, inputs_shape, memory_shape=None):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model,
            num_heads=self.num_heads,
            d_ff=self.d_ff,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            d_k=self.d_k,
            d_v=self.d_v,
            norm_first=self.norm_first,
            attention_window=self.attention_window,
            layer_norm_epsilon=self.layer_norm_epsilon,
            activation=self.activation,
        )
        return config
