"""Trains a Transformer; run the same command again to resume after a crash.

    tft-train --config=tiny --data_dir=../shared/data/multi30k --model_dir=runs/tiny --train_steps=2000

Multi30k (the default --dataset) from --data_dir, English to German; without --data_dir it is downloaded once.

--config names a recipe (`tf_transformer.recipe.Recipe`: the model config and its training, subword and decoding
settings) and --override changes any of its settings; the flags build the data and training configs around it.
The configs are saved as JSON in --model_dir; everything else happens in `tf_transformer.training.train`.
"""

import dataclasses
import logging as pylogging
import sys

from absl import flags

from tf_transformer.cli import exit_on, run_binary
from tf_transformer.config import ConfigError
from tf_transformer.data.config import DataConfig
from tf_transformer.data.errors import DataError, VocabularyInterrupted
from tf_transformer.data.text_files import inspect_parallel_files
from tf_transformer.errors import CheckpointError, PeerWorkerLost, TrainingDiverged, TrainingInterrupted
from tf_transformer.recipe import Recipe
from tf_transformer.training.train_config import BUDGET_SCHEDULES, PRECISIONS, STRATEGIES, TrainConfig

# The recipe: model, training, subword and decoding settings.
_CONFIG = flags.DEFINE_string(
    "config", "base", "A preset name (tiny, base, big, ...) or a JSON recipe file (with --init_from: the source's)."
)
_OVERRIDE = flags.DEFINE_multi_string(
    "override", [], "field=value changes to the recipe: a model, training, subword or decode_* field (repeatable)."
)
# Data: None leaves the DataConfig default.
_DATASET = flags.DEFINE_string("dataset", None, 'Data source: "files", "multi30k" or "tfds:<name>".')
_TRAIN_SOURCE = flags.DEFINE_string("train_source", None, "Training source sentences, one a line (plain or gzip).")
_TRAIN_TARGET = flags.DEFINE_string("train_target", None, "Training target sentences, aligned with the source.")
_VALID_SOURCE = flags.DEFINE_string("valid_source", None, "Validation source sentences.")
_VALID_TARGET = flags.DEFINE_string("valid_target", None, "Validation target sentences.")
_SOURCE_LANG = flags.DEFINE_string("source_lang", None, "Source language (multi30k: en, de, fr).")
_TARGET_LANG = flags.DEFINE_string("target_lang", None, "Target language.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Local Multi30k copy; without it the files are downloaded once.")
_CACHE_DIR = flags.DEFINE_string("cache_dir", None, "Where downloads are cached.")
_TFDS_DATA_DIR = flags.DEFINE_string("tfds_data_dir", None, "TFDS data_dir.")
_TFDS_OFFLINE = flags.DEFINE_bool("tfds_offline", None, "Read only prepared TFDS data; never download.")
_VOCAB_TYPE = flags.DEFINE_enum("vocab_type", None, ["sentencepiece", "wordpiece"], "Subword vocabulary type.")
_LOWERCASE = flags.DEFINE_bool(
    "lowercase", None, "Lowercase all text (the vocabulary case-folds; translations come out lowercased)."
)
_VOCAB_SIZE = flags.DEFINE_integer(
    "vocab_size", None, "Subword vocabulary size (default: the model config's vocab_size)."
)
_BATCH_TOKENS = flags.DEFINE_integer(
    "batch_tokens", None, "Source + target tokens per batch (the paper: about 25000 + 25000)."
)
_BATCH_MULTIPLE = flags.DEFINE_integer("batch_multiple", None, "Batches hold a multiple of this many pairs.")
_MAX_LENGTH = flags.DEFINE_integer(
    "max_length", None, "Most tokens per side of a training pair (default: the model's max_length)."
)
_LONG_PAIRS = flags.DEFINE_enum("long_pairs", None, ["drop", "truncate"], "What to do with longer pairs.")
_SHUFFLE_BUFFER = flags.DEFINE_integer("shuffle_buffer", None, "Pairs in the shuffle buffer.")
# Training: the defaults are TrainConfig's, written there only.
_DEFAULTS = {field.name: field.default for field in dataclasses.fields(TrainConfig)}
_MODEL_DIR = flags.DEFINE_string("model_dir", None, "Checkpoints, logs, vocabulary and configs.", required=True)
_INIT_FROM = flags.DEFINE_string(
    "init_from",
    None,
    "Fine-tune: start --model_dir from this model directory's latest checkpoint (or this checkpoint prefix in one) "
    "and vocabulary, with a fresh optimizer from step 0 and a 200-step warmup to the rate the source ended at. "
    "Ignored when --model_dir holds checkpoints: the run resumes.",
)
_TRAIN_STEPS = flags.DEFINE_integer(
    "train_steps", _DEFAULTS["train_steps"], "Optimizer steps in total, across restarts."
)
_TIME_LIMIT_MINUTES = flags.DEFINE_float(
    "time_limit_minutes",
    _DEFAULTS["time_limit_minutes"],
    "Stop after this many minutes (from the start, vocabulary included) with a checkpoint, even before "
    "--train_steps; run again to go on.",
)
_BUDGET_SCHEDULE = flags.DEFINE_enum(
    "budget_schedule",
    _DEFAULTS["budget_schedule"],
    BUDGET_SCHEDULES,
    "auto: with --time_limit_minutes, predict the steps the limit holds from measured step times, decay the "
    "learning rate linearly to zero there and stop at that step; on: also without a limit (zero at --train_steps); "
    "off: the schedule as it is.",
)
_BUDGET_DECAY_FRACTION = flags.DEFINE_float(
    "budget_decay_fraction", _DEFAULTS["budget_decay_fraction"], "Share of the predicted steps the rate decays over."
)
_CHECKPOINT_EVERY = flags.DEFINE_integer(
    "checkpoint_every", _DEFAULTS["checkpoint_every"], "Steps between checkpoints and validations."
)
_KEEP_CHECKPOINTS = flags.DEFINE_integer("keep_checkpoints", _DEFAULTS["keep_checkpoints"], "Checkpoints to keep.")
_STRATEGY = flags.DEFINE_enum("strategy", _DEFAULTS["strategy"], STRATEGIES, "tf.distribute strategy.")
_NUM_CPU_DEVICES = flags.DEFINE_integer(
    "num_cpu_devices", _DEFAULTS["num_cpu_devices"], "Split the CPU into N logical devices (0: don't)."
)
_MIXED_PRECISION = flags.DEFINE_enum(
    "mixed_precision",
    _DEFAULTS["mixed_precision"],
    PRECISIONS,
    "Keras dtype policy; auto: mixed_bfloat16 where the hardware computes bf16 natively (GPU compute capability "
    "8.0+, TPU, CPU with AVX-512 BF16 or AMX), else float32.",
)
_JIT_COMPILE = flags.DEFINE_bool("jit_compile", _DEFAULTS["jit_compile"], "Compile the training step with XLA.")
_LOG_EVERY = flags.DEFINE_integer("log_every", _DEFAULTS["log_every"], "Steps between TensorBoard points.")
_VALIDATION_BATCHES = flags.DEFINE_integer(
    "validation_batches", _DEFAULTS["validation_batches"], "Validation batches per evaluation (0: all)."
)
_BLEU_EVERY = flags.DEFINE_integer(
    "bleu_every",
    _DEFAULTS["bleu_every"],
    "Validation BLEU at the first checkpoint at or after every N steps, and at the end (0: off).",
)
_BLEU_SENTENCES = flags.DEFINE_integer(
    "bleu_sentences", _DEFAULTS["bleu_sentences"], "Validation BLEU on the first N validation pairs."
)
_BLEU_BEAM_SIZE = flags.DEFINE_integer(
    "bleu_beam_size", _DEFAULTS["bleu_beam_size"], "Beam width for validation BLEU (1: greedy)."
)
_KEEP_BEST = flags.DEFINE_bool(
    "keep_best", _DEFAULTS["keep_best"], "With --bleu_every, keep the best model by BLEU in MODEL_DIR/best."
)
_SEED = flags.DEFINE_integer("seed", None, "Seed for weights, data order and dropout.")
_DETERMINISTIC = flags.DEFINE_bool(
    "deterministic", _DEFAULTS["deterministic"], "Deterministic ops and data order (slower)."
)

