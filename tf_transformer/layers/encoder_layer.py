"""One Transformer encoder layer: self-attention and feed-forward, each with residual and LayerNorm."""

from __future__ import annotations

import keras

from tf_transformer.layers._building import build_sublayer
from tf_transformer.layers._options import SublayerOptions, TransformerBlock


@keras.saving.register_keras_serializable(package="tf_transformer")
class EncoderLayer(TransformerBlock):
    """Encoder layer (Vaswani et al., 2017, section 3.1): self-attention, then feed-forward.

    Each sublayer is wrapped as LayerNorm(x + Dropout(Sublayer(x))) (post-norm, the paper), or as
    x + Dropout(Sublayer(LayerNorm(x))) with `norm_first=True` (pre-norm; the stack then ends with a norm).

    Args:
        d_model, num_heads, d_ff: the paper's sizes.
        dropout: rate on each sublayer output before the residual sum.
        attention_dropout: rate on the attention weights.
        d_k, d_v: per-head query/key and value widths; None means d_model / num_heads.
        norm_first: pre-norm instead of the paper's post-norm.
        attention_window: None, or r to restrict self-attention to |i - j| <= r.
        layer_norm_epsilon: epsilon of the LayerNormalizations.
        activation: feed-forward non-linearity.
        activation_dropout: rate on the feed-forward's inner activations.

    Call arguments:
        inputs: `[batch, length, d_model]`.
        attention_mask: boolean broadcastable to `[batch, num_heads, length, length]`, True = may attend;
            normally `masking.padding_mask(source_ids)`.
        training: whether dropout is active.
        return_attention_scores: also return the self-attention weights `[batch, num_heads, length, length]`.

    Returns:
        `[batch, length, d_model]` (and the weights when asked).

    Example:

    >>> import numpy as np
    >>> layer = EncoderLayer(d_model=8, num_heads=2, d_ff=16)
    >>> tuple(layer(np.random.rand(2, 5, 8).astype("float32")).shape)
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
        self.feed_forward = self._feed_forward()
        self.feed_forward_norm = self._layer_norm("feed_forward_norm")
        self.dropout_layer = keras.layers.Dropout(self.dropout, name="dropout", dtype=self.dtype_policy)

    def build(self, inputs_shape):
        for sublayer in (self.self_attention, self.self_attention_norm, self.feed_forward, self.feed_forward_norm):
            build_sublayer(sublayer, inputs_shape)

    def call(self, inputs, attention_mask=None, training=None, return_attention_scores=False):
        x, scores = self._residual(
            inputs,
            lambda y: self.self_attention(
                y, attention_mask=attention_mask, training=training, return_attention_scores=True
            ),
            self.self_attention_norm,
            training,
        )
        x = self._residual(x, lambda y: self.feed_forward(y, training=training), self.feed_forward_norm, training)
        return (x, scores) if return_attention_scores else x
