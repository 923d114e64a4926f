"""Position-wise feed-forward network (the paper's section 3.3)."""

from __future__ import annotations

import keras
from keras import ops

from tf_transformer import _keras_internals
from tf_transformer.layers import _quantized
from tf_transformer.layers._building import build_sublayer
from tf_transformer.layers._ops import dense, unflatten_rows


@keras.saving.register_keras_serializable(package="tf_transformer")
class FeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position separately and identically.

    Args:
        d_model: width of the inputs and outputs.
        d_ff: inner width (2048 in the base model).
        activation: "relu" (the paper) or any Keras activation name, e.g. "gelu".
        activation_dropout: dropout rate on the inner activations (0 in the paper; "ReLU dropout" in
            tensor2tensor and fairseq, a regularizer for small data sets).

    Call arguments:
        inputs: `[batch, length, d_model]`.
        training: whether the activation dropout is active.

    Returns:
        `[batch, length, d_model]`.

    Example:

    >>> import numpy as np
    >>> tuple(FeedForward(d_model=8, d_ff=32)(np.ones((2, 3, 8), "float32")).shape)
    (2, 3, 8)

    Reference: Vaswani et al., 2017, section 3.3.
    """

    def __init__(self, d_model, d_ff, activation="relu", activation_dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.d_ff = d_ff
        self.activation = activation
        self.activation_dropout = activation_dropout
        self.inner = keras.layers.Dense(d_ff, activation=activation, name="inner", dtype=self.dtype_policy)
        self.dropout_layer = keras.layers.Dropout(
            activation_dropout, name="activation_dropout", dtype=self.dtype_policy
        )
        self.outer = keras.layers.Dense(d_model, name="outer", dtype=self.dtype_policy)

    def build(self, inputs_shape):
        build_sublayer(self.inner, inputs_shape)
        build_sublayer(self.outer, tuple(inputs_shape[:-1]) + (self.d_ff,))

    def call(self, inputs, training=None):
        # The sublayers are called, not their kernels read, so what Keras adds to a Dense (LoRA, its int8)
        # applies. On the 2-D view, Dense is one MatMul that TensorFlow fuses with BiasAdd and ReLU (a rank-3
        # tensordot is not).
        rows = ops.reshape(inputs, (-1, inputs.shape[-1]))
        if _quantized.is_int8_dense(self.inner):
            # Our int8 (`quantize`): read dequantized, so that a decoding loop can dequantize them once per call
            # instead of Keras' int8 Dense doing it at every step.
            inner = dense(rows, _quantized.read_dense(self.inner, rows.dtype), ops.cast(self.inner.bias, rows.dtype))
            hidden = self.dropout_layer(self.inner.activation(inner), training=training)
            outer = dense(hidden, _quantized.read_dense(self.outer, rows.dtype), ops.cast(self.outer.bias, rows.dtype))
            return unflatten_rows(outer, inputs)
        hidden = self.dropout_layer(self.inner(rows), training=training)
        return unflatten_rows(self.outer(hidden), inputs)

    def quantize(self, mode=None, type_check=True, config=None):
        """Weight-only int8 (`mode="int8"`): both `Dense` kernels become int8 with a float32 scale per output
        channel (Keras' `Dense.quantize` without an activation quantizer). In place, for inference."""
        del type_check, config  # Keras' arguments (its wrapper of `quantize` makes a config); the scheme is fixed
        if _quantized.check_mode(mode) == _quantized.INT8:
            _quantized.quantize_dense(self.inner)
            _quantized.quantize_dense(self.outer)
            _keras_internals.mark_quantized(self)

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape[:-1]) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model,
            d_ff=self.d_ff,
            activation=self.activation,
            activation_dropout=self.activation_dropout,
        )
        return config
