"""The two values `train` hands from phase to phase: `Run`, the settings and devices a run started with, and
`TrainingState`, the model and what trains and saves it."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Optional

import tensorflow as tf

from tf_transformer.training.resume_state import ResumeState


@dataclasses.dataclass(frozen=True)
class Run:
    """What `train` settled at its start (`trainer._start`), read by every later phase.

    Attributes:
        data_config: the run's `DataConfig`.
        train_config: the run's `TrainConfig`.
        strategy: the `tf.distribute.Strategy` the model is built and trained in.
        precision: `(policy, why)` from `resolve_precision`; the policy is set globally for the run.
        is_chief: whether this process writes to `model_dir` (with `multi_worker_mirrored`, the chief alone does).
        started: `time.monotonic()` at the call's start: the time limit covers the whole call.
    """

    data_config: Any
    train_config: Any
    strategy: tf.distribute.Strategy
    precision: tuple
    is_chief: bool
    started: float

    @property
    def model_dir(self) -> pathlib.Path:
        return pathlib.Path(self.train_config.model_dir)

    @property
    def multi_worker(self) -> bool:
        return isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy)

    @property
    def replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    @property
    def deadline(self) -> Optional[float]:
        """The `time.monotonic()` reading at which `time_limit_minutes` runs out; None without a limit."""
        minutes = self.train_config.time_limit_minutes
        return None if minutes is None else self.started + 60 * minutes


@dataclasses.dataclass(frozen=True)
class TrainingState:
    """A built (and possibly restored) run, ready for a training loop (`fit_loop.run_loop`, `fit_multi_worker`).

    Attributes:
        model: the `Transformer`, built in the strategy's scope.
        optimizer: its Keras optimizer, built (its moments exist, so a restore fills them).
        loss: the training loss (a `MaskedCrossEntropy`).
        checkpoint: the `tf.train.Checkpoint` of the model, the optimizer and the resume state.
        manager: the `tf.train.CheckpointManager` of the model directory's checkpoints.
        resume_state: the input position and dropout states a resumed run continues from; None: none kept.
        start_step: the optimizer's step when the run started (0, or the restored checkpoint's).
        plan: the time budget's `BudgetPlan` for this start (training/budget.py); None without one.
        initialized_from: a fine-tuning run's record of its source (`InitSource.record`), kept across restarts;
            None for a run that did not start from another's weights.
    """

    model: Any
    optimizer: Any
    loss: Any
    checkpoint: Any
    manager: Any
    resume_state: Optional[ResumeState]
    start_step: int
    plan: Any = None
    initialized_from: Optional[dict] = None

    @property
    def step(self) -> int:
        """The optimizer's step now."""
        return int(self.optimizer.iterations.numpy())
