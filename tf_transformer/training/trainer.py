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

from tf_transformer import _keras_internals
from tf_transformer import data as data_lib
from tf_transformer.checkpoints import restore_newest_readable
from tf_transformer.config import MOVED_FIELDS, ConfigError, TransformerConfig
from tf_transformer.data.config import DataConfig
from tf_transformer.data.vocab import TOKENIZER_JSON
from tf_transformer.decoding.settings import COMMAND_DEFAULTS, DecodingSettings, require_settings, update_decoding_json
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
from tf_transformer.training.losses import MaskedCrossEntropy
from tf_transformer.training.optimizer import make_optimizer
from tf_transformer.training.precision import resolve_precision, restores_dtype_policy
from tf_transformer.training.resume_state import KEY as RESUME_STATE_KEY
from tf_transformer.training.resume_state import ResumeState
from tf_transformer.training.state import TrainingState
from tf_transformer.training.train_config import INITIALIZED_FROM, TrainConfig, saved_values
from tf_transformer.training.validation_bleu import ValidationBleu

logger = logging.getLogger("tf_transformer")

# Model-config fields a restart may change: those that shape no weight, and the vocabulary sizes, resolved from the
# built vocabulary. A config.json of release 0.1 also holds the settings that moved to their owners (MOVED_FIELDS),
# which a restart may change there (TrainConfig: all; DataConfig.SUBWORD_FIELDS; decoding.json).
RESUMABLE_CHANGES = (*TransformerConfig.CHANGEABLE_FIELDS, "vocab_size", "target_vocab_size", *MOVED_FIELDS)


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
        # TensorFlow exports only the enabling side of op determinism: reading and undoing it are internals.
        was_enabled = _keras_internals.op_determinism_enabled()
        try:
            return function(*args, **kwargs)
        finally:
            if not was_enabled:
                _keras_internals.disable_op_determinism()

    return wrapper


@dataclasses.dataclass(frozen=True)
class _Run:
    """What every phase of `train` reads: the data and training configs, and what the start settled."""

    data_config: object
    train_config: TrainConfig
    started: float  # time.monotonic() at the call's start: the time limit covers the whole call
    strategy: tf.distribute.Strategy
    multi_worker: bool
    is_chief: bool  # only the chief writes to model_dir
    precision: tuple  # (policy name, why), from resolve_precision

    @property
    def model_dir(self) -> pathlib.Path:
        return pathlib.Path(self.train_config.model_dir)

    @property
    def replicas(self) -> int:
        return self.strategy.num_replicas_in_sync


@dataclasses.dataclass(frozen=True)
class _Data:
    """The checked data and the vocabulary (`_prepare_data`)."""

    model_config: TransformerConfig  # the vocabulary size resolved from the tokenizer
    train_corpus: object
    valid_corpus: object  # None when the data has no validation split
    tokenizer: object
    report: object  # the training split's DataReport
    init_source: object  # the fine-tuning source (`_init_source`), or None


@dataclasses.dataclass(frozen=True)
class _Restored:
    """The built or restored state (`_build_or_restore`), with the run's records for train_config.json."""

    state: TrainingState
    initialized_from: Optional[dict]  # a fine-tuning run's record, kept across restarts
    plan: Optional[budget_lib.BudgetPlan]  # the time budget's plan; None without one


