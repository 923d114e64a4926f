"""Keras 3 layers of the Transformer, one public layer per module."""

from tf_transformer.layers import masking
from tf_transformer.layers._cache import (
    CrossAttentionCache,
    GrowingSelfAttentionCache,
    KeyValueCache,
    SelfAttentionBuffer,
)
from tf_transformer.layers.attention import MultiHeadAttention
from tf_transformer.layers.decoder import Decoder
from tf_transformer.layers.decoder_layer import DecoderLayer
from tf_transformer.layers.embedding import TokenEmbedding
from tf_transformer.layers.encoder import Encoder
from tf_transformer.layers.encoder_layer import EncoderLayer
from tf_transformer.layers.feed_forward import FeedForward
from tf_transformer.layers.position import SinusoidalPositionEncoding, sinusoidal_table
from tf_transformer.layers.position_embedding import LearnedPositionEmbedding

__all__ = [
    "CrossAttentionCache",
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "GrowingSelfAttentionCache",
    "KeyValueCache",
    "LearnedPositionEmbedding",
    "MultiHeadAttention",
    "SelfAttentionBuffer",
    "SinusoidalPositionEncoding",
    "TokenEmbedding",
    "masking",
    "sinusoidal_table",
]
