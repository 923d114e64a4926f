"""tf-transformer: the Transformer of "Attention Is All You Need" for TensorFlow 2 and Keras 3.

import tf_transformer as tft
config = tft.TransformerConfig.from_preset("base")
model = tft.Transformer(config)
model.compile(optimizer=tft.make_optimizer(config),
              loss=tft.MaskedCrossEntropy(label_smoothing=config.label_smoothing),
              metrics=[tft.MaskedAccuracy()])
"""

__version__ = "0.1.0"

import os

# TensorFlow's CPU allocator is plain malloc, and tf.distribute's input iterators pin glibc's mmap threshold
# at 128 KiB: every activation and gradient is then a fresh mmap whose pages fault in one by one, which
# took about 40% of a CPU training step. The BFC allocator reuses its memory. It only takes effect when set
# before TensorFlow starts (so not when the user imported tensorflow first), and an explicit value wins.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

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
