"""One Transformer decoder layer: masked self-attention, encoder-decoder attention, feed-forward."""

from __future__ import annotations

import keras

from tf_transformer.layers._building import build_sublayer
from tf_transformer.layers._options import SublayerOptions, TransformerBlock


@keras.saving.register_keras_serializable(package="tf_transformer")
class DecoderLayer(TransformerBlock):
    """Decoder layer (Vaswani et al., 2017, section 3.1), with a key/value cache for decoding.

    Sublayers: masked self-attention, attention over the encoder output ("memory"), feed-forward; each
    wrapped post-norm (the paper) or pre-norm as in `EncoderLayer`.

    Args:
        d_model, num_heads, d_ff, dropout, attention_dropout, d_k, d_v, norm_first, attention_window,
        layer_norm_epsilon, activation, activation_dropout: as in `EncoderLayer` (the window restricts
        self-attention only).

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
    >>> tuple(layer(np.random.rand(2, 5, 8).astype("float32"), memory).shape)
    (2, 5, 8)

    Reference: Vaswani et al., 2017, https://arxiv.org/abs/1706.03762
    """

    def __init__(
        self,
        d_model,
        num_heads,
        d_ff,
        *,
        dropout=0.1,
        attention_dropout=0.0,
        d_k=None,
        d_v=None,
        norm_first=False,
        attention_window=None,
        layer_norm_epsilon=1e-6,
        activation="relu",
        activation_dropout=0.0,
        **kwargs,
    ):
        options = SublayerOptions(
            dropout=dropout,
            attention_dropout=attention_dropout,
            d_k=d_k,
            d_v=d_v,
            norm_first=norm_first,
            attention_window=attention_window,
            layer_norm_epsilon=layer_norm_epsilon,
            activation=activation,
            activation_dropout=activation_dropout,
        )
        super().__init__(d_model, num_heads, d_ff, options, **kwargs)
        self.self_attention = self._attention("self_attention", attention_window=self.attention_window)
        self.self_attention_norm = self._layer_norm("self_attention_norm")
        self.cross_attention = self._attention("cross_attention")
        self.cross_attention_norm = self._layer_norm("cross_attention_norm")
        self.feed_forward = self._feed_forward()
        self.feed_forward_norm = self._layer_norm("feed_forward_norm")
        self.dropout_layer = keras.layers.Dropout(self.dropout, name="dropout", dtype=self.dtype_policy)

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

        x, *self_outputs = self._residual(  # self_outputs: [the updated cache (incremental),] the weights
            inputs,
            lambda y: self.self_attention(
                y,
                attention_mask=self_attention_mask,
                cache=cache["self"] if incremental else None,
                decode_index=decode_index if incremental else None,
                training=training,
                return_attention_scores=True,
            ),
            self.self_attention_norm,
            training,
        )

        def cross_attention(y):
            if cache is not None:  # the memory's keys and values, computed once by init_cache
                return self.cross_attention(
                    y, attention_mask=memory_mask, cache=cache["cross"], training=training, return_attention_scores=True
                )
            return self.cross_attention(
                y, memory, attention_mask=memory_mask, training=training, return_attention_scores=True
            )

        x, cross_scores = self._residual(x, cross_attention, self.cross_attention_norm, training)
        x = self._residual(x, lambda y: self.feed_forward(y, training=training), self.feed_forward_norm, training)

        results = [x]
        if incremental:
            results.append({"self": self_outputs[0], "cross": cache["cross"]})
        if return_attention_scores:
            results.append((self_outputs[-1], cross_scores))
        return results[0] if len(results) == 1 else tuple(results)
