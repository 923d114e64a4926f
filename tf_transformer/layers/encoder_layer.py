"""One Transformer encoder layer: self-attention and feed-forward, each with residual and LayerNorm."""

from __future__ import annotations

import keras

from tf_transformer.layers._building import build_sublayer
from tf_transformer.layers.attention import MultiHeadAttention
from tf_transformer.layers.feed_forward import FeedForward


@keras.saving.register_keras_serializable(package="tf_transformer")
class EncoderLayer(keras.layers.Layer):
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
    >>> layer(np.random.rand(2, 5, 8).astype("float32")).shape
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
        self.feed_forward = FeedForward(
            d_model, d_ff, activation=activation, name="feed_forward", dtype=self.dtype_policy
        )
        self.feed_forward_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="feed_forward_norm", dtype=self.dtype_policy
        )
        self.dropout_layer = keras.layers.Dropout(dropout, name="dropout", dtype=self.dtype_policy)

    def build(self, inputs_shape):
        for sublayer in (self.self_attention, self.self_attention_norm, self.feed_forward, self.feed_forward_norm):
            build_sublayer(sublayer, inputs_shape)

    def call(self, inputs, attention_mask=None, training=None, return_attention_scores=False):
        x = self.self_attention_norm(inputs) if self.norm_first else inputs
        attended, scores = self.self_attention(
            x, attention_mask=attention_mask, training=training, return_attention_scores=True
        )
        x = inputs + self.dropout_layer(attended, training=training)
        if not self.norm_first:
            x = self.self_attention_norm(x)

        y = self.feed_forward_norm(x) if self.norm_first else x
        x = x + self.dropout_layer(self.feed_forward(y), training=training)
        if not self.norm_first:
            x = self.feed_forward_norm(x)
        return (x, scores) if return_attention_scores else x

    def compute_output_shape(self, inputs_shape):
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
