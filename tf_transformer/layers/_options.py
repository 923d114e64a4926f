"""The arguments the encoder and decoder layers and stacks share, in one place (private)."""

from __future__ import annotations

import dataclasses
import inspect

import keras


@dataclasses.dataclass(frozen=True)
class SublayerOptions:
    """The keyword arguments, with their defaults, that `EncoderLayer`, `DecoderLayer`, `Encoder` and `Decoder`
    all take and pass down to their sublayers; `EncoderLayer`'s docstring says what each means. The names are
    those of the `TransformerConfig` fields, so `SublayerOptions.of(config)` reads them from a config."""

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
    def pop(cls, kwargs):
        """The options given in `kwargs`, removed from it (what is left goes to `keras.layers.Layer`)."""
        return cls(**{field.name: kwargs.pop(field.name) for field in dataclasses.fields(cls) if field.name in kwargs})

    @classmethod
    def of(cls, source):
        """The options stored as attributes of `source`: a layer, or a `TransformerConfig`."""
        return cls(**{field.name: getattr(source, field.name) for field in dataclasses.fields(cls)})

    def as_kwargs(self):
        return dataclasses.asdict(self)


def with_sublayer_options(init):
    """Lists the `SublayerOptions` (keyword-only, with their defaults) in the signature of `init(self, ...,
    **kwargs)`, which takes them from `**kwargs`: `help()`, `inspect.signature` and Keras then see every
    argument, while the names and defaults are written only in `SublayerOptions`."""
    signature = inspect.signature(init)
    *own, var_keyword = signature.parameters.values()
    options = [
        inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=field.default)
        for field in dataclasses.fields(SublayerOptions)
    ]
    init.__signature__ = signature.replace(parameters=[*own, *options, var_keyword])
    return init


class SizedLayer(keras.layers.Layer):
    """Base of the encoder and decoder layers and stacks: stores `d_model`, `num_heads`, `d_ff` and the
    `SublayerOptions` as attributes of the same names and returns them from `get_config`."""

    def __init__(self, d_model, num_heads, d_ff, **kwargs):
        options = SublayerOptions.pop(kwargs)
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

    def compute_output_shape(self, inputs_shape, memory_shape=None):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model, num_heads=self.num_heads, d_ff=self.d_ff, **self._sublayer_options().as_kwargs()
        )
        return config
