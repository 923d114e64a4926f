"""Exports a trained model directory for TensorFlow Serving: strings in, translations out.

    tft-export --model_dir=runs/multi30k_tiny --export_dir=exports/multi30k
    tft-export --model_dir=runs/multi30k_tiny --export_dir=exports/multi30k --version=7 \
        --checkpoint=runs/multi30k_tiny/averaged --beam_size=4 --length_penalty=0.6

Writes --export_dir/<version>/ (the next version number when --version is not given; an existing version is
never overwritten) and prints its path. The SavedModel has the signatures serving_default (inputs: string
[batch] -> outputs: string [batch], scores: float32 [batch]), translate_nbest and translate_ids; the
tokenizer and beam search run inside the graph. The decoding flags are fixed in the export. The work is
`tf_transformer.export.export_saved_model`.
"""

import logging as pylogging

from absl import flags

from tf_transformer.cli import exit_on, run_binary
from tf_transformer.export import export_saved_model
from tf_transformer.rules import EXTRA_DECODE_LENGTH

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "A model directory written by tft-train.", required=True)
_EXPORT_DIR = flags.DEFINE_string(
    "export_dir", None, "The model's base folder for TensorFlow Serving; versions go inside.", required=True
)
_VERSION = flags.DEFINE_integer("version", None, "Version number (default: one more than the highest there).")
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "A checkpoint path prefix or folder (default: the latest).")
_BEAM_SIZE = flags.DEFINE_integer("beam_size", 4, "Beam width (the paper: 4).")
_LENGTH_PENALTY = flags.DEFINE_float("length_penalty", 0.6, "Length penalty alpha (the paper: 0.6).")
_N_BEST = flags.DEFINE_integer("n_best", None, "Translations translate_nbest returns (default: --beam_size).")
_MAX_DECODE_LENGTH = flags.DEFINE_integer(
    "max_decode_length", None, f"Most output tokens a sentence (default: its source length + {EXTRA_DECODE_LENGTH})."
)


def main(argv):
    del argv
    pylogging.getLogger("absl").setLevel(pylogging.WARNING)  # TensorFlow's INFO lines; ours stay
    with exit_on(FileNotFoundError, FileExistsError, ValueError):  # ConfigError and DataError are ValueErrors
        path = export_saved_model(
            _MODEL_DIR.value, _EXPORT_DIR.value, version=_VERSION.value, checkpoint=_CHECKPOINT.value,
            beam_size=_BEAM_SIZE.value, length_penalty=_LENGTH_PENALTY.value, n_best=_N_BEST.value,
            max_decode_length=_MAX_DECODE_LENGTH.value,
        )  # fmt: skip
    print(path)


def run():
    """The `tft-export` command (and tools/export.py in a checkout)."""
    run_binary(__name__, main)


if __name__ == "__main__":
    run()
