"""Keras 3 layers of the Transformer, one public layer per module."""

from tf_transformer._lazy import lazy_attributes

# Imported on first use (PEP 562; see tf_transformer/_lazy.py): public name -> its module.
_LAZY = {
    "CrossAttentionCache": "tf_transformer.layers._cache",
    "Decoder": "tf_transformer.layers.decoder",
    "DecoderLayer": "tf_transformer.layers.decoder_layer",
    "Encoder": "tf_transformer.layers.encoder",
    "EncoderLayer": "tf_transformer.layers.encoder_layer",
    "FeedForward": "tf_transformer.layers.feed_forward",
    "GrowingSelfAttentionCache": "tf_transformer.layers._cache",
    "KeyValueCache": "tf_transformer.layers._cache",
    "LearnedPositionEmbedding": "tf_transformer.layers.position_embedding",
    "masking": "tf_transformer.layers.masking",
    "MultiHeadAttention": "tf_transformer.layers.attention",
    "SelfAttentionBuffer": "tf_transformer.layers._cache",
    "sinusoidal_table": "tf_transformer.layers.position",
    "SinusoidalPositionEncoding": "tf_transformer.layers.position",
    "TokenEmbedding": "tf_transformer.layers.embedding",
}
__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)

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
