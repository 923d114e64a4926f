"""The encoder stack: N encoder layers (and a final LayerNorm when pre-norm)."""

from __future__ import annotations

import keras

from tf_transformer.layers._building import build_sublayer
from tf_transformer.layers._options import SublayerOptions, TransformerBlock
from tf_transformer.layers.encoder_layer import EncoderLayer


@keras.saving.register_keras_serializable(package="tf_transformer")
class Encoder(TransformerBlock):
    """A stack of `num_layers` `EncoderLayer`s over embedded inputs.

    With `norm_first=True` the stack ends with a LayerNorm, since pre-norm layers leave their output
    un-normalised.

    Args:
        num_layers: N.
        d_model, num_heads, d_ff, dropout, attention_dropout, d_k, d_v, norm_first, attention_window,
        layer_norm_epsilon, activation, activation_dropout: passed to every `EncoderLayer`.

    Call arguments:
        inputs: `[batch, source_len, d_model]` (embeddings + positions, after dropout).
        attention_mask: boolean broadcastable to `[batch, heads, source_len, source_len]`, True = may
            attend; normally `masking.padding_mask(source_ids)`.
        training: whether dropout is active.
        return_attention_scores: also return a list of each layer's `[batch, heads, source_len, source_len]`.

    Returns:
        `[batch, source_len, d_model]` (and the list of weights when asked).

    Example:

    >>> import numpy as np
    >>> encoder = Encoder(num_layers=2, d_model=8, num_heads=2, d_ff=16)
    >>> tuple(encoder(np.random.rand(2, 5, 8).astype("float32")).shape)
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
        self._stack(EncoderLayer)

    @property
    def layers(self):
        """The stacked layers, bottom first."""
        return [getattr(self, f"layer_{index}") for index in range(self.num_layers)]

    def build(self, inputs_shape):
        for layer in self.layers:
            build_sublayer(layer, inputs_shape)
        build_sublayer(self.final_norm, inputs_shape)

    def call(self, inputs, attention_mask=None, training=None, return_attention_scores=False):
        x, all_scores = inputs, []
        for layer in self.layers:
            x, scores = layer(x, attention_mask=attention_mask, training=training, return_attention_scores=True)
            all_scores.append(scores)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return (x, all_scores) if return_attention_scores else x

    def get_config(self):
        return {**super().get_config(), "num_layers": self.num_layers}
