"""Translates text, one sentence a line, with a trained model directory.

    tft-translate --model_dir=runs/multi30k --input=../shared/data/multi30k/val.en.gz --output=val.hyp.de
    tft-translate --model_dir=runs/multi30k --n_best=2 --input=../shared/data/multi30k/val.en.gz

Reads --input (plain or gzip; default stdin) and writes one translation a line, in input order, to --output
(default stdout); an empty or blank input line gives an empty output line. With --n_best=N (N > 1, beam
search) it writes N lines a sentence, best first, as `i ||| translation ||| score`: i is the 0-based input
line number and score the length-penalised log-probability. A progress bar goes to stderr when --output is
a file.

With --with_alignments each line also gets its word alignment, `translation ||| 0-0 1-1 2-3 ...` (with
--n_best: `i ||| translation ||| score ||| 0-0 ...`): source word i to target word j, 0-based, words being the
whitespace-separated tokens of the input line and of the translation, one link per target word, from the
cross-attention of the penultimate decoder layer averaged over its heads (`tf_transformer.decoding.alignment`;
--alignment_layer=N for another layer).

Weights: the latest checkpoint of --model_dir/checkpoints; --checkpoint=PATH for another (a prefix such as
.../checkpoints/ckpt-60, or the path tft-average-checkpoints printed); --checkpoint=best for the best
checkpoint by validation BLEU (training with --bleu_every keeps it in MODEL_DIR/best); --average_last=N to
average the last N checkpoints on the fly (nothing is written). Decoding happens in
`tf_transformer.decoding.text.TextTranslator`.

Settings: --beam_size, --length_penalty, --method, --average_last, --no_repeat_ngram_size and
--max_decode_length default to MODEL_DIR/decoding.json (written by tft-train from the model config; edit it to
change them), else to the paper's beam size and length penalty, no averaging, and the loop guards: no repeated
4-gram of pieces and at most 1.5 x the source length + 10 tokens (--max_decode_length=1.5x+10; an int N caps
at N tokens, x+50 is the paper's rule); a flag given wins, and decoding.json's average_last applies only without
--checkpoint. One log line on stderr says which settings were used and where each came from.

With --target_prefix=FILE (one prefix a line, aligned with the input; an empty line: no prefix) each
translation starts with its prefix (forced tokens, as CTranslate2's target_prefix; they count in the score).

With --saved_model=DIR instead of --model_dir, it translates with an export of tft-export (DIR is a
version folder, or the export's base folder for its latest version) through its serving signatures, batched
the same way, so the output is what --model_dir gives with the settings the model was exported with. The
decoding flags (--beam_size, --length_penalty, --method, --max_decode_length, --no_repeat_ngram_size) and the
checkpoint flags are fixed in the export and refused here; --n_best may be at most the export's n_best;
--target_prefix uses the export's translate_with_prefix signature.

    tft-export --model_dir=runs/multi30k --export_dir=exports/multi30k
    tft-translate --saved_model=exports/multi30k --input=../shared/data/multi30k/val.en.gz --output=val.hyp.de

With --quantize=int8 (and --model_dir) the loaded weights are quantized to int8 in memory first
(`tf_transformer.quantization`; an export's are fixed when it is made: tft-export --quantize=int8).

Precision: --mixed_precision=auto (the default) decodes in mixed_bfloat16 where the CPU computes bf16 natively
(AVX-512 BF16 or AMX; a GPU of compute capability 8.0+), else in float32, as tft-train chooses; --mixed_precision=
float32 or mixed_bfloat16 forces one. The weights stay float32 and the scores are float32 either way; one log line
says which precision and why. An export's precision is fixed when it is made (tft-export --mixed_precision).
"""

import logging as pylogging

from absl import flags

from tf_transformer.cli import _decoding_flags as decoding_flags
from tf_transformer.cli import exit_on, progress_bar, run_binary, write_output
from tf_transformer.data.text_files import read_sentences

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "A model directory written by tft-train.")
_SAVED_MODEL = flags.DEFINE_string(
    "saved_model", None, "Instead of --model_dir: an export of tft-export (a version or its base folder)."
)
_INPUT = flags.DEFINE_string("input", None, "Source sentences, one a line, plain or gzip (default: stdin).")
_OUTPUT = flags.DEFINE_string("output", None, "Where to write the translations (default: stdout).")
_N_BEST = flags.DEFINE_integer("n_best", 1, "Hypotheses per sentence; > 1 writes `i ||| text ||| score` lines.")
_TARGET_PREFIX = flags.DEFINE_string(
    "target_prefix", None, "Target prefixes, one a line aligned with --input (empty: none): each translation starts "
    "with its prefix.",
)  # fmt: skip
_WITH_ALIGNMENTS = flags.DEFINE_boolean(
    "with_alignments", False,
    "Append word alignments to each line: `translation ||| i-j i-j ...`, source word i (0-based, of the input "
    "line split at whitespace) to target word j, from the cross-attention of the penultimate decoder layer. With "
    "--n_best: `i ||| text ||| score ||| i-j ...`. Needs --model_dir (not with --saved_model: the export has no "
    "alignment signature).",
)  # fmt: skip
_ALIGNMENT_LAYER = flags.DEFINE_integer(
    "alignment_layer", None,
    "With --with_alignments: the decoder layer whose attention aligns (0-based; negative counts from the top, -1 "
    "the last). Default: the penultimate layer.",
)  # fmt: skip


