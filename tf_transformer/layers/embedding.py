"""Scaled token embedding that doubles as the tied pre-softmax projection."""

from __future__ import annotations

import keras
from keras import ops

from tf_transformer import _keras_internals
from tf_transformer.layers import _quantized
from tf_transformer.layers._ops import dense, gather


@keras.saving.register_keras_serializable(package="tf_transformer")
class TokenEmbedding(keras.layers.Layer):
    """Token embedding multiplied by sqrt(d_model); `project` reuses the matrix for output logits.

    The paper shares one matrix between the source embedding, the target embedding and the pre-softmax
    linear transformation (section 3.4); calling one `TokenEmbedding` for all three does exactly that.

    Args:
        vocab_size: number of token ids.
        d_model: embedding width.
        scale: multiply the embeddings by sqrt(d_model), as the paper does.

    Call arguments:
        token_ids: int `[batch, length]`.

    Returns:
        `[batch, length, d_model]` embeddings. `project(x)` maps `[batch, length, d_model]` to logits
        `[batch, length, vocab_size]` with the transposed matrix.

    Mask behaviour: none; padding (id 0) is embedded like any id, and the attention masks of
    `tf_transformer.layers.masking` hide it.

    Example:

    >>> import numpy as np
    >>> embedding = TokenEmbedding(vocab_size=100, d_model=8)
    >>> vectors = embedding(np.array([[5, 7, 0]]))
    >>> tuple(embedding.project(vectors).shape)
    (1, 3, 100)

    Reference: Vaswani et al., 2017, section 3.4; Press & Wolf, 2017.
    """

    # `quantize` makes the matrix int8 with one scale per token (axis 1 reduced): a row's scale serves the
    # lookup, and the same scale is the output channel's in the tied projection.
    INT8_KERNELS = {"embeddings": 1}

    def __init__(self, vocab_size, d_model, scale=True, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.scale = scale

    def build(self, token_ids_shape=None):
        # A normal with stddev d_model^-0.5 keeps scaled embeddings and tied logits at unit scale.
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model**-0.5),
        )

    def call(self, token_ids):
        token_ids = ops.cast(token_ids, "int32")
        if _quantized.is_quantized(self, "embeddings"):
            # Only the looked-up rows are dequantized.
            rows = _quantized.dequantize(
                gather(self.embeddings, token_ids), gather(self.embeddings_scale, token_ids), -1
            )
            vectors = ops.cast(rows, self.compute_dtype)
        else:
            vectors = ops.cast(gather(self.embeddings, token_ids), self.compute_dtype)
        if self.scale:
            vectors = vectors * ops.cast(self.d_model**0.5, vectors.dtype)
        return vectors

    def project(self, inputs):
        """Logits `[..., vocab_size]` = inputs @ E^T (the tied pre-softmax linear transformation)."""
        if not self.built:
            self.build()
        return dense(inputs, self.matrix(inputs.dtype), transpose_kernel=True)

    def matrix(self, dtype=None):
        """The `[vocab_size, d_model]` matrix in `dtype` (default: the compute dtype), dequantized if int8."""
        return _quantized.read(self, "embeddings", dtype or self.compute_dtype, axis=1)

    def quantize(self, mode=None, type_check=True, config=None):
        """Weight-only int8 (`mode="int8"`): the matrix becomes int8 with a float32 scale per token
        (`embeddings_scale`). In place, for inference."""
        del type_check, config  # Keras' arguments (its wrapper of `quantize` makes a config); the scheme is fixed
        if _quantized.check_mode(mode) == _quantized.INT8:
            _quantized.quantize_variable(self, "embeddings", 1)
            _keras_internals.mark_quantized(self)

    def compute_output_shape(self, token_ids_shape):
        return tuple(token_ids_shape) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, d_model=self.d_model, scale=self.scale)
        return config
