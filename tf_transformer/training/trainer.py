"""The training run behind `tft-train`: `train` and its phases, in the order they run.

`_start` (devices, strategy, precision, seeds), `_check_settings`, `_init_source` (a fine-tuning source),
`run_data.prepare_data` (data and vocabulary), `_with_vocabulary` (the model config's vocabulary size),
`_build_or_restore` (model, optimizer, checkpoint, budget plan), `run_files.write_run_files` (the configs and data
report), `fit_loop.run_loop` (`model.fit` or the multi-worker loop). They hand on two values (training/state.py):
the `Run` (the settings and devices it started with) and the `TrainingState` (the model and what trains and saves
it), besides the model config and the `RunData`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import pathlib
import time
from typing import Optional

import keras
import tensorflow as tf

from tf_transformer import data as data_lib
from tf_transformer.checkpoints import restore_newest_readable
from tf_transformer.config import MOVED_FIELDS, ConfigError, TransformerConfig
from tf_transformer.data.config import DataConfig
from tf_transformer.decoding.settings import COMMAND_DEFAULTS, DecodingSettings, require_settings
from tf_transformer.errors import require_tensorflow_backend
from tf_transformer.model_dir import CHECKPOINT_DIR, CONFIG_FILE, DATA_CONFIG_FILE, TRAIN_CONFIG_FILE
from tf_transformer.models import Transformer
from tf_transformer.training import budget as budget_lib
from tf_transformer.training import fine_tuning
from tf_transformer.training.fit_loop import run_loop
from tf_transformer.training.losses import MaskedCrossEntropy
from tf_transformer.training.metrics import MaskedAccuracy, TokenCount
from tf_transformer.training.multi_worker import cluster_role
from tf_transformer.training.optimizer import make_optimizer
from tf_transformer.training.precision import resolve_precision, restores_dtype_policy, restores_op_determinism
from tf_transformer.training.resume_state import KEY as RESUME_STATE_KEY
from tf_transformer.training.resume_state import ResumeState
from tf_transformer.training.run_data import prepare_data
from tf_transformer.training.run_files import check_same_run, write_run_files
from tf_transformer.training.state import Run, TrainingState
from tf_transformer.training.threads import configure_intra_op_threads
from tf_transformer.training.train_config import INITIALIZED_FROM, TrainConfig, saved_values

logger = logging.getLogger("tf_transformer")

# config.json fields a restart may change: those that shape no weight, the vocabulary sizes (resolved from the
# built vocabulary), and the fields a release-0.1 config.json kept there before they moved to their owners.
RESUMABLE_CHANGES = (*TransformerConfig.CHANGEABLE_FIELDS, "vocab_size", "target_vocab_size", *MOVED_FIELDS)


@restores_dtype_policy  # the model is built under the run's policy; the caller's global policy comes back
@restores_op_determinism
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

    Args:
        model_config: the model; its vocabulary size is replaced by the subword vocabulary's.
        data_config: a `tf_transformer.data.DataConfig`.
        train_config: the schedule, label smoothing, dropout rule, steps, checkpoints, devices, precision.
        decoding: the settings written into the model directory's decoding.json, the defaults of tft-translate,
            tft-evaluate and tft-export.

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

    Example:
        >>> train_config = TrainConfig(model_dir="runs/tiny", train_steps=100)
        >>> result = train(TransformerConfig.from_preset("tiny"), data_config, train_config)  # doctest: +SKIP
        >>> result.status  # doctest: +SKIP
        'completed'
    """
    require_tensorflow_backend(
        "tf_transformer.training.train (tf.data input, tf.distribute)",
        fix="train with model.fit under this backend (README, 'From Python'), or run tft-train, which runs on TensorFlow",
    )
    require_settings(decoding)
    run = _start(data_config, train_config)
    _check_settings(model_config, data_config, train_config, run.multi_worker)
    init_source = _init_source(model_config, data_config, train_config, run.model_dir)
    data = prepare_data(data_config, run.model_dir, run.is_chief, init_source)
    model_config = _with_vocabulary(model_config, data.tokenizer)
    state = _build_or_restore(run, model_config, init_source)
    if run.is_chief:
        write_run_files(run, model_config, data.report, state, decoding)
    if state.start_step >= train_config.train_steps:
        logger.info("Already trained %d of %d steps: nothing to do.", state.start_step, train_config.train_steps)
        return TrainResult(
            "already_complete", state.start_step, state.start_step, state.manager.latest_checkpoint, {},
            run.replicas, weights_digest(state.model),
        )  # fmt: skip
    history, best = run_loop(run, model_config, data, state)
    final_step = state.step
    logger.info("Stopped at step %d; latest checkpoint %s", final_step, state.manager.latest_checkpoint)
    # fit ends early without an error only at the time limit
    status = "completed" if final_step >= train_config.train_steps else "time_limit"
    plan = state.plan
    planned_end = final_step if status == "time_limit" and plan is not None and final_step == plan.end_step else None
    return TrainResult(
        status, final_step, state.start_step, state.manager.latest_checkpoint, history, run.replicas,
        weights_digest(state.model), best, planned_end,
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


def _start(data_config, train_config: TrainConfig) -> Run:
    """Devices, strategy, precision, seeds and op determinism: what must precede every other op."""
    started = time.monotonic()  # the time limit covers the whole call: vocabulary, data reading and tracing too
    threads = configure_intra_op_threads(
        train_config.mixed_precision, train_config.num_cpu_devices, train_config.strategy
    )
    logger.info("Threads: %s.", threads)
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
    return Run(data_config, train_config, strategy, precision, is_chief, started)


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
    if name == "one_device" and gpus:
        return tf.distribute.OneDeviceStrategy(gpus[0].name)  # its input iterator prefetches to the GPU
    if name == "one_device":
        # TensorFlow's default strategy: on the CPU OneDeviceStrategy only adds tf.distribute's multi-device input
        # iterator, whose per-device iterators run tf.data's autotuning thread, and freeing one can then hang for
        # up to a minute (data/dataset_options.py; benchmarks/NOTES.md entry 40).
        return tf.distribute.get_strategy()
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


def _check_settings(model_config, data_config, train_config, multi_worker) -> None:
    """Refuses (ConfigError) settings that do not fit together, or not the run that model_dir holds, before any
    data is read."""
    model_dir = pathlib.Path(train_config.model_dir)
    check_same_run(model_dir, DATA_CONFIG_FILE, data_config, ignore=DataConfig.SUBWORD_FIELDS)
    check_same_run(model_dir, CONFIG_FILE, model_config, ignore=RESUMABLE_CHANGES)
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


def _with_vocabulary(model_config: TransformerConfig, tokenizer) -> TransformerConfig:
    """The model config with the vocabulary's size, one joint vocabulary (no `target_vocab_size`). A config that has
    them already is returned as it is: a config is checked once, when it is made (the commands make it from their
    flags)."""
    if model_config.vocab_size == tokenizer.vocab_size and model_config.target_vocab_size is None:
        return model_config
    return model_config.replace(vocab_size=tokenizer.vocab_size, target_vocab_size=None)


def _build_or_restore(run: Run, config: TransformerConfig, init_source) -> TrainingState:
    """The model and optimizer built in the strategy's scope, then restored from the newest readable checkpoint,
    or initialized from the fine-tuning `init_source`, or fresh; with the time budget's plan for this start."""
    train_config = run.train_config
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
    if restored is None and init_source is not None:
        initialized_from = _initialize_from(model, config, init_source, train_config)
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
    return TrainingState(model, optimizer, loss, checkpoint, manager, resume_state, start_step, plan, initialized_from)


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


def _initialize_from(model, config: TransformerConfig, source, train_config: TrainConfig) -> dict:
    """Loads a fine-tuning source's weights into `model`; returns the run's record of it (train_config.json's).

    The weights only: Adam's moments, the step (0), the input position and dropout states start afresh.
    """
    fine_tuning.initialize_weights(model, source)
    logger.info(
        "Fine-tuning from %s (step %s of %s): its weights and vocabulary, a fresh optimizer from step 0, "
        "warmup_steps=%d, learning_rate_scale=%g (peak learning rate %.3g).",
        source.checkpoint, source.step, source.model_dir, train_config.warmup_steps, train_config.learning_rate_scale,
        fine_tuning.peak_learning_rate(config.d_model, train_config.warmup_steps, train_config.learning_rate_scale),
    )  # fmt: skip
    return source.record()


def weights_digest(model: keras.Model) -> str:
    """A short hash of all trainable weights: equal on every worker of a synchronous run."""
    digest = hashlib.sha256()
    for variable in model.trainable_variables:
        digest.update(variable.numpy().tobytes())
    return digest.hexdigest()[:16]
