"""tf-transformer: the Transformer of "Attention Is All You Need" for TensorFlow 2 and Keras 3.

import tf_transformer as tft
config = tft.TransformerConfig.from_preset("base")
model = tft.Transformer(config)
model.compile(optimizer=tft.make_optimizer(config),
              loss=tft.MaskedCrossEntropy(label_smoothing=config.label_smoothing),
              metrics=[tft.MaskedAccuracy()])
"""

__version__ = "0.1.0"

from tf_transformer import checkpoints, data, decoding, evaluation, export, layers, visualization
from tf_transformer.config import ConfigError, TransformerConfig, list_presets
from tf_transformer.models import SequenceClassifier, Transformer
from tf_transformer.training import MaskedAccuracy, MaskedCrossEntropy, WarmupSchedule, make_loss, make_optimizer

__all__ = [
    "ConfigError",
    "MaskedAccuracy",
    "MaskedCrossEntropy",
    "SequenceClassifier",
    "Transformer",
    "TransformerConfig",
    "WarmupSchedule",
    "checkpoints",
    "data",
    "decoding",
    "evaluation",
    "export",
    "layers",
    "list_presets",
    "make_loss",
    "make_optimizer",
    "visualization",
]
