"""tf.data input pipelines."""

from tf_transformer.data.synthetic import SYNTHETIC_TASKS, synthetic_pairs, synthetic_translation_dataset

__all__ = ["SYNTHETIC_TASKS", "synthetic_pairs", "synthetic_translation_dataset"]
