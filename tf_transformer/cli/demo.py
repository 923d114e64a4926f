"""Trains a small Transformer on a generated copy or reversal task and prints the held-out result as JSON.

    tft-demo --task=reverse --steps=800
    tft-demo --task=copy --steps=400 --model_dir=runs/demo_copy

With --model_dir it also saves the trained model there (model.keras and config.json).
"""

import json

from absl import flags

from tf_transformer.cli import run_binary

_TASK = flags.DEFINE_enum("task", "reverse", ["copy", "reverse"], "The generated task.")
_STEPS = flags.DEFINE_integer("steps", 800, "Training steps.", lower_bound=1)
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Sentence pairs per batch.", lower_bound=1)
_SEED = flags.DEFINE_integer("seed", 0, "Seed for weights, data and dropout.")
_MODEL_DIR = flags.DEFINE_string("model_dir", None, "Where to save model.keras and config.json (optional).")


def main(argv):
    del argv
    from tf_transformer.training import train_synthetic_task  # not at the top: --help needs no TensorFlow

    summary = train_synthetic_task(
        _TASK.value, steps=_STEPS.value, batch_size=_BATCH_SIZE.value, seed=_SEED.value, model_dir=_MODEL_DIR.value
    )
    print(json.dumps(summary, indent=2))


def run():
    """The `tft-demo` command (its console script and the checkout's wrapper script call it)."""
    run_binary(__name__, main)


if __name__ == "__main__":
    run()