@restores_dtype_policy  # the model is built under the run's policy; the caller's global policy comes back
@_restores_op_determinism
def train(
    model_config: TransformerConfig,
    data_config,
    train_config: TrainConfig,
    decoding: DecodingSettings = COMMAND_DEFAULTS,
) -> TrainResult:
    """Trains (or resumes training) a `Transformer` as `train_config` says; the one entry of `tft-train`.

    Order matters for "nothing is lost and nothing looks valid by mistake": the data is read and checked,
    and the vocabulary built, before anything but the vocabulary is written to `model_dir`; the resolved
    configs are written before the first checkpoint; checkpoints are TensorFlow's (atomic index update)
    and never hold non-finite weights. With `multi_worker_mirrored` only the chief writes to `model_dir`.

    The phases, in order: `_start` (devices, strategy, precision, seeds), `_prepare_data` (data and vocabulary),
    `_build_or_restore` (model, optimizer, checkpoint, budget plan), `_write_run_files` (the configs and data
    report), `_run_loop` (`model.fit` or the multi-worker loop).

    Args:
        model_config: the model; its vocabulary size is replaced by the subword vocabulary's.
        data_config: a `tf_transformer.data.DataConfig`.
        train_config: the schedule, label smoothing, dropout rule, steps, checkpoints, devices, precision.
        decoding: the settings written into the model directory's decoding.json (`update_decoding_json`), the
            defaults of tft-translate, tft-evaluate and tft-export.

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
    require_settings(decoding)
    run = _start(data_config, train_config)
    data = _prepare_data(run, model_config)
    restored = _build_or_restore(run, data)
    if run.is_chief:
        _write_run_files(run, data, restored, decoding)
    state = restored.state
    if state.start_step >= train_config.train_steps:
        logger.info("Already trained %d of %d steps: nothing to do.", state.start_step, train_config.train_steps)
        return TrainResult(
            "already_complete", state.start_step, state.start_step, state.manager.latest_checkpoint, {},
            run.replicas, weights_digest(state.model),
        )  # fmt: skip
    history, best = _run_loop(run, data, restored)
    final_step = state.step
    logger.info("Stopped at step %d; latest checkpoint %s", final_step, state.manager.latest_checkpoint)
    # fit ends early without an error only at the time limit
    status = "completed" if final_step >= train_config.train_steps else "time_limit"
    plan = restored.plan
    planned_end = final_step if status == "time_limit" and plan is not None and final_step == plan.end_step else None
    return TrainResult(
        status, final_step, state.start_step, state.manager.latest_checkpoint, history, run.replicas,
        weights_digest(state.model), best, planned_end,
    )  # fmt: skip


def _start(data_config, train_config: TrainConfig) -> _Run:
    """Devices, strategy, precision, seeds and op determinism: what must precede every other op."""
    started = time.monotonic()  # the time limit covers the whole call: vocabulary, data reading and tracing too
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
    return _Run(data_config, train_config, started, strategy, multi_worker, is_chief, precision)


def _prepare_data(run: _Run, model_config: TransformerConfig) -> _Data:
    """Checks the settings, reads and checks the data, and builds (or loads) the vocabulary and the data report.

    Opening a corpus reads and checks its files: bad data fails here, before anything but the vocabulary is
    written.
    """
    data_config, model_dir = run.data_config, run.model_dir
    _check_settings(model_config, data_config, run.train_config, run.multi_worker)
    init_source = _init_source(model_config, data_config, run.train_config, model_dir)
    train_corpus = data_lib.open_corpus(data_config, "train", training=True)
    valid_corpus = _open_optional(data_config, "valid")
    phase_started = time.monotonic()
    vocabulary_existed = (model_dir / VOCAB_DIR / TOKENIZER_JSON).is_file()
    if init_source is not None and run.is_chief:  # the other workers wait for the copy as for a built vocabulary
        fine_tuning.copy_vocabulary(init_source, model_dir / VOCAB_DIR)
    tokenizer = _vocabulary(data_config, model_dir / VOCAB_DIR, train_corpus, run.is_chief)
    logger.info("Vocabulary of %d pieces ready in %.1f s.", tokenizer.vocab_size, time.monotonic() - phase_started)
    phase_started = time.monotonic()
    report = _saved_report(model_dir / DATA_REPORT_FILE, train_corpus) if vocabulary_existed else None
    if report is None:
        report = data_lib.scan_lengths(data_config, tokenizer, "train", corpus=train_corpus)
        logger.info("%s (scanned in %.1f s)", report.summary(), time.monotonic() - phase_started)
    else:
        logger.info("%s (the run's own %s: not scanned again)", report.summary(), DATA_REPORT_FILE)
    resolved = model_config.replace(vocab_size=tokenizer.vocab_size, target_vocab_size=None)
    return _Data(resolved, train_corpus, valid_corpus, tokenizer, report, init_source)


def _build_or_restore(run: _Run, data: _Data) -> _Restored:
    """The model and optimizer built in the strategy's scope, then restored from the newest readable checkpoint,
    or initialized from a fine-tuning source, or fresh; and the time budget's plan for this start."""
    config, train_config = data.model_config, run.train_config
    with run.strategy.scope():
        model = _build_model(config, train_config)
        # Time-limited runs fit their learning rate to the steps the limit holds (training/budget.py).
        optimizer = make_optimizer(
            config.d_model, train_config.warmup_steps, train_config.learning_rate_scale, budget=train_config.fits_budget
        )
        loss = MaskedCrossEntropy(train_config.label_smoothing, pad_id=config.pad_id)
        if not run.multi_worker:
            metrics = [MaskedAccuracy(config.pad_id), TokenCount(config.pad_id)]
            model.compile(optimizer=optimizer, loss=loss, metrics=metrics, jit_compile=train_config.jit_compile)
        model.build()
        optimizer.build(model.trainable_variables)  # so a restore finds the moments to fill
    # Before the manager reads the folder's index: a damaged latest checkpoint is set aside (by the chief) and
    # the index rewritten without it, so training resumes from the newest readable one.
    checkpoint_dir = run.model_dir / CHECKPOINT_DIR
    restored = restore_newest_readable(
        tf.train.Checkpoint(model=model, optimizer=optimizer), checkpoint_dir, set_aside=run.is_chief
    )
    # Read before it is written again: a restart keeps a fine-tuning run's record and continues its plan.
    previous_train_config = saved_values(run.model_dir / TRAIN_CONFIG_FILE)
    initialized_from = previous_train_config.get(INITIALIZED_FROM)  # a resumed fine-tuning run keeps its record
    if restored is None and data.init_source is not None:
        initialized_from = _initialize_from(model, data, train_config)
    start_step = int(optimizer.iterations.numpy())
    # The input position and dropout states: a resumed run trains on the batches the uninterrupted one would.
    resume_state = ResumeState(model, batches_per_step=run.replicas if run.multi_worker else 1)
    resume_state.restore(restored, start_step)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, **{RESUME_STATE_KEY: resume_state.trackable})
    manager = tf.train.CheckpointManager(checkpoint, str(checkpoint_dir), max_to_keep=train_config.keep_checkpoints)
    plan = None
    if train_config.fits_budget:  # a restart continues or follows the last plan
        plan = budget_lib.plan_for_start(
            budget_lib.plan_in(previous_train_config), start_step, train_config.time_limit_minutes,
            train_config.budget_decay_fraction, rewarm_steps=max(train_config.warmup_steps // 4, 1),
            train_steps=train_config.train_steps,
        )  # fmt: skip
    state = TrainingState(model, optimizer, loss, checkpoint, manager, resume_state, start_step)
    return _Restored(state, initialized_from, plan)


def _initialize_from(model, data: _Data, train_config: TrainConfig) -> dict:
    """Loads a fine-tuning source's weights into `model`; returns the run's record of it (train_config.json's).

    The weights only: Adam's moments, the step (0), the input position and dropout states start afresh.
    """
    source, config = data.init_source, data.model_config
    fine_tuning.initialize_weights(model, source)
    logger.info(
        "Fine-tuning from %s (step %s of %s): its weights and vocabulary, a fresh optimizer from step 0, "
        "warmup_steps=%d, learning_rate_scale=%g (peak learning rate %.3g).",
        source.checkpoint, source.step, source.model_dir, train_config.warmup_steps, train_config.learning_rate_scale,
        fine_tuning.peak_learning_rate(config.d_model, train_config.warmup_steps, train_config.learning_rate_scale),
    )  # fmt: skip
    return source.record()


def _write_run_files(run: _Run, data: _Data, restored: _Restored, decoding: DecodingSettings) -> None:
    """The chief's record of the run in model_dir, before the first checkpoint: decoding.json, the resolved configs
    (the budget's plan and the decoding settings given in train_config.json) and the data report."""
    model_dir = run.model_dir
    update_decoding_json(model_dir, decoding)  # before train_config.json, whose record it compares with
    data.model_config.to_json(model_dir / CONFIG_FILE)
    run.data_config.to_json(model_dir / DATA_CONFIG_FILE)
    run.train_config.to_json(
        model_dir / TRAIN_CONFIG_FILE, precision=run.precision, initialized_from=restored.initialized_from,
        budget=None if restored.plan is None else restored.plan.to_dict(), decoding=decoding.json_settings(),
    )  # fmt: skip
    data.report.to_json(model_dir / DATA_REPORT_FILE)


def _run_loop(run: _Run, data: _Data, restored: _Restored):
    """Trains from the restored step: `model.fit`, or the multi-worker loop. Returns `(history, best)`: the loss
    history and the best validation BLEU evaluation (None when the run keeps none)."""
    state, train_config = restored.state, run.train_config
    # None when off; multi-worker runs with bleu_every were refused by _check_settings.
    bleu = _validation_bleu(state.model, data, run) if train_config.bleu_every else None
    try:
        with StopSignals() as stop_signals:
            # SIGTERM / SIGINT from here on: finish the step, save a checkpoint there, raise TrainingInterrupted.
            logger.info(
                "Training from step %d to %d on %d replica(s).", state.start_step, train_config.train_steps,
                run.replicas,
            )  # fmt: skip
            skip = int(state.resume_state.position.numpy())
            if skip:
                logger.info("Resuming the input where it stopped: skipping the %d batches already trained on.", skip)
            if run.multi_worker:
                history = _fit_multi_worker(run, data, state, stop_signals, skip)
            else:
                loop = _fit_loop(run, data, restored, bleu, stop_signals, skip)
                history = _fit(state, loop, train_config, run.model_dir)
    except TrainingDiverged:  # a non-finite loss (StopOnNonFiniteLoss) or weights (the check before a save)
        raise TrainingDiverged(
            f"the training loss or weights became NaN or infinite near step {state.step}; the last good "
            f"checkpoint ({state.manager.latest_checkpoint or 'none yet'}) is kept. Fix: resume with a "
            "lower learning_rate_scale or more warmup_steps (--override), or prefer mixed_bfloat16 to mixed_float16."
        ) from None
    return history, bleu.best if bleu is not None else None


def _fit_multi_worker(run: _Run, data: _Data, state: TrainingState, stop_signals, skip: int) -> dict:
    """`fit_multi_worker` on each worker's shard of the one seeded order of batches, after the `skip` trained on."""

    def dataset_fn(input_context):
        # Every worker builds the same seeded order and keeps its own share of the batches.
        # Skipped before sharding: the position counts batches of the one seeded order.
        dataset = data_lib.make_dataset(
            run.data_config, data.tokenizer, "train", training=True, corpus=data.train_corpus, skip_batches=skip
        )
        return dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)

    log_dir = str(run.model_dir / TRAIN_LOG_DIR)
    return fit_multi_worker(state, run.strategy, dataset_fn, run.train_config, log_dir, stop_signals)


