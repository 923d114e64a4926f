"""The decoder stack: N decoder layers (and a final LayerNorm when pre-norm), with a decoding cache."""

from __future__ import annotations

import keras

from tf_transformer.layers._building import build_sublayer
from tf_transformer.layers._options import SublayerOptions, TransformerBlock
from tf_transformer.layers.decoder_layer import DecoderLayer


@keras.saving.register_keras_serializable(package="tf_transformer")
class Decoder(TransformerBlock):
    """A stack of `num_layers` `DecoderLayer`s over embedded target inputs.

    Args:
        num_layers: N.
        d_model, num_heads, d_ff, dropout, attention_dropout, d_k, d_v, norm_first, attention_window,
        layer_norm_epsilon, activation, activation_dropout: passed to every `DecoderLayer`.

    Call arguments:
        inputs: `[batch, target_len, d_model]` (embeddings + positions, after dropout).
        memory: encoder output `[batch, source_len, d_model]` (may be None when decoding with a cache).
        self_attention_mask: boolean, broadcastable to `[batch, heads, target_len, target_len]`, True = may
            attend; normally padding AND look-ahead. With a cache the look-ahead part is automatic.
        memory_mask: boolean, broadcastable to `[batch, heads, target_len, source_len]`.
        cache: a list with one cache per layer, from `init_cache`, for incremental decoding.
        decode_index: absolute position of the first input (int scalar) when decoding with `cache`.
        training: whether dropout is active.
        return_attention_scores: also return a list of `(self_weights, cross_weights)` per layer.

    Returns:
        `[batch, target_len, d_model]`; then the updated cache list if `decode_index` is given; then the
        weights if asked.

    Example:

    >>> import numpy as np
    >>> decoder = Decoder(num_layers=2, d_model=8, num_heads=2, d_ff=16)
    >>> memory = np.random.rand(2, 6, 8).astype("float32")
    >>> tuple(decoder(np.random.rand(2, 5, 8).astype("float32"), memory).shape)
    (2, 5, 8)

    Reference: Vaswani et al., 2017, section 3.1.
    """

    def __init__(
        self,
        num_layers,
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
        self.num_layers = num_layers
        self._stack(DecoderLayer)

    @property
    def layers(self):
        """The stacked layers, bottom first."""
        return [getattr(self, f"layer_{index}") for index in range(self.num_layers)]

    def build(self, inputs_shape, memory_shape=None):
        for layer in self.layers:
            build_sublayer(layer, inputs_shape, memory_shape)
        build_sublayer(self.final_norm, inputs_shape)

    def init_cache(self, memory, max_length):
        """The caches of `DecoderLayer.init_cache(memory, max_length)`, one per layer, bottom first."""
        return [layer.init_cache(memory, max_length) for layer in self.layers]

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
        x, new_cache, all_scores = inputs, [], []
        for index, layer in enumerate(self.layers):
            outputs = layer(
                x,
                memory,
                self_attention_mask=self_attention_mask,
                memory_mask=memory_mask,
                cache=None if cache is None else cache[index],
                decode_index=decode_index,
                training=training,
                return_attention_scores=True,
            )
            x = outputs[0]
            if incremental:
                new_cache.append(outputs[1])
            all_scores.append(outputs[-1])
        if self.final_norm is not None:
            x = self.final_norm(x)
        results = [x]
        if incremental:
            results.append(new_cache)
        if return_attention_scores:
            results.append(all_scores)
        return results[0] if len(results) == 1 else tuple(results)

    def get_config(self):
        return {**super().get_config(), "num_layers": self.num_layers}
