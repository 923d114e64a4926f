"""Exports a trained model directory for TensorFlow Serving: strings in, translations out.

    tft-export --model_dir=runs/multi30k --export_dir=exports/multi30k
    tft-translate --saved_model=exports/multi30k --input=../shared/data/multi30k/val.en.gz --output=val.hyp.de

Writes --export_dir/<version>/ (the next version number when --version is not given; an existing version is
never overwritten) and prints its path. The SavedModel has the signatures serving_default (inputs: string
[batch] -> outputs: string [batch], scores: float32 [batch]), translate_nbest and translate_ids; the
tokenizer and beam search run inside the graph. The decoding settings are fixed in the export and recorded in its
assets/export_config.json: --beam_size, --length_penalty, --average_last, --no_repeat_ngram_size and
--max_decode_length default to the model directory's decoding.json (as in tft-translate; average_last only without
--checkpoint), else to the flags' defaults below (the paper's beam size and length penalty, the latest checkpoint,
no repeated 4-gram, 1.5x+10); one log line says which were used and where each came from. The signature
translate_with_prefix (inputs, target_prefixes) forces each translation's start (tft-translate --saved_model
--target_prefix). The export is beam search whatever decoding.json's method. The work is
`tf_transformer.export.export_saved_model`. --quantize=int8 stores the matrices as int8 (a smaller export;
`tf_transformer.quantization`), recorded in export_config.json as "quantize". A bad setting stops the command before
the model is read.

Precision: the export computes in float32 unless --mixed_precision says otherwise (recorded in export_config.json as
"mixed_precision"). A SavedModel fixes its graph's dtypes, and the serving machine is not known here: stock
TensorFlow Serving runs a bf16 graph on every CPU, natively only on one with AVX-512 BF16 or AMX and emulated (slower
than float32) elsewhere. --mixed_precision=mixed_bfloat16 exports for a server known to compute bf16; auto decides
by the exporting machine's hardware, as the other commands do (docs/serving.md, "Precision").
"""

import logging as pylogging

from absl import flags

from tf_transformer.checkpoint_files import check_latest_checkpoint
from tf_transformer.cli import _precision_flag as precision_flag
from tf_transformer.cli import check_weights_flags, exit_on, run_binary
from tf_transformer.decoding.settings import DEFAULTS, DecodingSettings, check_settings, describe, resolve_settings
from tf_transformer.model_dir import check_model_dir
from tf_transformer.quantization import MODES as QUANTIZE_MODES

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "A model directory written by tft-train.", required=True)
_EXPORT_DIR = flags.DEFINE_string(
    "export_dir", None, "The model's base folder for TensorFlow Serving; versions go inside.", required=True
)
_VERSION = flags.DEFINE_integer("version", None, "Version number (default: one more than the highest there).")
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "A checkpoint path prefix or folder (default: the latest).")
_AVERAGE_LAST = flags.DEFINE_integer(
    "average_last", None, "Export the average of the last N checkpoints (default: decoding.json's, if any)."
)
_BEAM_SIZE = flags.DEFINE_integer(
    "beam_size", DEFAULTS["beam_size"],
    f"Beam width (default: decoding.json's, else the paper's {DEFAULTS['beam_size']}).",
)  # fmt: skip
_LENGTH_PENALTY = flags.DEFINE_float(
    "length_penalty", DEFAULTS["length_penalty"],
    f"Length penalty alpha (default: decoding.json's, else {DEFAULTS['length_penalty']}).",
)  # fmt: skip
_N_BEST = flags.DEFINE_integer("n_best", None, "Translations translate_nbest returns (default: --beam_size).")
_QUANTIZE = flags.DEFINE_enum(
    "quantize", "none", list(QUANTIZE_MODES), "int8: export int8 weights (weight-only, per channel; a smaller export)."
)
_MAX_DECODE_LENGTH = flags.DEFINE_string(
    "max_decode_length", DEFAULTS["max_decode_length"],
    "Most output tokens a sentence: N, or Ax+B for A times its source length plus B (default: decoding.json's, "
    f"else {DEFAULTS['max_decode_length']}; the paper's: x+50).",
)  # fmt: skip
_NO_REPEAT_NGRAM_SIZE = flags.DEFINE_integer(
    "no_repeat_ngram_size", DEFAULTS["no_repeat_ngram_size"],
    f"Forbid any repeated N-gram of output pieces; 0: off (default: decoding.json's, else "
    f"{DEFAULTS['no_repeat_ngram_size']}).",
)  # fmt: skip


# The serving machine is not known when a model is exported, and a float32 graph is nowhere emulated.
flags.FLAGS.set_default(precision_flag.MIXED_PRECISION.name, "float32")


def check_flags():
    """The flags and the model directory's decoding settings, checked before TensorFlow starts and the model is
    read: (settings, where each came from)."""
    check_flag_values()
    check_model_dir(_MODEL_DIR.value)
    decoding, sources = resolve_settings(_given(), _MODEL_DIR.value, checkpoint_given=_CHECKPOINT.value is not None)
    check_latest_checkpoint(_MODEL_DIR.value, _CHECKPOINT.value, decoding["average_last"])
    del decoding["method"], sources["method"]  # an export is beam search
    n_best = decoding["beam_size"] if _N_BEST.value is None else _N_BEST.value
    return DecodingSettings(**decoding, n_best=n_best), (decoding, sources)


def check_flag_values():
    """The flags' own checks (no file read): check_flags runs them first, tests/test_docs.py on documented lines."""
    check_weights_flags(_CHECKPOINT.value, _AVERAGE_LAST.value)
    check_settings(_given(), prefix="--")
    precision_flag.check_flag_value(_QUANTIZE.value)


def _given() -> dict:
    setting_flags = (_BEAM_SIZE, _LENGTH_PENALTY, _AVERAGE_LAST, _NO_REPEAT_NGRAM_SIZE, _MAX_DECODE_LENGTH)
    return {flag.name: flag.value for flag in setting_flags if flag.present}


def main(argv, checked):
    """Exports with `checked`, what `check_flags` returned."""
    del argv
    settings, (decoding, sources) = checked
    pylogging.getLogger("absl").setLevel(pylogging.WARNING)  # TensorFlow's INFO lines; ours stay
    pylogging.getLogger("tf_transformer").info(describe(decoding, sources))
    with exit_on(FileNotFoundError, FileExistsError, ValueError):  # ConfigError and DataError are ValueErrors
        from tf_transformer.export import export_saved_model  # not at the top: --help needs no TensorFlow

        precision_flag.apply(_QUANTIZE.value)  # the model export_saved_model builds computes in it
        path = export_saved_model(
            _MODEL_DIR.value, _EXPORT_DIR.value, settings, version=_VERSION.value, checkpoint=_CHECKPOINT.value,
            quantize=_QUANTIZE.value,
        )  # fmt: skip
    print(path)


def run():
    """The `tft-export` command (its console script and the checkout's wrapper script call it)."""
    run_binary(__name__, main, precision_flag.__name__, check_flags=check_flags)


if __name__ == "__main__":
    run()
