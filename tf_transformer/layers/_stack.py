"""What the encoder and decoder stacks share (private)."""

from __future__ import annotations

from tf_transformer.layers._options import SizedLayer, with_sublayer_options


class LayerStack(SizedLayer):
    """Base of `Encoder` and `Decoder`: `num_layers` `layer_class` layers named "layer_0", ... built with the
    stack's sizes and options, and a final LayerNorm with `norm_first` (pre-norm layers leave their output
    un-normalised)."""

    layer_class = None  # EncoderLayer or DecoderLayer

    @with_sublayer_options
    def __init__(self, num_layers, d_model, num_heads, d_ff, **kwargs):
        super().__init__(d_model, num_heads, d_ff, **kwargs)
        self.num_layers = num_layers
        options = self._sublayer_options().as_kwargs()
        # Named attributes, not a list: tf.train.Checkpoint does not see sublayers Keras keeps in a list.
        for index in range(num_layers):
            layer = self.layer_class(
                d_model, num_heads, d_ff, name=f"layer_{index}", dtype=self.dtype_policy, **options
            )
            setattr(self, f"layer_{index}", layer)
        self.final_norm = self._layer_norm("final_norm") if self.norm_first else None

    @property
    def layers(self):
        """The stacked layers, bottom first."""
        return [getattr(self, f"layer_{index}") for index in range(self.num_layers)]

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers)
        return config
