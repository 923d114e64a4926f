"""The training run behind `tft-train`: data, vocabulary, strategy, `model.fit`, checkpoints, resume."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import logging
import math
import pathlib
import sys
import time
from typing import Optional

import keras
import tensorflow as tf

# TensorFlow exports only the enabling side of op determinism; restoring a caller's setting needs the other.
from tensorflow.python.framework import config as tf_framework_config

from tf_transformer import data as data_lib
from tf_transformer.checkpoints import restore_newest_readable
from tf_transformer.config import DECODE_FIELDS, ConfigError, TransformerConfig
from tf_transformer.data.vocab import TOKENIZER_JSON
from tf_transformer.decoding.settings import DecodingSettings, update_decoding_json
from tf_transformer.decoding.text import TextTranslator
from tf_transformer.model_dir import (
    BEST_DIR,
    BLEU_LOG_DIR,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    DATA_CONFIG_FILE,
    DATA_REPORT_FILE,
    LOG_DIR,
    TRAIN_CONFIG_FILE,
    TRAIN_LOG_DIR,
    VOCAB_DIR,
)
from tf_transformer.models import Transformer
from tf_transformer.training import budget as budget_lib
from tf_transformer.training import fine_tuning
from tf_transformer.training.callbacks import (
    CheckpointEveryEpoch,
    LogFirstStep,
    StopAtStep,
    StopAtTimeLimit,
    StopOnNonFiniteLoss,
    StopSignals,
    TrainingDiverged,
    TrainingInterrupted,
    TrainingMonitor,
)
from tf_transformer.training.metrics import MaskedAccuracy, TokenCount
from tf_transformer.training.multi_worker import cluster_role, fit_multi_worker, wait_for_file
from tf_transformer.training.optimizer import make_loss, make_optimizer
from tf_transformer.training.precision import resolve_precision, restores_dtype_policy
from tf_transformer.training.resume_state import KEY as RESUME_STATE_KEY
from tf_transformer.training.resume_state import ResumeState
from tf_transformer.training.train_config import INITIALIZED_FROM, TrainConfig, saved_values
from tf_transformer.training.validation_bleu import ValidationBleu

logger = logging.getLogger("tf_transformer")

# Model-config fields a restart may change: the vocabulary size is resolved from the built vocabulary,
# training hyperparameters (e.g. a lower learning rate after a divergence) do not change the weights' shapes,
# and the decoding settings (decoding.json's) do not touch training.
RESUMABLE_CHANGES = (
    "vocab_size", "target_vocab_size", "dropout", "dropout_by_epochs", "attention_dropout", "activation_dropout",
    "label_smoothing", "subword_nbest_size", "subword_alpha", "warmup_steps", "learning_rate_scale", *DECODE_FIELDS,
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What a call to `train` did: "completed"; "time_limit" when `time_limit_minutes` stopped it before
    `train_steps` (run again to go on); or "already_complete" when nothing was left to do.

    `best` is the best validation BLEU evaluation so far (best.json's contents) when the run keeps one.
    `planned_end` is the step a time budget's plan ended the run at (its learning rate at zero; `budget_schedule`,
    status "time_limit"), None when anything else stopped it.
    """

    status: str
    step: int
    start_step: int
    checkpoint: Optional[str]
    history: dict
    replicas: int = 1
    weights_digest: str = ""
    best: Optional[dict] = None
    planned_end: Optional[int] = None


def configure_devices(num_cpu_devices: int) -> None:
    """Splits the CPU into `num_cpu_devices` logical devices; must run before TensorFlow starts its devices."""
    if num_cpu_devices <= 0:
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    wanted = [tf.config.LogicalDeviceConfiguration()] * num_cpu_devices
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == num_cpu_devices:
        return
    try:
        tf.config.set_logical_device_configuration(cpu, wanted)
    except RuntimeError as error:
        raise RuntimeError(
            f"num_cpu_devices={num_cpu_devices}: TensorFlow already started its devices, so the CPU can no longer be "
            "split. Fix: call configure_devices (or train) before running any TensorFlow op in this process."
        ) from error