_DATA_FLAGS = {
    "dataset": _DATASET, "train_source": _TRAIN_SOURCE, "train_target": _TRAIN_TARGET,
    "valid_source": _VALID_SOURCE, "valid_target": _VALID_TARGET, "source_lang": _SOURCE_LANG,
    "target_lang": _TARGET_LANG, "data_dir": _DATA_DIR, "cache_dir": _CACHE_DIR, "tfds_data_dir": _TFDS_DATA_DIR,
    "tfds_offline": _TFDS_OFFLINE, "vocab_type": _VOCAB_TYPE, "vocab_size": _VOCAB_SIZE,
    "lowercase": _LOWERCASE,
    "batch_tokens": _BATCH_TOKENS, "batch_multiple": _BATCH_MULTIPLE, "max_length": _MAX_LENGTH,
    "long_pairs": _LONG_PAIRS, "shuffle_buffer": _SHUFFLE_BUFFER,
}  # fmt: skip


def configs(init_from=None):
    """(model_config, data_config, train_config, decoding settings) of the flags, and of `init_from` (a
    fine-tuning's defaults from `init_from_defaults`) where given; each config checks its values (ConfigError)."""
    if init_from is not None and not flags.FLAGS["config"].present:
        recipe = init_from.recipe  # the source's, with the fine-tuning schedule
    else:
        recipe = Recipe.load(_CONFIG.value, _OVERRIDE.value)
    model_config = recipe.model
    data_values = {**recipe.data}
    data_values.update({name: flag.value for name, flag in _DATA_FLAGS.items() if flag.value is not None})
    if init_from is not None:  # the vocabulary comes from --init_from; a --vocab_* flag that differs is refused
        data_values.setdefault("vocab_type", init_from.vocab_type)
        data_values.setdefault("vocab_size", init_from.vocab_size)
        data_values.setdefault("lowercase", init_from.lowercase)
    data_values.setdefault("max_length", model_config.max_length)  # the longest pairs the model accepts
    # The config's vocab_size is the size of the vocabulary to build (the model's own is then read off the built
    # vocabulary): a config or --override that sets it must not be silently ignored.
    data_values.setdefault("vocab_size", model_config.vocab_size)
    data_config = DataConfig(**data_values, seed=_SEED.value, deterministic=_DETERMINISTIC.value)
    train_config = TrainConfig(
        model_dir=_MODEL_DIR.value, train_steps=_TRAIN_STEPS.value,
        time_limit_minutes=_TIME_LIMIT_MINUTES.value, budget_schedule=_BUDGET_SCHEDULE.value,
        budget_decay_fraction=_BUDGET_DECAY_FRACTION.value, checkpoint_every=_CHECKPOINT_EVERY.value,
        keep_checkpoints=_KEEP_CHECKPOINTS.value, strategy=_STRATEGY.value,
        num_cpu_devices=_NUM_CPU_DEVICES.value, mixed_precision=_MIXED_PRECISION.value,
        jit_compile=_JIT_COMPILE.value, log_every=_LOG_EVERY.value,
        validation_batches=_VALIDATION_BATCHES.value, bleu_every=_BLEU_EVERY.value,
        bleu_sentences=_BLEU_SENTENCES.value, bleu_beam_size=_BLEU_BEAM_SIZE.value, keep_best=_KEEP_BEST.value,
        seed=_SEED.value, deterministic=_DETERMINISTIC.value, init_from=_INIT_FROM.value, **recipe.training,
    )  # fmt: skip
    return model_config, data_config, train_config, recipe.decoding


