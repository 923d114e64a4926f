"""Scores given translations with a trained model directory: how probable the model finds each target.

    tft-translate --model_dir=runs/multi30k --input=../shared/data/multi30k/val.en.gz --output=val.hyp.de
    tft-score --model_dir=runs/multi30k --sources=../shared/data/multi30k/val.en.gz --targets=val.hyp.de > scores.txt

(--targets=../shared/data/multi30k/val.de.gz scores the reference translations instead.)

Reads --sources and --targets (plain or gzip, one sentence a line, the same number of lines) and writes one
line per pair, in input order, to --output (default stdout), three tab-separated fields:

    log_prob<TAB>average<TAB>num_tokens      e.g. -12.345600<TAB>-1.028800<TAB>12

log_prob is the natural-log probability of the target's tokens and its final EOS given the source (teacher-
forced, no search), num_tokens the tokens scored (EOS included) and average = log_prob / num_tokens. An empty
or blank target is scored as EOS alone (1 token: the probability of the empty translation); an empty source
as the source EOS alone. A beam search with --length_penalty=0 reports the same log_prob for its own output.
A progress bar goes to stderr when --output is a file. Scoring happens in
`tf_transformer.decoding.scoring.score_texts`.

Weights as in tft-translate: the latest checkpoint of --model_dir/checkpoints; --checkpoint=PATH for another
(or best); --average_last=N to average the last N checkpoints in memory; without either, MODEL_DIR/decoding.json's
average_last if it sets one. --mixed_precision as in tft-translate: auto scores in mixed_bfloat16 where the CPU
computes bf16 natively, else in float32 (the log-probabilities are summed in float32 either way).
"""

import logging as pylogging

from absl import flags

from tf_transformer.checkpoint_files import check_latest_checkpoint
from tf_transformer.cli import _precision_flag as precision_flag
from tf_transformer.cli import check_weights_flags, exit_on, progress_bar, run_binary, write_output
from tf_transformer.data.text_files import read_sentences
from tf_transformer.decoding.settings import resolve_settings
from tf_transformer.model_dir import check_model_dir

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "A model directory written by tft-train.", required=True)
_SOURCES = flags.DEFINE_string("sources", None, "Source sentences, one a line, plain or gzip.", required=True)
_TARGETS = flags.DEFINE_string(
    "targets", None, "Target sentences to score, one per source line, plain or gzip.", required=True
)
_OUTPUT = flags.DEFINE_string("output", None, "Where to write the scores (default: stdout).")
# tft-translate's checkpoint flags, defined here as tft-export does: its shared module also brings the
# decoding flags (beam size, method, ...), which mean nothing to a scorer.
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "A checkpoint path prefix, or best (default: the latest).")
_AVERAGE_LAST = flags.DEFINE_integer(
    "average_last", None, "Average the last N checkpoints in memory (default: decoding.json's average_last, if any)."
)
_BATCH_TOKENS = flags.DEFINE_integer(
    "batch_tokens", 4096, "Positions per batch on the longer side of the pairs (padding included)."
)


def check_flags():
    """The checks that need no TensorFlow (the checkpoint flags, that --model_dir is a model directory, the weights
    to use and, when they are the latest checkpoint, that its files are there, both files readable and one target
    line per source line): (sources, targets, average_last, where average_last came from)."""
    check_weights_flags(_CHECKPOINT.value, _AVERAGE_LAST.value)
    check_model_dir(_MODEL_DIR.value)
    given = {"average_last": _AVERAGE_LAST.value} if _AVERAGE_LAST.present else {}
    settings, origins = resolve_settings(given, _MODEL_DIR.value, checkpoint_given=_CHECKPOINT.value is not None)
    check_latest_checkpoint(_MODEL_DIR.value, _CHECKPOINT.value, settings["average_last"])
    sources = read_sentences(_SOURCES.value, "--sources")
    targets = read_sentences(_TARGETS.value, "--targets")
    if len(sources) != len(targets):
        raise ValueError(
            f"--sources {_SOURCES.value} has {len(sources)} lines but --targets {_TARGETS.value} has "
            f"{len(targets)}. Fix: give one target line per source line (an empty line for an empty target)."
        )
    return sources, targets, settings["average_last"], origins["average_last"]


def main(argv, checked):
    """Scores the pairs `checked` (what `check_flags` returned) with the model directory's model."""
    del argv
    sources, targets, average_last, origin = checked
    pylogging.getLogger("absl").setLevel(pylogging.WARNING)  # TensorFlow's INFO lines; ours stay
    # Imported here, not at the top: --help must not import TensorFlow.
    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.decoding.scoring import format_scores, score_texts

    with exit_on(FileNotFoundError, ValueError):  # ConfigError and DataError are ValueErrors
        pylogging.getLogger("tf_transformer").info(
            "Scoring with average_last=%s (%s)", "none" if average_last is None else average_last, origin
        )
        precision_flag.apply("none")
        model, tokenizer, _ = load_translation_model(_MODEL_DIR.value, _CHECKPOINT.value, average_last=average_last)
        with progress_bar(len(sources), "pair", shown=_OUTPUT.value is not None) as progress:
            results = score_texts(
                model, tokenizer, sources, targets, batch_tokens=_BATCH_TOKENS.value, progress=progress
            )
    write_output(_OUTPUT.value, format_scores(results))


def run():
    """The `tft-score` command (its console script and the checkout's wrapper script call it)."""
    run_binary(__name__, main, precision_flag.__name__, check_flags=check_flags)


if __name__ == "__main__":
    run()