def make_strategy(train_config: TrainConfig) -> tf.distribute.Strategy:
    """The `tf.distribute` strategy named by `train_config.strategy` (see `TrainConfig`)."""
    name = train_config.strategy
    if name == "multi_worker_mirrored":
        # The cluster comes from TF_CONFIG; this must precede any op, device listing included.
        return tf.distribute.MultiWorkerMirroredStrategy()
    gpus = tf.config.list_logical_devices("GPU")
    cpus = tf.config.list_logical_devices("CPU")
    if name == "auto":
        name = "mirrored" if len(gpus) > 1 or (not gpus and len(cpus) > 1) else "one_device"
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else cpus[0].name)
    if name == "mirrored":
        return tf.distribute.MirroredStrategy([device.name for device in (gpus or cpus)])
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ConfigError(
        f"strategy: unknown option {name!r}. Fix: use auto, one_device, mirrored, multi_worker_mirrored or tpu."
    )


def _check_same_run(model_dir: pathlib.Path, file_name: str, config, ignore=()) -> None:
    """A model directory holds one run: a restart must use the settings (`config`, a config dataclass) it was
    started with.

    A field the file lacks counts as the field's default: a field added by a later version of the package has,
    for a run started before it, the value that run had (the default), so resuming that run is not refused."""
    path = model_dir / file_name
    if not path.is_file():
        return
    expected = config.to_dict()
    fields = dataclasses.fields(config)
    defaults = {field.name: field.default for field in fields if field.default is not dataclasses.MISSING}
    saved = {**defaults, **json.loads(path.read_text())}
    changed = sorted(
        key for key in set(saved) | set(expected) if key not in ignore and saved.get(key) != expected.get(key)
    )
    if changed:
        details = ", ".join(f"{key}: {saved.get(key)!r} -> {expected.get(key)!r}" for key in changed)
        raise ConfigError(
            f"{model_dir} holds a run with different settings in {file_name} ({details}). Fix: use a new "
            "--model_dir, or resume with the settings the run started with."
        )


def weights_digest(model: keras.Model) -> str:
    """A short hash of all trainable weights: equal on every worker of a synchronous run."""
    digest = hashlib.sha256()
    for variable in model.trainable_variables:
        digest.update(variable.numpy().tobytes())
    return digest.hexdigest()[:16]


def _open_optional(data_config, split: str):
    """The split's corpus, or None when the data has no such split (files given without --valid_*)."""
    if data_config.dataset == "files" and getattr(data_config, f"{split}_source") is None:
        return None
    return data_lib.open_corpus(data_config, split)


def _restores_op_determinism(function):
    """Decorator: TensorFlow's process-wide op determinism is as the caller had it when `function` returns or raises.

    `train(deterministic=True)` turns it on; left on, it would change the kernels (and so the numerics) of
    everything the caller runs next in the process (a notebook, a test suite's later tests).
    """

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        was_enabled = tf_framework_config.is_op_determinism_enabled()
        try:
            return function(*args, **kwargs)
        finally:
            if not was_enabled:
                tf_framework_config.disable_op_determinism()

    return wrapper


