"""Draws a trained model's attention for one sentence, and its positional encoding, as PNG heatmaps.

    tft-plot-attention --model_dir=runs/multi30k --sentence="A dog runs in the snow." --output_dir=plots
    tft-plot-attention --model_dir=runs/multi30k --sentence="A dog runs." --target="Ein Hund rennt." --output_dir=plots

Needs matplotlib: pip install '.[plot]'. Writes encoder_self_layer{i}.png, decoder_self_layer{i}.png and
decoder_cross_layer{i}.png (a grid of heads, subword pieces on the axes) and positional_encoding.png into
--output_dir, then prints what it drew as JSON; --layers=0,1 and --heads=0,3 draw only those layers and heads.
Without --target the model translates the sentence and the plots show the attention over its own translation.
Weights and decoding as tft-translate: --checkpoint, --average_last, --beam_size, --length_penalty, --method,
--no_repeat_ngram_size and --max_decode_length default to MODEL_DIR/decoding.json (so a trained run's plots show
the averaged model and the translation tft-translate gives), else to the paper's settings and the loop guards;
a log line says which were used, and the printed JSON has them under "decoding"; --mixed_precision is the precision
the model computes in (auto: bf16 where the CPU computes it). Everything happens in
`tf_transformer.visualization.write_attention_plots`.
"""

import json
import logging as pylogging

from absl import flags

from tf_transformer.cli import _decoding_flags as decoding_flags
from tf_transformer.cli import exit_on, run_binary

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "A model directory written by tft-train.", required=True)
_SENTENCE = flags.DEFINE_string("sentence", None, "The source sentence.", required=True)
_TARGET = flags.DEFINE_string("target", None, "Its translation (default: the model's own translation).")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where to write the PNGs.", required=True)
_LAYERS = flags.DEFINE_list("layers", None, "0-based layers to draw, e.g. 0,5 (default: all).")
_HEADS = flags.DEFINE_list("heads", None, "0-based heads to draw in each figure, e.g. 0,1 (default: all).")
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


def check_flags():
    """The flags and the model directory's decoding settings, checked before TensorFlow starts: (layers, heads,
    settings)."""
    check_flag_values()
    return indexes(_LAYERS), indexes(_HEADS), decoding_flags.settings(_MODEL_DIR.value)


def check_flag_values():
    """The flags' own checks (no file read): check_flags runs them first, tests/test_docs.py on documented lines."""
    indexes(_LAYERS)
    indexes(_HEADS)
    decoding_flags.check_flag_values()


def main(argv, checked):
    """Plots with `checked`, what `check_flags` returned."""
    del argv
    layers, heads, decoding = checked
    pylogging.getLogger("absl").setLevel(pylogging.WARNING)  # TensorFlow's INFO lines; ours stay
    with exit_on(ImportError, FileNotFoundError, ValueError):  # ImportError: matplotlib is missing
        # Imported here, not at the top: --help must not import TensorFlow.
        from tf_transformer.visualization import write_attention_plots

        model, tokenizer, _ = decoding_flags.load_model(_MODEL_DIR.value, decoding)
        summary = write_attention_plots(
            model, tokenizer, _SENTENCE.value, _OUTPUT_DIR.value, _TARGET.value, decoding, layers=layers, heads=heads,
            positions=_POSITIONS.value, dpi=_DPI.value,
        )  # fmt: skip
    if _TARGET.value is None:
        summary["decoding"] = decoding.json_settings()
    print(json.dumps(summary, indent=2, ensure_ascii=False))


def run():
    """The `tft-plot-attention` command (its console script and the checkout's wrapper script call it)."""
    run_binary(__name__, main, *decoding_flags.FLAG_MODULES, check_flags=check_flags)


if __name__ == "__main__":
    run()
