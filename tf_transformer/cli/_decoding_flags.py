"""The checkpoint and decoding flags that `tft-translate` and `tft-evaluate` share: one definition, one check.

Importing this module defines the flags in absl's global FLAGS (only the binaries import it); each binary's
`adopt_help(__name__, __name__ of this module)` shows them in its --help.
"""

from absl import flags

from tf_transformer.decoding import METHODS
from tf_transformer.rules import EXTRA_DECODE_LENGTH

CHECKPOINT = flags.DEFINE_string("checkpoint", None, "A checkpoint path prefix, or best (default: the latest).")
AVERAGE_LAST = flags.DEFINE_integer("average_last", None, "Average the last N checkpoints in memory.")
BEAM_SIZE = flags.DEFINE_integer("beam_size", 4, "Beam width (the paper: 4).")
LENGTH_PENALTY = flags.DEFINE_float("length_penalty", 0.6, "Length penalty alpha (the paper: 0.6).")
METHOD = flags.DEFINE_enum("method", "beam", list(METHODS), "Decoding method.")
BATCH_TOKENS = flags.DEFINE_integer("batch_tokens", 4096, "Source tokens per batch (padding included).")
MAX_DECODE_LENGTH = flags.DEFINE_integer(
    "max_decode_length", None, f"Most output tokens a sentence (default: its source length + {EXTRA_DECODE_LENGTH})."
)


def check_checkpoint_flags() -> None:
    """A ValueError when both ways of choosing the weights are given."""
    if CHECKPOINT.value is not None and AVERAGE_LAST.value is not None:
        raise ValueError("--checkpoint and --average_last: give one of them.")


def load_model(model_dir: str):
    """`(model, tokenizer, config)` of `model_dir` with the weights the checkpoint flags choose."""
    from tf_transformer.checkpoints import load_translation_model  # heavy: only when a model is used

    check_checkpoint_flags()
    return load_translation_model(model_dir, CHECKPOINT.value, average_last=AVERAGE_LAST.value)


def decoding_arguments() -> dict:
    """The keyword arguments of `tf_transformer.decoding.text.translate_texts` that the flags set."""
    return {
        "beam_size": BEAM_SIZE.value,
        "length_penalty": LENGTH_PENALTY.value,
        "method": METHOD.value,
        "batch_tokens": BATCH_TOKENS.value,
        "max_decode_length": MAX_DECODE_LENGTH.value,
    }