@restores_dtype_policy  # the model is built under the run's policy; the caller's global policy comes back
@_restores_op_determinism
def train(model_config: TransformerConfig, data_config, train_config: TrainConfig) -> TrainResult:
    """Trains (or resumes training) a `Transformer` as `train_config` says; the one entry of `tft-train`.

    Order matters for "nothing is lost and nothing looks valid by mistake": the data is read and checked,
    and the vocabulary built, before anything but the vocabulary is written to `model_dir`; the resolved
    configs are written before the first checkpoint; checkpoints are TensorFlow's (atomic index update)
    and never hold non-finite weights. With `multi_worker_mirrored` only the chief writes to `model_dir`.

    Args:
        model_config: the model; its vocabulary size is replaced by the subword vocabulary's.
        data_config: a `tf_transformer.data.DataConfig`.
        train_config: steps, checkpoints, devices, precision.

    Returns:
        A `TrainResult`.

    Raises:
        ConfigError: bad or inconsistent settings (e.g. a model_dir started with other settings).
        CheckpointError: checkpoints exist in model_dir but none can be read (a damaged latest one alone is
            set aside with a warning, and training resumes from the newest readable one).
        tf_transformer.data.DataError: missing, empty, undecodable or misaligned data.
        TrainingDiverged: the loss or the weights became NaN; the last good checkpoint is kept.
        TrainingInterrupted: SIGTERM or SIGINT (in the main thread) stopped the run after the step in progress,
            and a checkpoint was saved at that step.
        PeerWorkerLost: (multi_worker_mirrored) another worker died; the last checkpoint is kept.
    """
    # The time limit covers the whole call: vocabulary, data reading and tracing too.
    started = time.monotonic()
    configure_devices(train_config.num_cpu_devices)
    # Before any other op: MultiWorkerMirroredStrategy sets up the collective ops of the whole program.
    strategy = make_strategy(train_config)
    multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    is_chief = cluster_role(strategy)[2] if multi_worker else True
    # "auto" looks at the devices, which a multi-worker run may list only once its strategy exists.
    precision = resolve_precision(train_config.mixed_precision, tpu=isinstance(strategy, tf.distribute.TPUStrategy))
    logger.info("Precision: %s (%s)", *precision)
    keras.config.set_dtype_policy(precision[0])
    if train_config.seed is not None:
        keras.utils.set_random_seed(train_config.seed)
    if train_config.deterministic:
        tf.config.experimental.enable_op_determinism()

    model_dir = pathlib.Path(train_config.model_dir)
    _check_settings(model_config, data_config, train_config, multi_worker)
    init_source = _init_source(model_config, data_config, train_config, model_dir)
    # Opening a corpus reads and checks its files: bad data fails here, before anything is written.
    train_corpus = data_lib.open_corpus(data_config, "train", training=True)
    valid_corpus = _open_optional(data_config, "valid")
    phase_started = time.monotonic()
    vocabulary_existed = (model_dir / VOCAB_DIR / TOKENIZER_JSON).is_file()
    if init_source is not None and is_chief:  # the other workers wait for the copy as for a built vocabulary
        fine_tuning.copy_vocabulary(init_source, model_dir / VOCAB_DIR)
    tokenizer = _vocabulary(data_config, model_dir / VOCAB_DIR, train_corpus, is_chief)
    logger.info("Vocabulary of %d pieces ready in %.1f s.", tokenizer.vocab_size, time.monotonic() - phase_started)
    phase_started = time.monotonic()
    report = _saved_report(model_dir / DATA_REPORT_FILE, train_corpus) if vocabulary_existed else None
    if report is None:
        report = data_lib.scan_lengths(data_config, tokenizer, "train", corpus=train_corpus)
        logger.info("%s (scanned in %.1f s)", report.summary(), time.monotonic() - phase_started)
    else:
        logger.info("%s (the run's own %s: not scanned again)", report.summary(), DATA_REPORT_FILE)
    resolved = model_config.replace(vocab_size=tokenizer.vocab_size, target_vocab_size=None)

    # Time-limited runs fit their learning rate to the steps the limit holds (training/budget.py).
    budgeted = train_config.fits_budget
    with strategy.scope():
        model = _build_model(resolved)
        optimizer = make_optimizer(resolved, budget=budgeted)
        loss = make_loss(resolved)
        if not multi_worker:
            metrics = [MaskedAccuracy(resolved.pad_id), TokenCount(resolved.pad_id)]
            model.compile(optimizer=optimizer, loss=loss, metrics=metrics, jit_compile=train_config.jit_compile)
        model.build()
        optimizer.build(model.trainable_variables)  # so a restore finds the moments to fill
    # Before the manager reads the folder's index: a damaged latest checkpoint is set aside (by the chief) and
    # the index rewritten without it, so training resumes from the newest readable one.
    restored = restore_newest_readable(
        tf.train.Checkpoint(model=model, optimizer=optimizer), model_dir / CHECKPOINT_DIR, set_aside=is_chief
    )
    # Read before it is written again below: a restart keeps a fine-tuning run's record and continues its plan.
    previous_train_config = saved_values(model_dir / TRAIN_CONFIG_FILE)
    initialized_from = previous_train_config.get(INITIALIZED_FROM)  # a resumed fine-tuning run keeps its record
    if restored is None and init_source is not None:
        # The weights only: Adam's moments, the step (0), the input position and dropout states start afresh.
        fine_tuning.initialize_weights(model, init_source)
        initialized_from = init_source.record()
        logger.info(
            "Fine-tuning from %s (step %s of %s): its weights and vocabulary, a fresh optimizer from step 0, "
            "warmup_steps=%d, learning_rate_scale=%g (peak learning rate %.3g).",
            init_source.checkpoint, init_source.step, init_source.model_dir, resolved.warmup_steps,
            resolved.learning_rate_scale, fine_tuning.peak_learning_rate(resolved),
        )  # fmt: skip
    start_step = int(optimizer.iterations.numpy())
    # The input position and dropout states: a resumed run trains on the batches the uninterrupted one would.
    resume_state = ResumeState(model, batches_per_step=strategy.num_replicas_in_sync if multi_worker else 1)
    resume_state.restore(restored, start_step)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, **{RESUME_STATE_KEY: resume_state.trackable})
    manager = tf.train.CheckpointManager(
        checkpoint, str(model_dir / CHECKPOINT_DIR), max_to_keep=train_config.keep_checkpoints
    )

    plan = None
    if budgeted:  # a restart continues or follows the last plan
        plan = budget_lib.plan_for_start(
            budget_lib.plan_in(previous_train_config), start_step, train_config.time_limit_minutes,
            train_config.budget_decay_fraction, rewarm_steps=max(resolved.warmup_steps // 4, 1),
            train_steps=train_config.train_steps,
        )  # fmt: skip
    if is_chief:
        update_decoding_json(model_dir, resolved)  # before config.json, which it compares with
        resolved.to_json(model_dir / CONFIG_FILE)
        data_config.to_json(model_dir / DATA_CONFIG_FILE)
        train_config.to_json(
            model_dir / TRAIN_CONFIG_FILE, precision=precision, initialized_from=initialized_from,
            budget=None if plan is None else plan.to_dict(),
        )  # fmt: skip
        report.to_json(model_dir / DATA_REPORT_FILE)

    replicas = strategy.num_replicas_in_sync
    if start_step >= train_config.train_steps:
        logger.info("Already trained %d of %d steps: nothing to do.", start_step, train_config.train_steps)
        return TrainResult(
            "already_complete", start_step, start_step, manager.latest_checkpoint, {}, replicas, weights_digest(model)
        )
    batch_multiple = math.lcm(data_config.batch_multiple, replicas)
    # None when off; multi-worker runs with bleu_every were refused by _check_settings.
    bleu = (
        _validation_bleu(model, tokenizer, valid_corpus, train_config, model_dir) if train_config.bleu_every else None
    )
    try:
        with StopSignals() as stop_signals:
            # SIGTERM / SIGINT from here on: finish the step, save a checkpoint there, raise TrainingInterrupted.
            logger.info("Training from step %d to %d on %d replica(s).", start_step, train_config.train_steps, replicas)
            skip = int(resume_state.position.numpy())
            if skip:
                logger.info("Resuming the input where it stopped: skipping the %d batches already trained on.", skip)
            if multi_worker:

                def dataset_fn(input_context):
                    # Every worker builds the same seeded order and keeps its own share of the batches.
                    # Skipped before sharding: the position counts batches of the one seeded order.
                    dataset = data_lib.make_dataset(
                        data_config, tokenizer, "train", training=True, corpus=train_corpus, skip_batches=skip
                    )
                    return dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)

                log_dir = str(model_dir / TRAIN_LOG_DIR)
                history = fit_multi_worker(
                    model,
                    optimizer,
                    loss,
                    strategy,
                    dataset_fn,
                    checkpoint,
                    manager,
                    train_config,
                    log_dir,
                    stop_signals,
                    resume_state,
                )
            else:
                train_dataset = data_lib.make_dataset(
                    data_config, _training_tokenizer(tokenizer, resolved), "train", training=True, corpus=train_corpus,
                    batch_multiple=batch_multiple, skip_batches=skip,
                )  # fmt: skip
                valid_dataset = _validation_dataset(data_config, tokenizer, valid_corpus, train_config, batch_multiple)
                deadline = (
                    None
                    if train_config.time_limit_minutes is None
                    else (started + 60 * train_config.time_limit_minutes)
                )
                budget = None if plan is None else budget_lib.FitToBudget(
                    optimizer.budget_schedule, plan, deadline, 60 * (train_config.time_limit_minutes or 0),
                    optimizer.iterations, train_config.train_steps,
                    functools.partial(_save_plan, model_dir / TRAIN_CONFIG_FILE),
                    repredict_every=min(max(train_config.checkpoint_every, 100), 1000),
                    pause_every=train_config.checkpoint_every,
                    steps_per_epoch=report.num_batches,
                    choose_dropout=resolved.dropout_for_epochs if resolved.dropout_rule() else None,
                    apply_dropout=functools.partial(_apply_dropout, model),
                )  # fmt: skip
                history = _fit(
                    model, train_dataset, valid_dataset, manager, train_config, model_dir, bleu, stop_signals, deadline,
                    resume_state, started, budget,
                )  # fmt: skip
    except TrainingDiverged:  # a non-finite loss (StopOnNonFiniteLoss) or weights (the check before a save)
        raise TrainingDiverged(
            f"the training loss or weights became NaN or infinite near step {int(optimizer.iterations.numpy())}; "
            f"the last good checkpoint ({manager.latest_checkpoint or 'none yet'}) is kept. Fix: resume with a "
            "lower learning_rate_scale or more warmup_steps (--override), or prefer mixed_bfloat16 to mixed_float16."
        ) from None
    final_step = int(optimizer.iterations.numpy())
    logger.info("Stopped at step %d; latest checkpoint %s", final_step, manager.latest_checkpoint)
    # fit ends early without an error only at the time limit
    status = "completed" if final_step >= train_config.train_steps else "time_limit"
    planned_end = final_step if status == "time_limit" and plan is not None and final_step == plan.end_step else None
    return TrainResult(
        status, final_step, start_step, manager.latest_checkpoint, history, replicas, weights_digest(model),
        bleu.best if bleu is not None else None, planned_end,
    )  # fmt: skip


