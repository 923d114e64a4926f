"""Sinusoidal positional encoding (the paper's section 3.5)."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from tf_transformer.layers import _tf_fast


def sinusoidal_table(max_length: int, d_model: int) -> np.ndarray:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(...): `[max_length, d_model]`."""
    positions = np.arange(max_length, dtype=np.float64)[:, np.newaxis]
    even = np.arange(0, d_model, 2, dtype=np.float64)
    angles = positions / np.power(10000.0, even / d_model)
    table = np.zeros((max_length, d_model), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return table.astype(np.float32)


@keras.saving.register_keras_serializable(package="tf_transformer")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Adds the paper's fixed sinusoidal position encoding to a sequence of vectors.

    Args:
        max_length: the longest sequence accepted; longer inputs raise an error naming the fix.
        d_model: width of the inputs (an odd width is allowed: the last column is a sine).

    Call arguments:
        inputs: `[batch, length, d_model]` embeddings.
        start_index: absolute position of the first input (the step in incremental decoding).

    Returns:
        `inputs + PE[start_index : start_index + length]`, `[batch, length, d_model]`.

    Example:

    >>> import numpy as np
    >>> layer = SinusoidalPositionEncoding(max_length=16, d_model=8)
    >>> tuple(layer(np.zeros((2, 4, 8), "float32")).shape)
    (2, 4, 8)

    Reference: Vaswani et al., 2017, section 3.5.
    """

    def __init__(self, max_length, d_model, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length
        self.d_model = d_model
        self.table = ops.convert_to_tensor(sinusoidal_table(max_length, d_model))

    def call(self, inputs, start_index=0):
        positions = position_slice(self.table, inputs, start_index, self.max_length)
        return inputs + ops.cast(positions, inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(max_length=self.max_length, d_model=self.d_model)
        return config


def position_slice(table, inputs, start_index, max_length):
    """Rows start_index .. start_index + length of a `[max_length, d]` table, `[1, length, d]`, with a clear length
    check: while tracing where the sizes are known, and under TensorFlow also when a graph runs."""
    length = inputs.shape[1]
    if length is not None and isinstance(start_index, (int, np.integer)) and start_index + length > max_length:
        raise ValueError(
            f"sequence of length {start_index + length} is longer than max_length={max_length}. "
            "Fix: truncate the inputs or raise the config's max_length."
        )
    if _tf_fast.ENABLED:
        return _tf_fast.position_rows(table, inputs, start_index, max_length)
    return ops.slice(ops.convert_to_tensor(table), (start_index, 0), (length, table.shape[1]))[None]