# Fixed when a model is exported: not flags of a translation with --saved_model.
_EXPORT_SETTINGS = (
    "checkpoint", "average_last", "beam_size", "length_penalty", "method", "max_decode_length", "no_repeat_ngram_size",
    "quantize", "mixed_precision",
)  # fmt: skip


def check_flag_values():
    """The flags' own checks (no file read): one of --model_dir and --saved_model; with --saved_model, none of the
    settings fixed in the export. check_flags runs them first, tests/test_docs.py on documented lines."""
    if (_MODEL_DIR.value is None) == (_SAVED_MODEL.value is None):
        raise ValueError("give one of --model_dir (a trained model directory) and --saved_model (an export).")
    if _SAVED_MODEL.value is not None:
        given = [f"--{name}" for name in _EXPORT_SETTINGS if flags.FLAGS[name].present]
        if given:
            raise ValueError(
                f"{', '.join(given)}: fixed when the model was exported, so not a flag with --saved_model. Fix: leave "
                "it out, or export again with the setting (tft-export)."
            )
    if _SAVED_MODEL.value is not None and _WITH_ALIGNMENTS.value:
        raise ValueError(
            "--with_alignments: an export has no alignment signature, so not with --saved_model. Fix: translate "
            "with --model_dir (the model directory the export was made from)."
        )
    if _ALIGNMENT_LAYER.value is not None and not _WITH_ALIGNMENTS.value:
        raise ValueError("--alignment_layer: only with --with_alignments. Fix: add --with_alignments, or leave it out.")
    decoding_flags.check_flag_values()


def check_flags():
    """The flags, the model directory's decoding settings and the input, checked and read before TensorFlow starts:
    (the settings (None with --saved_model), the sentences, the target prefixes or None)."""
    check_flag_values()
    decoding = None if _MODEL_DIR.value is None else decoding_flags.settings(_MODEL_DIR.value, n_best=_N_BEST.value)
    sentences = read_sentences(_INPUT.value, "--input")
    prefixes = None
    if _TARGET_PREFIX.value is not None:
        prefixes = read_sentences(_TARGET_PREFIX.value, "--target_prefix")
        if len(prefixes) != len(sentences):
            raise ValueError(
                f"--target_prefix: {len(prefixes)} lines for {len(sentences)} input lines. Fix: give one prefix a "
                "line for each input line (an empty line for none)."
            )
    return decoding, sentences, prefixes


def main(argv, checked):
    """Translates with `checked`, what `check_flags` returned."""
    del argv
    decoding, sentences, prefixes = checked
    pylogging.getLogger("absl").setLevel(pylogging.WARNING)  # TensorFlow's INFO lines; ours stay
    with exit_on(FileNotFoundError, ValueError):  # ConfigError and DataError are ValueErrors
        # Imported here, not at the top: --help and a bad flag need no TensorFlow.
        from tf_transformer.decoding.text import TextTranslator, format_results

        with progress_bar(len(sentences), "sentence", shown=_OUTPUT.value is not None) as progress:
            if _SAVED_MODEL.value is not None:
                from tf_transformer.export import translate_with_saved_model

                results = translate_with_saved_model(
                    _SAVED_MODEL.value, sentences, n_best=_N_BEST.value,
                    batch_tokens=decoding_flags.BATCH_TOKENS.value, progress=progress, target_prefixes=prefixes,
                )  # fmt: skip
            else:
                model, tokenizer, _ = decoding_flags.load_model(_MODEL_DIR.value, decoding)
                translator = TextTranslator(
                    model, tokenizer, decoding, batch_tokens=decoding_flags.BATCH_TOKENS.value,
                    with_alignments=_WITH_ALIGNMENTS.value, alignment_layer=_ALIGNMENT_LAYER.value,
                )  # fmt: skip
                results = translator(sentences, progress=progress, target_prefixes=prefixes)
    write_output(_OUTPUT.value, format_results(results, scored=_N_BEST.value > 1))


def run():
    """The `tft-translate` command (its console script and the checkout's wrapper script call it)."""
    run_binary(__name__, main, *decoding_flags.FLAG_MODULES, check_flags=check_flags)


if __name__ == "__main__":
    run()