def _build_model(config: TransformerConfig) -> Transformer:
    """The run's model. When a budget may choose its dropout (`dropout_by_epochs`) and the config's is 0, the dropout
    layers are built at the highest rate of the rule, then set to 0: Keras gives a Dropout layer its random state
    only when it is created with a positive rate (with or without a budget, so that the checkpoints of one config
    hold the same random states)."""
    highest = max((rate for _, rate in config.dropout_rule()), default=0.0)
    if config.dropout > 0 or highest == 0:
        return Transformer(config)
    model = Transformer(config.replace(dropout=highest))
    model.set_dropout(config.dropout)
    return model


def _apply_dropout(model, rate: float) -> None:
    """Sets the model's dropout (a budget's choice) and rebuilds its training function, which would otherwise keep
    the rate it was traced with."""
    model.set_dropout(rate)
    model.make_train_function(force=True)


def _save_plan(train_config_path: pathlib.Path, plan) -> None:
    budget_lib.write_plan(train_config_path, plan)
    logger.info("Time budget: %s.", plan.describe())


def _check_settings(model_config, data_config, train_config, multi_worker) -> None:
    model_dir = pathlib.Path(train_config.model_dir)
    _check_same_run(model_dir, DATA_CONFIG_FILE, data_config)
    _check_same_run(model_dir, CONFIG_FILE, model_config, ignore=RESUMABLE_CHANGES)
    data_lib.check_special_ids(model_config)
    if data_config.max_length > model_config.max_length:
        raise ConfigError(
            f"max_length: the data allows {data_config.max_length} tokens a side but the model only "
            f"{model_config.max_length}. Fix: lower --max_length or raise the model's max_length (--override)."
        )
    if train_config.bleu_every and multi_worker:
        raise ConfigError(
            "bleu_every: validation BLEU during training is not supported with strategy=multi_worker_mirrored (its "
            "custom loop runs no Keras callbacks, and the chief decoding alone would stall the other workers). Fix: "
            "set --bleu_every=0 and score checkpoints afterwards with tft-evaluate --checkpoint=PATH."
        )
    if train_config.budget_schedule == "on" and multi_worker:
        raise ConfigError(
            "budget_schedule: not supported with strategy=multi_worker_mirrored (its custom loop runs no Keras "
            "callbacks). Fix: leave it at auto or off."
        )
    if train_config.time_limit_minutes is not None and multi_worker:
        raise ConfigError(
            "time_limit_minutes: not supported with strategy=multi_worker_mirrored (the workers' clocks would stop "
            "them at different steps, and a worker left alone waits for the others forever). Fix: leave it out and "
            "set --train_steps."
        )
    if train_config.bleu_every and data_config.dataset == "files" and data_config.valid_source is None:
        raise ConfigError(
            "bleu_every: validation BLEU needs a validation split. Fix: pass --valid_source=PATH and "
            "--valid_target=PATH, or set --bleu_every=0."
        )
    if model_config.samples_subwords and (multi_worker or data_config.deterministic or train_config.deterministic):
        why = (
            "every worker of multi-worker training must make the same batches"
            if multi_worker
            else ("deterministic batches must be the same on every run")
        )
        raise ConfigError(
            f"subword_nbest_size: the model config samples subword segmentations ({model_config.subword_nbest_size}), "
            f"but {why}, and tf-text's sampling takes no seed. Fix: pass "
            "--override=subword_nbest_size=0, or leave out --deterministic / multi_worker_mirrored."
        )
    if multi_worker and data_config.seed is None:
        raise ConfigError(
            "seed: multi-worker training shards one shuffled order of the batches across the workers, so every "
            "worker needs the same seed. Fix: pass --seed (the same on every worker)."
        )


