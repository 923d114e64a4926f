"""The residual connection around each sublayer of the encoder and decoder layers (private)."""

from __future__ import annotations

from tf_transformer.layers._options import SizedLayer
from tf_transformer.layers.attention import MultiHeadAttention
from tf_transformer.layers.feed_forward import FeedForward


class ResidualBlock(SizedLayer):
    """Base of `EncoderLayer` and `DecoderLayer`: makes their attention and feed-forward sublayers from the
    sizes and options, and wraps each in the residual connection. A subclass sets `self.dropout_layer`."""

    def _attention(self, name, attention_window=None):
        return MultiHeadAttention(
            self.num_heads,
            self.d_model,
            d_k=self.d_k,
            d_v=self.d_v,
            attention_dropout=self.attention_dropout,
            attention_window=attention_window,
            name=name,
            dtype=self.dtype_policy,
        )

    def _feed_forward(self):
        return FeedForward(
            self.d_model,
            self.d_ff,
            activation=self.activation,
            activation_dropout=self.activation_dropout,
            name="feed_forward",
            dtype=self.dtype_policy,
        )

    def _residual(self, inputs, sublayer, norm, training=None):
        """LayerNorm(x + Dropout(Sublayer(x))) (post-norm, the paper's section 5.4), or with `norm_first`
        x + Dropout(Sublayer(LayerNorm(x))) (pre-norm).

        `sublayer` is a callable of the (normalised) inputs that returns the sublayer's output, or a tuple of
        the output and more (attention weights, a cache); the result is the new x, or the tuple with x first.
        """
        outputs = sublayer(norm(inputs) if self.norm_first else inputs)
        output, extras = (outputs[0], tuple(outputs[1:])) if isinstance(outputs, tuple) else (outputs, ())
        x = inputs + self.dropout_layer(output, training=training)
        if not self.norm_first:
            x = norm(x)
        return (x, *extras) if extras else x
