"""Models built from a `TransformerConfig`."""

from tf_transformer._lazy import lazy_attributes

# Imported on first use (PEP 562; see tf_transformer/_lazy.py): public name -> its module.
_LAZY = {
    "SequenceClassifier": "tf_transformer.models.classifier",
    "Transformer": "tf_transformer.models.transformer",
}
__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)

__all__ = ["SequenceClassifier", "Transformer"]