def _init_source(model_config, data_config, train_config, model_dir: pathlib.Path):
    """The checked source of a fine-tuning run (`train_config.init_from`), or None: none given, or `model_dir`
    holds checkpoints of its own, which the run resumes (so the same command run again goes on).

    Raises:
        ConfigError: no such model directory or checkpoint, or configs it does not fit (`fine_tuning.check_fits`).
        CheckpointError: the source checkpoint cannot be read.
    """
    if train_config.init_from is None:
        return None
    if fine_tuning.has_checkpoints(model_dir):
        logger.info(
            "init_from=%s ignored: %s holds checkpoints of its own, so the run resumes them.",
            train_config.init_from, model_dir / CHECKPOINT_DIR,
        )  # fmt: skip
        return None
    source = fine_tuning.find_init_source(train_config.init_from)
    fine_tuning.check_fits(model_config, data_config, source)
    fine_tuning.check_readable(source)  # every tensor read once: a damaged checkpoint stops before any write
    return source


def _saved_report(path: pathlib.Path, train_corpus):
    """The data report of an earlier start of this run, when it still describes the corpus; else None.

    A restart has the same data config (checked before) and vocabulary, so its scan would give the same report:
    one tokenization pass over the training split saved on every restart (minutes for millions of pairs,
    benchmarks/NOTES.md entry 23). A corpus whose line count changed is scanned again.
    """
    if not path.is_file():
        return None
    try:
        report = data_lib.DataReport.from_json(path)
    except (OSError, ValueError, TypeError):  # unreadable or from another version: scan again
        return None
    if report.corpus != train_corpus.description or report.split != "train":
        return None
    if train_corpus.num_lines is not None and report.pairs_read != train_corpus.num_lines:
        return None
    return report


