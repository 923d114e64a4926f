"""What the encoder and decoder layers and stacks share (private): their options, and their one base class."""

from __future__ import annotations

import dataclasses

import keras

from tf_transformer.layers.attention import MultiHeadAttention
from tf_transformer.layers.feed_forward import FeedForward


@dataclasses.dataclass(frozen=True)
class SublayerOptions:
    """The keyword arguments that `EncoderLayer`, `DecoderLayer`, `Encoder` and `Decoder` all take and pass down to
    their sublayers, with the defaults their signatures list (tests/layers/test_sublayer_plumbing.py checks that
    they agree); `EncoderLayer`'s docstring says what each means. The names are those of the `TransformerConfig`
    fields, so `SublayerOptions.of(config)` reads them from a config."""

    dropout: float = 0.1
    attention_dropout: float = 0.0
    d_k: int | None = None
    d_v: int | None = None
    norm_first: bool = False
    attention_window: int | None = None
    layer_norm_epsilon: float = 1e-6
    activation: str = "relu"
    activation_dropout: float = 0.0

    @classmethod
    def of(cls, source):
        """The options stored as attributes of `source`: a layer, or a `TransformerConfig`."""
        return cls(**{field.name: getattr(source, field.name) for field in dataclasses.fields(cls)})

    def as_kwargs(self):
        return dataclasses.asdict(self)


class TransformerBlock(keras.layers.Layer):
    """The base of `EncoderLayer`, `DecoderLayer`, `Encoder` and `Decoder` (each lists its arguments in its own
    `__init__` and passes them here): stores `d_model`, `num_heads`, `d_ff` and the `SublayerOptions` as attributes
    of the same names, returns them from `get_config`, and makes the sublayers they configure."""

    def __init__(self, d_model, num_heads, d_ff, options, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_ff = d_ff
        for name, value in options.as_kwargs().items():
            setattr(self, name, value)

    def _sublayer_options(self):
        return SublayerOptions.of(self)

    def _layer_norm(self, name):
        return keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, name=name, dtype=self.dtype_policy)

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

    def _stack(self, layer_class):
        """Makes a stack's `num_layers` `layer_class` layers, "layer_0", ..., with this block's sizes and options,
        and its `final_norm` with `norm_first` (pre-norm layers leave their output un-normalised)."""
        options = self._sublayer_options().as_kwargs()
        # Named attributes, not a list: a TensorFlow checkpoint does not see sublayers Keras keeps in a list.
        for index in range(self.num_layers):
            layer = layer_class(
                self.d_model, self.num_heads, self.d_ff, name=f"layer_{index}", dtype=self.dtype_policy, **options
            )
            setattr(self, f"layer_{index}", layer)
        self.final_norm = self._layer_norm("final_norm") if self.norm_first else None

    def _residual(self, inputs, sublayer, norm, training=None):
        """LayerNorm(x + Dropout(Sublayer(x))) (post-norm, the paper's section 5.4), or with `norm_first`
        x + Dropout(Sublayer(LayerNorm(x))) (pre-norm); the layer's `dropout_layer` is the dropout.

        `sublayer` is a callable of the (normalised) inputs that returns the sublayer's output, or a tuple of
        the output and more (attention weights, a cache); the result is the new x, or the tuple with x first.
        """
        outputs = sublayer(norm(inputs) if self.norm_first else inputs)
        output, extras = (outputs[0], tuple(outputs[1:])) if isinstance(outputs, tuple) else (outputs, ())
        x = inputs + self.dropout_layer(output, training=training)
        if not self.norm_first:
            x = norm(x)
        return (x, *extras) if extras else x

    def compute_output_shape(self, inputs_shape, memory_shape=None):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model, num_heads=self.num_heads, d_ff=self.d_ff, **self._sublayer_options().as_kwargs()
        )
        return config
