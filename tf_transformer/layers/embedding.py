"""Scaled token embedding that doubles as the tied pre-softmax projection."""

from __future__ import annotations

import keras
import tensorflow as tf

from tf_transformer.layers._ops import dense


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
    >>> embedding.project(vectors).shape
    TensorShape([1, 3, 100])

    Reference: Vaswani et al., 2017, section 3.4; Press & Wolf, 2017.
    """

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
        vectors = tf.cast(tf.gather(self.embeddings, tf.cast(token_ids, tf.int32)), self.compute_dtype)
        if self.scale:
            vectors = vectors * tf.cast(self.d_model**0.5, vectors.dtype)
        return vectors

    def project(self, inputs):
        """Logits `[..., vocab_size]` = inputs @ E^T (the tied pre-softmax linear transformation)."""
        if not self.built:
            self.build()
        kernel = tf.cast(self.embeddings, inputs.dtype)
        return dense(inputs, kernel, transpose_kernel=True)

    def compute_output_shape(self, token_ids_shape):
        return tuple(token_ids_shape) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, d_model=self.d_model, scale=self.scale)
        return config