def _vocabulary(data_config, vocab_dir: pathlib.Path, train_corpus, is_chief: bool):
    """The run's vocabulary: loaded if complete, else built (by the chief; other workers wait for it).

    Raises:
        tf_transformer.data.errors.VocabularyInterrupted: SIGTERM or SIGINT (in the main thread) while building
            or waiting; the vocabulary is left incomplete (no tokenizer.json), so a restart builds it again.
    """
    import signal
    import threading

    from tf_transformer.data.errors import VocabularyInterrupted

    marker = vocab_dir / TOKENIZER_JSON  # written last: the vocabulary is complete
    if marker.is_file():
        return data_lib.Tokenizer.from_directory(vocab_dir)

    # Unlike training (StopSignals: finish the step, save, then stop), there is nothing here worth finishing:
    # the handler raises at once. SentencePiece trains in a child process that build_vocabulary kills on the
    # way out, so the stop is prompt even on a corpus that takes it minutes; every file is written atomically
    # and tokenizer.json last, so what an interrupted build leaves is never taken for a vocabulary.
    def interrupt(signal_number, frame):
        del frame
        raise VocabularyInterrupted(signal_number, vocab_dir)

    previous = {}
    if threading.current_thread() is threading.main_thread():  # Python's handlers live in the main thread only
        previous = {number: signal.signal(number, interrupt) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        if is_chief:
            logger.info("Building the vocabulary in %s.", vocab_dir)
            return data_lib.build_vocabulary(data_config, vocab_dir, corpus=train_corpus)
        wait_for_file(marker)
        return data_lib.Tokenizer.from_directory(vocab_dir)
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)


