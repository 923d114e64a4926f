"""The checkpoint and decoding flags that `tft-translate` and `tft-evaluate` share: one definition, one check.
Importing it also brings --mixed_precision (`tf_transformer.cli._precision_flag`), which `load_model` applies.

Importing this module defines the flags in absl's global FLAGS (only the binaries import it); each binary's
`adopt_help(__name__, __name__ of this module)` shows them in its --help. A decoding flag the user gives wins;
else the model directory's decoding.json (written by tft-train) decides; else the default shown here.
"""

import logging

from absl import flags

from tf_transformer.checkpoint_files import check_latest_checkpoint
from tf_transformer.cli import _precision_flag as precision_flag
from tf_transformer.cli import check_weights_flags
from tf_transformer.decoding.settings import (
    DEFAULTS,
    JSON_SETTINGS,
    METHODS,
    DecodingSettings,
    check_settings,
    command_settings,
    describe,
)  # fmt: skip
from tf_transformer.model_dir import check_model_dir
from tf_transformer.quantization import MODES as QUANTIZE_MODES

# The modules whose flags a decoding binary takes from here, for its --help (`run_binary`).
FLAG_MODULES = (__name__, precision_flag.__name__)

CHECKPOINT = flags.DEFINE_string("checkpoint", None, "A checkpoint path prefix, or best (default: the latest).")
AVERAGE_LAST = flags.DEFINE_integer(
    "average_last", None, "Average the last N checkpoints in memory (default: decoding.json's average_last, if any)."
)
BEAM_SIZE = flags.DEFINE_integer(
    "beam_size", DEFAULTS["beam_size"],
    f"Beam width (default: decoding.json's, else the paper's {DEFAULTS['beam_size']}).",
)  # fmt: skip
LENGTH_PENALTY = flags.DEFINE_float(
    "length_penalty", DEFAULTS["length_penalty"],
    f"Length penalty alpha (default: decoding.json's, else {DEFAULTS['length_penalty']}).",
)  # fmt: skip
METHOD = flags.DEFINE_enum(
    "method", DEFAULTS["method"],
    list(METHODS), f"Decoding method (default: decoding.json's, else {DEFAULTS['method']}).",
)  # fmt: skip
BATCH_TOKENS = flags.DEFINE_integer("batch_tokens", 4096, "Source tokens per batch (padding included).")
QUANTIZE = flags.DEFINE_enum(
    "quantize", "none", list(QUANTIZE_MODES),
    "int8: quantize the loaded weights to int8 in memory (weight-only, per channel; tf_transformer.quantization).",
)  # fmt: skip
MAX_DECODE_LENGTH = flags.DEFINE_string(
    "max_decode_length", DEFAULTS["max_decode_length"],
    "Most output tokens a sentence: N, or Ax+B for A times its source length (in pieces, EOS included) plus B, "
    f"e.g. 1.5x+10 (default: decoding.json's, else {DEFAULTS['max_decode_length']}; the paper's: x+50).",
)  # fmt: skip
NO_REPEAT_NGRAM_SIZE = flags.DEFINE_integer(
    "no_repeat_ngram_size", DEFAULTS["no_repeat_ngram_size"],
    f"Forbid any repeated N-gram of output pieces; 0: off (default: decoding.json's, else "
    f"{DEFAULTS['no_repeat_ngram_size']}).",
)  # fmt: skip


def check_checkpoint_flags() -> None:
    """A ValueError when both ways of choosing the weights are given."""
    check_weights_flags(CHECKPOINT.value, AVERAGE_LAST.value)


def check_flag_values() -> None:
    """The checkpoint and decoding flags' own checks (no file read), for the binaries' check_flag_values."""
    check_checkpoint_flags()
    check_settings(_given(), prefix="--")
    precision_flag.check_flag_value(QUANTIZE.value)


def _given() -> dict:
    """The decoding.json settings the user gave as flags (each key has the flag of its name)."""
    return {name: flags.FLAGS[name].value for name in JSON_SETTINGS if flags.FLAGS[name].present}


def settings(model_dir: str, **others) -> DecodingSettings:
    """The checked decoding settings for `model_dir` (flags given, else its decoding.json, else the defaults),
    with `others` (settings only flags give, e.g. n_best), logged in one line that says where each came from.
    Reads decoding.json, not the model: a bad flag, a --model_dir that is no model directory, or a latest checkpoint
    with a missing file (when it is the one used) stops the command before anything heavy runs."""
    check_checkpoint_flags()
    precision_flag.check_flag_value(QUANTIZE.value)
    check_model_dir(model_dir)
    value, sources = command_settings(_given(), model_dir, checkpoint_given=CHECKPOINT.value is not None, **others)
    check_latest_checkpoint(model_dir, CHECKPOINT.value, value.average_last)  # refused here, not after TF's start
    logging.getLogger("tf_transformer").info(describe(value.json_settings(), sources))
    return value


def load_model(model_dir: str, decoding: DecodingSettings):
    """`(model, tokenizer, config)` of `model_dir` with the weights the checkpoint flags (or `decoding`'s
    average_last, from `settings`) choose, computing in the precision --mixed_precision gives, quantized as
    --quantize says."""
    from tf_transformer.checkpoints import load_translation_model  # heavy: only when a model is used
    from tf_transformer.quantization import quantize_model

    precision_flag.apply(QUANTIZE.value)
    loaded = load_translation_model(model_dir, CHECKPOINT.value, average_last=decoding.average_last)
    return (quantize_model(loaded[0], QUANTIZE.value),) + tuple(loaded[1:])
