"""The checkpoint and decoding flags that `tft-translate` and `tft-evaluate` share: one definition, one check.

Importing this module defines the flags in absl's global FLAGS (only the binaries import it); each binary's
`adopt_help(__name__, __name__ of this module)` shows them in its --help. A decoding flag the user gives wins;
else the model directory's decoding.json (written by tft-train) decides; else the default shown here.
"""

import logging

from absl import flags

from tf_transformer.cli import check_weights_flags
from tf_transformer.decoding_settings import DEFAULTS, METHODS, describe, guard_arguments, resolve_settings
from tf_transformer.quantization import MODES as QUANTIZE_MODES

CHECKPOINT = flags.DEFINE_string("checkpoint", None, "A checkpoint path prefix, or best (default: the latest).")
AVERAGE_LAST = flags.DEFINE_integer(
    "average_last", None, "Average the last N checkpoints in memory (default: decoding.json's average_last, if any)."
)
BEAM_SIZE = flags.DEFINE_integer(
    "beam_size", DEFAULTS["beam_size"], "Beam width (default: decoding.json's, else the paper's 4)."
)
LENGTH_PENALTY = flags.DEFINE_float(
    "length_penalty", DEFAULTS["length_penalty"], "Length penalty alpha (default: decoding.json's, else 0.6)."
)
METHOD = flags.DEFINE_enum(
    "method", DEFAULTS["method"], list(METHODS), "Decoding method (default: decoding.json's, else beam)."
)
BATCH_TOKENS = flags.DEFINE_integer("batch_tokens", 4096, "Source tokens per batch (padding included).")
QUANTIZE = flags.DEFINE_enum(
    "quantize", "none", list(QUANTIZE_MODES),
    "int8: quantize the loaded weights to int8 in memory (weight-only, per channel; tf_transformer.quantization).",
)  # fmt: skip
MAX_DECODE_LENGTH = flags.DEFINE_string(
    "max_decode_length", DEFAULTS["max_decode_length"],
    "Most output tokens a sentence: N, or Ax+B for A times its source length (in pieces, EOS included) plus B, "
    "e.g. 1.5x+10 (default: decoding.json's, else 1.5x+10; the paper's: x+50).",
)  # fmt: skip
NO_REPEAT_NGRAM_SIZE = flags.DEFINE_integer(
    "no_repeat_ngram_size", DEFAULTS["no_repeat_ngram_size"],
    "Forbid any repeated N-gram of output pieces; 0: off (default: decoding.json's, else 4).",
)  # fmt: skip
# Flag -> decoding.json key.
_SETTING_FLAGS = {
    "beam_size": BEAM_SIZE, "length_penalty": LENGTH_PENALTY, "method": METHOD, "average_last": AVERAGE_LAST,
    "no_repeat_ngram_size": NO_REPEAT_NGRAM_SIZE, "max_decode_length": MAX_DECODE_LENGTH,
}  # fmt: skip


def check_checkpoint_flags() -> None:
    """A ValueError when both ways of choosing the weights are given."""
    check_weights_flags(CHECKPOINT.value, AVERAGE_LAST.value)


def settings(model_dir: str) -> dict:
    """The decoding settings for `model_dir` (flags given, else its decoding.json, else the defaults), logged
    in one line that says where each came from."""
    check_checkpoint_flags()
    given = {name: flag.value for name, flag in _SETTING_FLAGS.items() if flags.FLAGS[flag.name].present}
    values, sources = resolve_settings(given, model_dir, checkpoint_given=CHECKPOINT.value is not None)
    logging.getLogger("tf_transformer").info(describe(values, sources))
    return values


def load_model(model_dir: str, decoding: dict):
    """`(model, tokenizer, config)` of `model_dir` with the weights the checkpoint flags (or `decoding`'s
    average_last, from `settings`) choose, quantized as --quantize says."""
    from tf_transformer.checkpoints import load_translation_model  # heavy: only when a model is used
    from tf_transformer.quantization import quantize_model

    loaded = load_translation_model(model_dir, CHECKPOINT.value, average_last=decoding["average_last"])
    return (quantize_model(loaded[0], QUANTIZE.value),) + tuple(loaded[1:])


def decoding_arguments(decoding: dict) -> dict:
    """The keyword arguments of `tf_transformer.decoding.text.translate_texts` that the flags and `decoding`
    (from `settings`) set."""
    return {
        "beam_size": decoding["beam_size"],
        "length_penalty": decoding["length_penalty"],
        "method": decoding["method"],
        "batch_tokens": BATCH_TOKENS.value,
        **guard_arguments(decoding),
    }