def _training_tokenizer(tokenizer, model_config):
    """The tokenizer of the training batches: one that samples segmentations when the model config asks for subword
    regularization (`subword_nbest_size`), else the vocabulary's one best cut. Validation always cuts the one best
    way. A resumed run skips as many batches as it trained on; with sampling those batches are cut anew, so it goes
    on at about, not exactly, the pair where it stopped."""
    if not model_config.samples_subwords:
        return tokenizer
    logger.info(
        "Subword regularization: training pairs cut into a segmentation sampled from the %s best (alpha %g).",
        model_config.subword_nbest_size if model_config.subword_nbest_size > 0 else "all", model_config.subword_alpha,
    )  # fmt: skip
    return tokenizer.sampling(model_config.subword_nbest_size, model_config.subword_alpha)


def _validation_dataset(data_config, tokenizer, valid_corpus, train_config, batch_multiple=1):
    if valid_corpus is None:
        return None
    report = data_lib.scan_lengths(data_config, tokenizer, "valid", corpus=valid_corpus)
    dataset = data_lib.make_dataset(
        data_config, tokenizer, "valid", training=False, corpus=valid_corpus, batch_multiple=batch_multiple
    )
    if batch_multiple > 1:
        # The last, partly filled batch of each bucket must split evenly across the replicas too; rows of
        # padding add no token to the masked loss and metrics.
        dataset = dataset.map(functools.partial(_pad_rows_to_multiple, multiple=batch_multiple))
    # A known length lets Keras run validation to the end without a "ran out of data" warning.
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(report.num_batches))
    if train_config.validation_batches:
        dataset = dataset.take(train_config.validation_batches)
    return dataset


def _pad_rows_to_multiple(inputs, target_out, multiple):
    """A batch `((source, target_in), target_out)` with all-padding rows added up to a multiple of `multiple`."""
    extra = -tf.shape(target_out)[0] % multiple

    def pad(tensor):
        return tf.pad(tensor, [[0, extra], [0, 0]])

    return tf.nest.map_structure(pad, inputs), pad(target_out)


