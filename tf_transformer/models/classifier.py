"""An encoder-only Transformer that classifies token or event sequences."""

from __future__ import annotations

import keras
from keras import ops

from tf_transformer.config import ConfigError, TransformerConfig
from tf_transformer.layers import Encoder, TokenEmbedding, masking
from tf_transformer.layers._building import build_for_fit, build_sublayer
from tf_transformer.layers._options import SublayerOptions
from tf_transformer.models.embedder import embed, make_position_layer

POOLINGS = ("mean", "first")


@keras.saving.register_keras_serializable(package="tf_transformer")
class SequenceClassifier(keras.Model):
    """Transformer encoder + pooling + a linear classifier over sequences of token or event ids.

    The self-attention-over-behaviour model used for recommendation and fraud features: each id is an
    item or event, padding (id 0) is masked out of attention and pooling. The decoder fields of the
    config are ignored.

    Args:
        config: a `TransformerConfig` (or its dict form); uses vocab_size, d_model, d_ff, num_heads, d_k, d_v,
            num_encoder_layers, dropout, attention_dropout, max_length, position_encoding, norm_first,
            attention_window, layer_norm_epsilon, activation, activation_dropout.
        num_classes: number of output classes.
        pooling: "mean" over non-padding positions, or "first" (a [CLS]-style first token).

    Call arguments:
        token_ids: int `[batch, length]`, 0 = padding.
        training: whether dropout is active.

    Returns:
        float32 logits `[batch, num_classes]`; train with
        `keras.losses.SparseCategoricalCrossentropy(from_logits=True)`.

    Example:

    >>> import numpy as np
    >>> import tf_transformer as tft
    >>> config = tft.TransformerConfig.from_preset("tiny")
    >>> classifier = tft.SequenceClassifier(config, num_classes=3)
    >>> tuple(classifier(np.array([[4, 9, 12, 0, 0]])).shape)
    (1, 3)

    Reference: Vaswani et al., 2017; Chen et al., "Behavior Sequence Transformer", 2019.
    """

    def __init__(self, config, num_classes, pooling="mean", **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = TransformerConfig.from_dict(config)
        if num_classes < 1:
            raise ConfigError(f"num_classes: must be >= 1, got {num_classes}. Fix: pass the number of classes.")
        if pooling not in POOLINGS:
            raise ConfigError(f"pooling: unknown option {pooling!r}. Fix: use one of {POOLINGS}.")
        self.config = config
        self.num_classes = num_classes
        self.pooling = pooling
        self.token_embedding = TokenEmbedding(
            config.vocab_size, config.d_model, name="token_embedding", dtype=self.dtype_policy
        )
        self.position = make_position_layer(config, "position", self.dtype_policy)
        self.embedding_dropout = keras.layers.Dropout(config.dropout, name="embedding_dropout", dtype=self.dtype_policy)
        self.encoder = Encoder(
            config.num_encoder_layers,
            config.d_model,
            config.num_heads,
            config.d_ff,
            name="encoder",
            dtype=self.dtype_policy,
            **SublayerOptions.of(config).as_kwargs(),
        )
        self.pooled_dropout = keras.layers.Dropout(config.dropout, name="pooled_dropout", dtype=self.dtype_policy)
        self.classifier = keras.layers.Dense(num_classes, name="classifier", dtype=self.dtype_policy)

    def make_train_function(self, force=False):
        """Keras' training step, made after the weights and the optimizer's variables are built, so that `fit`
        traces it once, not twice."""
        build_for_fit(self)
        return super().make_train_function(force=force)

    def build(self, token_ids_shape=None):
        vectors = (None, None, self.config.d_model)
        build_sublayer(self.token_embedding)
        build_sublayer(self.position, vectors)
        build_sublayer(self.encoder, vectors)
        build_sublayer(self.classifier, (None, self.config.d_model))
        self.built = True

    def call(self, token_ids, training=None):
        mask = masking.padding_mask(token_ids, self.config.pad_id)
        x = embed(self.token_embedding, self.position, self.embedding_dropout, token_ids, training=training)
        x = self.encoder(x, attention_mask=mask, training=training)
        if self.pooling == "first":
            pooled = x[:, 0]
        else:
            weights = ops.cast(ops.not_equal(token_ids, self.config.pad_id), x.dtype)[:, :, None]
            # max(count, 1) keeps an all-padding row finite.
            pooled = ops.sum(x * weights, axis=1) / ops.maximum(ops.sum(weights, axis=1), 1.0)
        logits = self.classifier(self.pooled_dropout(pooled, training=training))
        return ops.cast(logits, "float32")

    def get_config(self):
        return {
            "config": self.config.to_dict(),
            "num_classes": self.num_classes,
            "pooling": self.pooling,
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