def check_flags():
    """The configs of the flags, checked before TensorFlow starts (a bad --override is refused at once); None with
    --init_from, whose defaults come from the source model directory, read in `main`. With --dataset=files the
    files are read and checked here too (missing, empty, not UTF-8, misaligned: refused in a second); the
    training then does not read them again."""
    checked = check_flag_values()
    if (checked[1].dataset if checked else _DATASET.value) == "files":
        for split, (source, target) in {"train": (_TRAIN_SOURCE, _TRAIN_TARGET),
                                        "valid": (_VALID_SOURCE, _VALID_TARGET)}.items():  # fmt: skip
            if source.value is not None and target.value is not None:
                inspect_parallel_files(source.value, target.value, f"--{split}_source", f"--{split}_target")
    return checked


def check_flag_values():
    """The configs of the flags (None with --init_from): check_flags' first step, and tests/test_docs.py's."""
    return None if _INIT_FROM.value is not None else configs()


def main(argv, checked):
    """Trains with `checked`, the configs `check_flags` returned (None: built here, from --init_from's source)."""
    del argv
    # TensorFlow's own INFO lines (one per checkpoint save) go through absl's logger; ours through
    # "tf_transformer".
    pylogging.getLogger("absl").setLevel(pylogging.WARNING)
    from tf_transformer.training import train  # not at the top: --help needs no TensorFlow

    # TimeoutError: a non-chief worker waited in vain for the chief's vocabulary.
    with exit_on(ConfigError, DataError, CheckpointError, TrainingDiverged, PeerWorkerLost, TimeoutError):
        try:
            if checked is None:
                from tf_transformer.training.fine_tuning import init_from_defaults

                checked = configs(init_from_defaults(_INIT_FROM.value, _MODEL_DIR.value, _OVERRIDE.value))
            result = train(*checked)
        except (TrainingInterrupted, VocabularyInterrupted) as stop:
            print(f"interrupted: {stop}", file=sys.stderr)
            sys.exit(128 + stop.signal_number)  # the shell's convention for "ended by signal N"
    if result.status == "already_complete":
        print(f"Already trained {result.step} steps (--train_steps={_TRAIN_STEPS.value}); nothing to do.")
    else:
        print(f"Trained steps {result.start_step} -> {result.step}; checkpoint {result.checkpoint}")
        if result.planned_end is not None:
            print(
                f"Reached the end that the time budget planned (step {result.planned_end}, the learning rate "
                f"decayed to zero) within --time_limit_minutes={_TIME_LIMIT_MINUTES.value:g}, before step "
                f"{_TRAIN_STEPS.value}; run the same command again to train on (a short re-warmup, then a new decay)."
            )
        elif result.status == "time_limit":
            print(
                f"Stopped by --time_limit_minutes={_TIME_LIMIT_MINUTES.value:g} before step {_TRAIN_STEPS.value}; "
                "run the same command again to go on."
            )
    print(f"Weights digest {result.weights_digest} ({result.replicas} replica(s))")
    if result.best is not None:  # the best evaluation so far, this run's or an earlier one's
        best = result.best
        print(f"Best validation BLEU {best['bleu']:.2f} at step {best.get('step', '?')}: use --checkpoint=best")


def run():
    """The `tft-train` command (its console script and the checkout's wrapper script call it)."""
    run_binary(__name__, main, check_flags=check_flags)


if __name__ == "__main__":
    run()