def _validation_bleu(model, tokenizer, valid_corpus, train_config, model_dir) -> ValidationBleu:
    """The callback that scores translations of the first `bleu_sentences` validation pairs (see TrainConfig)."""
    pairs = list(itertools.islice(valid_corpus.pairs(), train_config.bleu_sentences))
    if not pairs:
        raise ConfigError(
            f"bleu_every: the validation split ({valid_corpus.description}) has no pairs to translate. Fix: give a "
            "validation split with sentences, or set --bleu_every=0."
        )
    beam_size = train_config.bleu_beam_size
    # One translator for the whole run: its traced decoder reads the variables, so it follows the training.
    settings = DecodingSettings(method="beam" if beam_size > 1 else "greedy", beam_size=beam_size)
    translator = TextTranslator(model, tokenizer, settings)
    return ValidationBleu(
        translator,
        [source for source, _ in pairs],
        [target for _, target in pairs],
        model.optimizer.iterations,
        train_config.bleu_every,
        model_dir / BLEU_LOG_DIR,
        best_dir=model_dir / BEST_DIR if train_config.keep_best else None,
        settings={"sentences": len(pairs), "beam_size": beam_size},
    )


def _fit(
    model,
    train_dataset,
    valid_dataset,
    manager,
    train_config,
    model_dir,
    bleu=None,
    stop_signals=None,
    deadline=None,
    resume_state=None,
    started=None,
    budget=None,
) -> dict:
    """`model.fit` in epochs of `checkpoint_every` steps, from the restored step to `train_steps`, or until
    `deadline` (a `time.monotonic()` reading; None: none) has passed.

    `bleu`, a `ValidationBleu` callback or None, runs after the checkpoint of each epoch is saved.
    `stop_signals`, a `StopSignals` or None: on a signal it recorded, the checkpoint callback saves after the
    step in progress and raises `TrainingInterrupted`, after which the TensorBoard writers are closed.
    `resume_state`, a `ResumeState` or None: its input position advances with every step, before the save.
    `started`, the `time.monotonic()` reading at the start of the run, for the log line of the first step.
    `budget`, a `FitToBudget` or None: fits the learning rate to the time limit and stops at the planned end.
    """
    step = model.optimizer.iterations
    writers = [
        keras.callbacks.TensorBoard(str(model_dir / LOG_DIR), update_freq=train_config.log_every),
        TrainingMonitor(str(model_dir / TRAIN_LOG_DIR), train_config.log_every, step),
    ]
    callbacks = [
        StopOnNonFiniteLoss(),  # first: nothing else runs after a NaN batch
        *([] if resume_state is None else [resume_state.counter()]),  # before the checkpoint saves
        StopAtStep(train_config.train_steps, step),
        *([] if started is None else [LogFirstStep(started, step)]),
        *([] if deadline is None else [StopAtTimeLimit(deadline, step)]),
        *([] if budget is None else [budget]),
        CheckpointEveryEpoch(manager, step, stop_signals, train_config.checkpoint_every),
        *writers,
    ]
    if bleu is not None:
        callbacks.append(bleu)
    try:
        history = _run_fit(model, train_dataset, valid_dataset, train_config, callbacks)
    except TrainingInterrupted:
        for callback in writers:  # fit ends without on_train_end: flush and close the TensorBoard files
            callback.on_train_end()
        raise
    return history.history


def _run_fit(model, train_dataset, valid_dataset, train_config, callbacks):
    step = model.optimizer.iterations
    every = train_config.checkpoint_every
    return model.fit(
        train_dataset,
        epochs=math.ceil(train_config.train_steps / every),
        initial_epoch=int(step.numpy()) // every,
        steps_per_epoch=every,
        validation_data=valid_dataset,
        callbacks=callbacks,
        shuffle=False,  # the pipeline shuffles
        verbose=1 if sys.stdout.isatty() else 2,
    )