@dataclasses.dataclass(frozen=True)
class _FitLoop:
    """What `_fit` runs on besides the state (`_fit_loop`)."""

    train_dataset: tf.data.Dataset
    valid_dataset: Optional[tf.data.Dataset]
    bleu: Optional[ValidationBleu]  # runs after the checkpoint of each epoch is saved
    stop_signals: Optional[StopSignals]  # on a signal, save after the step in progress and stop
    deadline: Optional[float]  # a time.monotonic() reading; None: no time limit
    started: Optional[float]  # the run's start, for the log line of the first step
    budget: Optional[budget_lib.FitToBudget]  # fits the learning rate to the time limit


def _fit_loop(run: _Run, data: _Data, restored: _Restored, bleu, stop_signals, skip: int) -> _FitLoop:
    """The datasets and the time limit's callbacks of a `model.fit` run."""
    data_config, train_config, state = run.data_config, run.train_config, restored.state
    batch_multiple = math.lcm(data_config.batch_multiple, run.replicas)
    train_dataset = data_lib.make_dataset(
        data_config, _training_tokenizer(data.tokenizer, data_config), "train", training=True,
        corpus=data.train_corpus, batch_multiple=batch_multiple, skip_batches=skip,
    )  # fmt: skip
    valid_dataset = _validation_dataset(data_config, data.tokenizer, data.valid_corpus, train_config, batch_multiple)
    deadline = None if train_config.time_limit_minutes is None else run.started + 60 * train_config.time_limit_minutes
    budget = None
    if restored.plan is not None:
        budget = budget_lib.callback_for_run(
            restored.plan, state.optimizer, data.model_config, train_config, data.report.num_batches, deadline
        )
    return _FitLoop(train_dataset, valid_dataset, bleu, stop_signals, deadline, run.started, budget)


