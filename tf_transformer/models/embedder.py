"""Token embedding + position + dropout, shared by the encoder-decoder and the classifier."""

from __future__ import annotations

from tf_transformer.config import TransformerConfig
from tf_transformer.layers import LearnedPositionEmbedding, SinusoidalPositionEncoding


def make_position_layer(config: TransformerConfig, name: str, dtype=None):
    """The config's position layer: sinusoidal (the paper) or learned."""
    if config.position_encoding == "learned":
        return LearnedPositionEmbedding(config.max_length, config.d_model, name=name, dtype=dtype)
    return SinusoidalPositionEncoding(config.max_length, config.d_model, name=name, dtype=dtype)


def embed(token_embedding, position_layer, dropout_layer, token_ids, start_index=0, training=None):
    """Dropout(Embedding(ids) * sqrt(d_model) + PE): the input of each stack (section 3.4-3.5, 5.4)."""
    return dropout_layer(position_layer(token_embedding(token_ids), start_index=start_index), training=training)
