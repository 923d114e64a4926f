"""Learned position embedding (the paper's Table 3, row E)."""

from __future__ import annotations

import keras
from keras import ops

from tf_transformer.layers.position import position_slice


@keras.saving.register_keras_serializable(package="tf_transformer")
class LearnedPositionEmbedding(keras.layers.Layer):
    """Adds a trained embedding of each position, the paper's alternative to sinusoids.

    Args:
        max_length: number of positions that have an embedding; longer inputs raise an error.
        d_model: width of the inputs and of each position embedding.

    Call arguments:
        inputs: `[batch, length, d_model]` embeddings.
        start_index: absolute position of the first input (the step in incremental decoding).

    Returns:
        `inputs + P[start_index : start_index + length]`, `[batch, length, d_model]`.

    Example:

    >>> import numpy as np
    >>> layer = LearnedPositionEmbedding(max_length=16, d_model=8)
    >>> tuple(layer(np.zeros((2, 4, 8), "float32")).shape)
    (2, 4, 8)

    Reference: Vaswani et al., 2017, section 3.5 and Table 3 (E); Gehring et al., 2017.
    """

    def __init__(self, max_length, d_model, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length
        self.d_model = d_model

    def build(self, inputs_shape):
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.max_length, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model**-0.5),
        )

    def call(self, inputs, start_index=0):
        positions = position_slice(self.position_embeddings, inputs, start_index, self.max_length)
        return inputs + ops.cast(positions, inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(max_length=self.max_length, d_model=self.d_model)
        return config