def _build_model(config: TransformerConfig, train_config: TrainConfig) -> Transformer:
    """The run's model. When a budget may choose its dropout (`dropout_by_epochs`, `initial_dropout`) and the config's
    is 0, the dropout layers are built at the highest rate the budget may set, then set to 0: Keras gives a Dropout
    layer its random state only when it is created with a positive rate (with or without a budget, so that the
    checkpoints of one config hold the same random states)."""
    highest = max((rate for _, rate in train_config.dropout_rule()), default=0.0)
    if train_config.has_initial_dropout:
        highest = max(highest, train_config.initial_dropout)
    if config.dropout > 0 or highest == 0:
        return Transformer(config)
    model = Transformer(config.replace(dropout=highest))
    model.set_dropout(config.dropout)
    return model


def _check_settings(model_config, data_config, train_config, multi_worker) -> None:
    model_dir = pathlib.Path(train_config.model_dir)
    _check_same_run(model_dir, DATA_CONFIG_FILE, data_config, ignore=DataConfig.SUBWORD_FIELDS)
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
    if data_config.samples_subwords and (multi_worker or data_config.deterministic or train_config.deterministic):
        why = (
            "every worker of multi-worker training must make the same batches"
            if multi_worker
            else "deterministic batches must be the same on every run"
        )
        raise ConfigError(
            f"subword_nbest_size: the data config samples subword segmentations ({data_config.subword_nbest_size}), "
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


def _training_tokenizer(tokenizer, data_config):
    """The tokenizer of the training batches: one that samples segmentations when the data config asks for subword
    regularization (`subword_nbest_size`), else the vocabulary's one best cut. Validation always cuts the one best
    way. A resumed run skips as many batches as it trained on; with sampling those batches are cut anew, so it goes
    on at about, not exactly, the pair where it stopped."""
    if not data_config.samples_subwords:
        return tokenizer
    logger.info(
        "Subword regularization: training pairs cut into a segmentation sampled from the %s best (alpha %g).",
        data_config.subword_nbest_size if data_config.subword_nbest_size > 0 else "all", data_config.subword_alpha,
    )  # fmt: skip
    return tokenizer.sampling(data_config.subword_nbest_size, data_config.subword_alpha)


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


def _validation_bleu(model, data: _Data, run: _Run) -> ValidationBleu:
    """The callback that scores translations of the first `bleu_sentences` validation pairs (see TrainConfig), on
    lowercased text when the vocabulary lowercases (DataConfig.lowercase)."""
    train_config, model_dir = run.train_config, run.model_dir
    pairs = list(itertools.islice(data.valid_corpus.pairs(), train_config.bleu_sentences))
    if not pairs:
        raise ConfigError(
            f"bleu_every: the validation split ({data.valid_corpus.description}) has no pairs to translate. Fix: give "
            "a validation split with sentences, or set --bleu_every=0."
        )
    beam_size = train_config.bleu_beam_size
    # One translator for the whole run: its traced decoder reads the variables, so it follows the training.
    settings = DecodingSettings(method="beam" if beam_size > 1 else "greedy", beam_size=beam_size)
    translator = TextTranslator(model, data.tokenizer, settings)
    return ValidationBleu(
        translator,
        [source for source, _ in pairs],
        [target for _, target in pairs],
        model.optimizer.iterations,
        train_config.bleu_every,
        model_dir / BLEU_LOG_DIR,
        best_dir=model_dir / BEST_DIR if train_config.keep_best else None,
        settings={"sentences": len(pairs), "beam_size": beam_size},
        lowercase=run.data_config.lowercase,
    )


def _fit(state: TrainingState, loop: _FitLoop, train_config: TrainConfig, model_dir: pathlib.Path) -> dict:
    """`model.fit` in epochs of `checkpoint_every` steps, from the restored step to `train_steps`, or until
    `loop.deadline` has passed; returns the Keras history.

    On a signal `loop.stop_signals` recorded, the checkpoint callback saves after the step in progress and raises
    `TrainingInterrupted`, after which the TensorBoard writers are closed. The resume state's input position
    advances with every step, before the save.
    """
    model = state.model
    step = model.optimizer.iterations
    writers = [
        keras.callbacks.TensorBoard(str(model_dir / LOG_DIR), update_freq=train_config.log_every),
        TrainingMonitor(str(model_dir / TRAIN_LOG_DIR), train_config.log_every, step),
    ]
    callbacks = [
        StopOnNonFiniteLoss(),  # first: nothing else runs after a NaN batch
        *([] if state.resume_state is None else [state.resume_state.counter()]),  # before the checkpoint saves
        StopAtStep(train_config.train_steps, step),
        *([] if loop.started is None else [LogFirstStep(loop.started, step)]),
        *([] if loop.deadline is None else [StopAtTimeLimit(loop.deadline, step)]),
        *([] if loop.budget is None else [loop.budget]),
        CheckpointEveryEpoch(state.manager, step, loop.stop_signals, train_config.checkpoint_every),
        *writers,
    ]
    if loop.bleu is not None:
        callbacks.append(loop.bleu)
    try:
        history = _run_fit(model, loop.train_dataset, loop.valid_dataset, train_config, callbacks)
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
