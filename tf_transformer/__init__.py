"""tf-transformer: the Transformer of "Attention Is All You Need" for TensorFlow 2 and Keras 3.

import tf_transformer as tft
config = tft.TransformerConfig.from_preset("base")
model = tft.Transformer(config)
model.compile(optimizer=tft.make_optimizer(config.d_model, warmup_steps=4000),
              loss=tft.MaskedCrossEntropy(label_smoothing=0.1),
              metrics=[tft.MaskedAccuracy()])
"""

__version__ = "0.1.0"

import os

# TensorFlow's CPU allocator is plain malloc, and tf.distribute's input iterators pin glibc's mmap threshold
# at 128 KiB: every activation and gradient is then a fresh mmap whose pages fault in one by one, which
# takes about 40% of a CPU training step. The BFC allocator reuses its memory. It only takes effect when set
# before TensorFlow starts (so not when the user imported tensorflow first), and an explicit value wins.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

from tf_transformer._lazy import lazy_attributes

# Imported on first use (PEP 562), so that `import tf_transformer` and a command's --help cost no TensorFlow
# import: public name -> its module (the module itself for a subpackage).
_LAZY = {
    "ConfigError": "tf_transformer.config",
    "MaskedAccuracy": "tf_transformer.training",
    "MaskedCrossEntropy": "tf_transformer.training",
    "Recipe": "tf_transformer.recipe",
    "SequenceClassifier": "tf_transformer.models",
    "Transformer": "tf_transformer.models",
    "TransformerConfig": "tf_transformer.config",
    "WarmupSchedule": "tf_transformer.training",
    "checkpoints": "tf_transformer.checkpoints",
    "config": "tf_transformer.config",
    "data": "tf_transformer.data",
    "decoding": "tf_transformer.decoding",
    "evaluation": "tf_transformer.evaluation",
    "export": "tf_transformer.export",
    "layers": "tf_transformer.layers",
    "list_presets": "tf_transformer.config",
    "make_optimizer": "tf_transformer.training",
    "models": "tf_transformer.models",
    "quantization": "tf_transformer.quantization",
    "training": "tf_transformer.training",
    "visualization": "tf_transformer.visualization",
}
__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)

__all__ = [
    "ConfigError",
    "MaskedAccuracy",
    "MaskedCrossEntropy",
    "Recipe",
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
    "make_optimizer",
    "quantization",
    "visualization",
]
