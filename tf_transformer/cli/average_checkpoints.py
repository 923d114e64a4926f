"""Averages the weights of the last N checkpoints of a model directory into a new checkpoint.

    tft-average-checkpoints --model_dir=runs/multi30k --num_checkpoints=5
    tft-export --model_dir=runs/multi30k --checkpoint=runs/multi30k/averaged --export_dir=exports/multi30k_averaged

The paper averages the last 5 checkpoints (base model) or the last 20 (big). The new checkpoint goes into
--output_dir (default MODEL_DIR/averaged, replacing an earlier average there), beside a JSON file listing the
checkpoints averaged; its path is printed. Use it by giving that path, or its folder, as the --checkpoint of
tft-translate, tft-evaluate, tft-score or tft-export. The work is `tf_transformer.checkpoints.average_checkpoints`.
"""

import logging as pylogging

from absl import flags

from tf_transformer.checkpoint_files import check_checkpoint_count
from tf_transformer.cli import exit_on, run_binary

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "A model directory written by tft-train.", required=True)
_NUM_CHECKPOINTS = flags.DEFINE_integer("num_checkpoints", 5, "How many of the last checkpoints to average.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where to write the average (default: MODEL_DIR/averaged).")


def check_flags():
    """Before TensorFlow starts: a --num_checkpoints above the checkpoints the model directory lists is refused."""
    if _NUM_CHECKPOINTS.value >= 1:  # a bad value is the library's to name
        check_checkpoint_count(_MODEL_DIR.value, _NUM_CHECKPOINTS.value)


def main(argv, checked=None):
    del argv, checked  # check_flags returns nothing
    pylogging.getLogger("absl").setLevel(pylogging.WARNING)  # TensorFlow's INFO lines; ours stay
    from tf_transformer.checkpoints import average_checkpoints  # not at the top: --help needs no TensorFlow

    with exit_on(FileNotFoundError, ValueError):
        path = average_checkpoints(_MODEL_DIR.value, _NUM_CHECKPOINTS.value, _OUTPUT_DIR.value)
    print(path)


def run():
    """The `tft-average-checkpoints` command (its console script and the checkout's wrapper script call it)."""
    run_binary(__name__, main, check_flags=check_flags)


if __name__ == "__main__":
    run()
