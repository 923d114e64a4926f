"""Models built from a `TransformerConfig`."""

from tf_transformer.models.classifier import SequenceClassifier
from tf_transformer.models.transformer import Transformer

__all__ = ["SequenceClassifier", "Transformer"]
