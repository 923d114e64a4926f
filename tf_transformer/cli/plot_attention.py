"""Draws a trained model's attention for one sentence, and its positional encoding, as PNG heatmaps.

    pip install '.[plot]'
    tft-plot-attention --model_dir=runs/multi30k_tiny --sentence="A dog runs in the snow." \
        --output_dir=plots/ [--target="Ein Hund rennt im Schnee."] [--layers=0,1] [--heads=0,3]

Writes encoder_self_layer{i}.png, decoder_self_layer{i}.png and decoder_cross_layer{i}.png (a grid of heads,
subword pieces on the axes) and positional_encoding.png into --output_dir, then prints what it drew as JSON.
Without --target the model translates the sentence (--method, --beam_size) and the plots show the attention
over its own translation. Weights: as tft-translate (--checkpoint, --average_last). Everything happens
in `tf_transformer.visualization.write_attention_plots`.
"""

import json
import logging as pylogging

from absl import flags

from tf_transformer.cli import check_weights_flags, exit_on, run_binary
from tf_transformer.decoding_settings import EXTRA_DECODE_LENGTH, METHODS

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "A model directory written by tft-train.", required=True)
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "A checkpoint path prefix (default: the latest).")
_AVERAGE_LAST = flags.DEFINE_integer("average_last", None, "Average the last N checkpoints in memory.")
_SENTENCE = flags.DEFINE_string("sentence", None, "The source sentence.", required=True)
_TARGET = flags.DEFINE_string("target", None, "Its translation (default: the model's own translation).")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where to write the PNGs.", required=True)
_LAYERS = flags.DEFINE_list("layers", None, "0-based layers to draw, e.g. 0,5 (default: all).")
_HEADS = flags.DEFINE_list("heads", None, "0-based heads to draw in each figure, e.g. 0,1 (default: all).")
_METHOD = flags.DEFINE_enum("method", "beam", list(METHODS), "Decoding method without --target.")
_BEAM_SIZE = flags.DEFINE_integer("beam_size", 4, "Beam width without --target (the paper: 4).")
_MAX_DECODE_LENGTH = flags.DEFINE_integer(
    "max_decode_length", None, f"Most output tokens without --target (default: source length + {EXTRA_DECODE_LENGTH})."
)
_POSITIONS = flags.DEFINE_integer("positions", None, "Positions in positional_encoding.png (default: max_length).")
_DPI = flags.DEFINE_integer("dpi", 100, "Pixels per inch of the PNGs.")


def indexes(flag):
    """The flag's comma-separated list as ints (None when not given)."""
    if flag.value is None:
        return None
    try:
        return [int(value) for value in flag.value]
    except ValueError:
        given = ",".join(flag.value)
        raise ValueError(f"--{flag.name}: expected comma-separated integers such as 0,1, got {given!r}.") from None


def main(argv):
    del argv
    pylogging.getLogger("absl").setLevel(pylogging.WARNING)  # TensorFlow's INFO lines; ours stay
    # Imported here, not at the top: --help must not import TensorFlow.
    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.visualization import write_attention_plots

    with exit_on(ImportError, FileNotFoundError, ValueError):  # ImportError: matplotlib is missing
        check_weights_flags(_CHECKPOINT.value, _AVERAGE_LAST.value)
        layers, heads = indexes(_LAYERS), indexes(_HEADS)
        model, tokenizer, _ = load_translation_model(
            _MODEL_DIR.value, _CHECKPOINT.value, average_last=_AVERAGE_LAST.value
        )
        summary = write_attention_plots(
            model, tokenizer, _SENTENCE.value, _OUTPUT_DIR.value, _TARGET.value, layers=layers, heads=heads,
            method=_METHOD.value, beam_size=_BEAM_SIZE.value, max_decode_length=_MAX_DECODE_LENGTH.value,
            positions=_POSITIONS.value, dpi=_DPI.value,
        )  # fmt: skip
    print(json.dumps(summary, indent=2, ensure_ascii=False))


def run():
    """The `tft-plot-attention` command (and tools/plot_attention.py in a checkout)."""
    run_binary(__name__, main)


if __name__ == "__main__":
    run()
