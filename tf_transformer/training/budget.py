"""Training that knows its budget: a run bounded by `time_limit_minutes` predicts the steps the limit holds and
ends its learning rate at zero there.

How (`FitToBudget`, a Keras callback, and `BudgetSchedule` in schedule.py):

1. Calibration: the first `calibration_steps` steps after the first one (which includes tracing) are timed
   (fewer when they take more than 5% of the limit).
2. Prediction: the steps left = (the time left - a reserve for the last validation and checkpoint) / the
   seconds a step: the steps' own time since the last prediction, plus the latest epoch-end pause (validation and
   checkpoint, timed apart) spread over the steps of an epoch, so that a short window holding one pause does not
   read as slow steps (which would plan a fraction of the steps the limit holds; docs/multi30k.md). The
   planned end is `min(train_steps, now + steps left)`; the decay starts `decay_fraction` of the run's steps
   before it. The prediction is made again every `repredict_every` steps until the decay starts (the machine's
   speed drifts), then frozen: a decay that moved while running would not reach zero smoothly.
3. The run stops at the planned end. Once fixed, the end only moves earlier: when the recent steps (the median
   of the last 5 windows of 20 steps, so that the window of a validation pass is not taken for a slower machine)
   were slower than predicted and the end would come after the deadline, it moves to the last step the time left
   holds (the decay then steepens; `StopAtTimeLimit` still stops the run if the clock runs out first).

4. Dropout (optional, the training config's `dropout_by_epochs`): at the first prediction of a segment (at the
   start for a plan that ends at `train_steps`) the planned end in epochs (times the model's size over the size the
   rule was measured on, `dropout_rule_parameters`) chooses the dropout, which then stays for the
   whole segment: the model's dropout layers are set and the training function traced again (once, a few
   seconds, kept out of the step timing). Before that choice the first steps train at the model config's
   `dropout`. With the training config's `initial_dropout_fraction` > 0, the segment's first steps (that share of
   its planned steps, fixed at the same first prediction) train at `initial_dropout` instead, from its first step,
   and the chosen dropout starts at `dropout_from_step` (one more trace there): late dropout (0 first), or early
   dropout.

The plan is a `BudgetPlan`, written into `train_config.json` (key "budget") and logged at every change.

Restarts, "run the same command again to go on":

- A run stopped before its planned end (a signal, a crash) continues the same plan: the same decay start and
  end and dropout, no new prediction, so it trains the steps, learning rates and dropout of the uninterrupted
  run (its own time limit can still stop it first).
- A run that reached its planned end and is started again (with steps left before `train_steps`) starts a new
  segment: a linear re-warmup over `rewarm_steps` from about zero back to the schedule's curve, then a new
  prediction for the new time limit and a new decay to zero (the continuation of warmup-stable-decay runs), and
  a dropout chosen anew for the epochs of the new end (the steps before that choice train at the config's).
- A run without a time limit keeps the schedule as it is, unless `budget_schedule` is "on": then the plan ends
  at `train_steps` (nothing is predicted), and a restart with a larger `train_steps` moves the end (and the
  decay) of the segment in progress, or, after a completed one, starts a new segment with a re-warmup.
- `budget_schedule` "off" keeps the schedule as it is (the time limit cuts it off).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import math
import pathlib
import statistics
import time
from typing import Callable, Optional

import keras

from tf_transformer.model_dir import TRAIN_CONFIG_FILE
from tf_transformer.training.run_files import write_plan
from tf_transformer.training.train_config import PLAN_KEY, saved_values

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class BudgetPlan:
    """What a time-limited run predicted and chose (see the module docstring).

    Attributes:
        time_limit_minutes: the limit of the run that made the plan; None for a plan that ends at `train_steps`
            (`budget_schedule="on"` without a time limit).
        segment_start: the step the plan's segment started at (0, or where an earlier plan ended).
        rewarm_steps: steps of linear re-warmup from `segment_start` (0 for a first segment).
        decay_fraction: the share of the segment's steps the learning rate decays over.
        seconds_per_step: the measured wall-clock seconds a step (validation and checkpoints included); None
            while calibrating.
        predicted_at_step: the step of the latest prediction.
        end_step: the planned last step; None while calibrating.
        decay_start: the step the linear decay starts at; None while calibrating.
        frozen: True once the decay has started, or when a restart continues the plan: no more predictions.
        epochs: the planned end in epochs when the dropout was chosen; None: not chosen (yet).
        dropout: the dropout chosen for those epochs (the training config's `dropout_by_epochs`); None: the model
            config's `dropout`.
        dropout_from_step: the steps after this one train at `dropout`, the segment's steps up to it at the
            training config's `initial_dropout`; None: `dropout` from the segment's start.
    """

    time_limit_minutes: Optional[float]
    segment_start: int = 0
    rewarm_steps: int = 0
    decay_fraction: float = 0.2
    seconds_per_step: Optional[float] = None
    predicted_at_step: Optional[int] = None
    end_step: Optional[int] = None
    decay_start: Optional[int] = None
    frozen: bool = False
    epochs: Optional[float] = None
    dropout: Optional[float] = None
    dropout_from_step: Optional[int] = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values) -> Optional["BudgetPlan"]:
        """The plan `to_dict` wrote, or None for anything else (an older or hand-edited file)."""
        if not isinstance(values, dict):
            return None
        try:
            return cls(**values)
        except TypeError:
            return None

    def schedule_settings(self) -> dict:
        """The keyword arguments of `BudgetSchedule.set_plan` for this plan."""
        settings = dict(rewarm_start=self.segment_start, rewarm_steps=self.rewarm_steps)
        if self.end_step is not None:
            settings.update(decay_start=self.decay_start, decay_end=self.end_step)
        return settings

    def describe(self) -> str:
        if self.end_step is None:
            return f"calibrating from step {self.segment_start} (time limit {self.time_limit_minutes:g} min)"
        rewarm = f", after a re-warmup of {self.rewarm_steps} steps" if self.rewarm_steps else ""
        if self.dropout is not None:
            rewarm += f"; dropout {self.dropout:g}, chosen for {self.epochs:.1f} epochs"
            if self.dropout_from_step is not None:
                rewarm += f", after step {self.dropout_from_step}"
        if self.time_limit_minutes is None:
            return (
                f"steps {self.segment_start}-{self.end_step} (train_steps); the learning rate decays linearly to "
                f"zero from step {self.decay_start} to {self.end_step}{rewarm}"
            )
        return (
            f"{self.seconds_per_step:.3f} s a step measured by step {self.predicted_at_step}: the time limit of "
            f"{self.time_limit_minutes:g} min holds steps {self.segment_start}-{self.end_step}; the learning rate "
            f"decays linearly to zero from step {self.decay_start} to {self.end_step}{rewarm}"
        )


def read_plan(train_config_path: pathlib.Path) -> Optional[BudgetPlan]:
    """The plan saved in an earlier start's train_config.json, if any."""
    return plan_in(saved_values(train_config_path))


def plan_in(train_config_values: dict) -> Optional[BudgetPlan]:
    """The plan in the values of a train_config.json (`train_config.saved_values`; None when it has none)."""
    return BudgetPlan.from_dict(train_config_values.get(PLAN_KEY))


def plan_for_start(
    previous: Optional[BudgetPlan],
    start_step: int,
    time_limit_minutes: Optional[float],
    decay_fraction: float,
    rewarm_steps: int,
    train_steps: int,
) -> BudgetPlan:
    """The plan of a run that starts (or restarts) at `start_step` (see the module docstring's restarts); without a
    time limit, a plan that ends at `train_steps`."""
    unfinished = previous is not None and previous.end_step is not None and start_step < previous.end_step
    if time_limit_minutes is None:  # a known budget: nothing to predict
        plan = previous if unfinished else _new_segment(previous, start_step, None, decay_fraction, rewarm_steps)
        end_step = train_steps  # a restart may move it (--train_steps), the segment stays
        decay_steps = max(math.ceil(plan.decay_fraction * (end_step - plan.segment_start)), 1)
        return dataclasses.replace(
            plan, time_limit_minutes=None, seconds_per_step=None, predicted_at_step=None, end_step=end_step,
            decay_start=max(end_step - decay_steps, plan.segment_start), frozen=True,
        )  # fmt: skip
    if unfinished:
        return dataclasses.replace(previous, frozen=True)  # the same run, interrupted: the same schedule
    if previous is not None and previous.end_step is None:
        # Interrupted while calibrating: the same segment, predicted anew.
        return dataclasses.replace(previous, time_limit_minutes=time_limit_minutes, decay_fraction=decay_fraction)
    return _new_segment(previous, start_step, time_limit_minutes, decay_fraction, rewarm_steps)


def _new_segment(previous, start_step, time_limit_minutes, decay_fraction, rewarm_steps) -> BudgetPlan:
    # A first segment has the schedule's own warmup; a later one starts where the last decayed to zero.
    return BudgetPlan(
        time_limit_minutes=time_limit_minutes,
        segment_start=start_step,
        rewarm_steps=rewarm_steps if start_step > 0 and previous is not None else 0,
        decay_fraction=decay_fraction,
    )  # its dropout is chosen anew (FitToBudget)


@dataclasses.dataclass(frozen=True)
class BudgetTiming:
    """When `FitToBudget` times the steps, predicts and stops (see the module docstring).

    Attributes:
        deadline: the `clock()` reading when the time limit runs out (None: no limit, a plan to `train_steps`).
        time_limit_seconds: the whole limit, for the reserve.
        train_steps: the most steps in total.
        calibration_steps: steps timed before the first prediction.
        repredict_every: steps between predictions until the decay starts; each times the steps since the last
            (`callback_for_run` uses `checkpoint_every`, so that each window holds one validation and one checkpoint).
        reserve_fraction: share of the time limit kept for what follows the last step (the last validation
            and checkpoint) and for noise in the step times.
        window_fraction: a prediction is also due when its timing window has lasted this share of the limit in
            steps (with at least 5 steps timed), whatever the step counts above say.
        pause_every: steps between the pauses at the end of each epoch (validation and checkpoint: the trainer's
            `checkpoint_every`). Each pause is timed apart from the steps and counted as its share of each step,
            so that a window shorter than an epoch that holds one does not read as slow steps; None: no epochs.
        steps_per_epoch: batches in an epoch of the training data, for choosing the dropout (None: not chosen).
    """

    deadline: Optional[float]
    time_limit_seconds: float
    train_steps: int
    calibration_steps: int = 100
    repredict_every: int = 250
    reserve_fraction: float = 0.02
    window_fraction: float = 0.05
    pause_every: Optional[int] = None
    steps_per_epoch: Optional[float] = None


def callback_for_run(plan: BudgetPlan, optimizer, model_config, train_config, steps_per_epoch, deadline):
    """The `FitToBudget` of a `tft-train` run: its plan saved into train_config.json and logged at every change.

    Args:
        plan: the run's plan (`plan_for_start`).
        optimizer: the run's optimizer (`make_optimizer(..., budget=True)`: its `budget_schedule` and step).
        model_config: the run's `TransformerConfig` (its dropout and size, which the dropout rule reads).
        train_config: the run's `TrainConfig` (model_dir, time limit, steps, checkpoint period; its
            `dropout_by_epochs` rule, if any, chooses the dropout).
        steps_per_epoch: batches in an epoch of the training data (the data report's `num_batches`).
        deadline: the `time.monotonic()` reading when the time limit runs out; None without one.

    Example:
        `callbacks.append(callback_for_run(plan, optimizer, config, train_config, report.num_batches, deadline))`
    """
    timing = BudgetTiming(
        deadline=deadline,
        time_limit_seconds=60 * (train_config.time_limit_minutes or 0),
        train_steps=train_config.train_steps,
        repredict_every=min(max(train_config.checkpoint_every, 100), 1000),
        pause_every=train_config.checkpoint_every,
        steps_per_epoch=steps_per_epoch,
    )
    path = pathlib.Path(train_config.model_dir) / TRAIN_CONFIG_FILE
    initial_dropout = None
    if train_config.has_initial_dropout:
        initial_dropout = (train_config.initial_dropout, train_config.initial_dropout_fraction)
    choose_dropout = None
    has_rule = bool(train_config.dropout_rule())
    if has_rule or initial_dropout:  # without a rule: the model config's dropout, from its step
        choose_dropout = functools.partial(train_config.dropout_for_epochs, model_config=model_config)
    if has_rule and train_config.dropout_rule_scale(model_config) != 1.0:
        logger.info(
            "The dropout rule reads the planned epochs x %.2f: this model's %d stack weights over the %d it was "
            "measured on (dropout_rule_parameters).",
            train_config.dropout_rule_scale(model_config), model_config.stack_parameters,
            train_config.dropout_rule_parameters,
        )  # fmt: skip
    on_plan = functools.partial(save_plan, path)
    return FitToBudget(
        optimizer.budget_schedule, plan, optimizer.iterations, timing, on_plan, choose_dropout, initial_dropout
    )


def save_plan(train_config_path: pathlib.Path, plan: BudgetPlan) -> None:
    """Writes the plan into train_config.json (`run_files.write_plan`, the file's one writer) and logs it."""
    write_plan(train_config_path, plan)
    logger.info("Time budget: %s.", plan.describe())


class FitToBudget(keras.callbacks.Callback):
    """Predicts the steps a time limit holds from the run's own step times, places the decay of a
    `BudgetSchedule` there, and stops the run at the planned end (see the module docstring). `callback_for_run`
    builds the one of a `tft-train` run.

    The dropout it chooses reaches the model through one hook, the model's `set_dropout(rate,
    rebuild_train_function=True)` (`Transformer.set_dropout`): the callback changes nothing else of the model.

    Args:
        schedule: the optimizer's `BudgetSchedule`.
        plan: the run's `BudgetPlan` (from `plan_for_start`).
        step: the optimizer's iteration variable.
        timing: a `BudgetTiming` (the deadline, the limit, the steps, the prediction periods).
        on_plan: called with the plan whenever it changes (it saves and logs it).
        choose_dropout: None, or the dropout for a run of a given number of epochs (the training config's
            `dropout_for_epochs`); chosen once a segment's end is first known (needs `timing.steps_per_epoch`),
            and kept in the plan.
        initial_dropout: None, or (rate, fraction): the first `fraction` of each segment's planned steps train at
            `rate`, the chosen dropout starting after them (needs `choose_dropout`).
        clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(
        self,
        schedule,
        plan: BudgetPlan,
        step,
        timing: BudgetTiming,
        on_plan: Callable[[BudgetPlan], None],
        choose_dropout: Optional[Callable[[float], float]] = None,
        initial_dropout: Optional[tuple] = None,
        clock=time.monotonic,
    ):
        super().__init__()
        self.schedule = schedule
        self.plan = plan
        self.step = step
        self.timing = timing
        self.deadline = timing.deadline
        self.time_limit_seconds = timing.time_limit_seconds
        self.train_steps = timing.train_steps
        self.on_plan = on_plan
        self.calibration_steps = timing.calibration_steps
        self.repredict_every = timing.repredict_every
        self.reserve_fraction = timing.reserve_fraction
        self.window_fraction = timing.window_fraction
        self.pause_every = timing.pause_every
        self.steps_per_epoch = timing.steps_per_epoch
        self.choose_dropout = choose_dropout if timing.steps_per_epoch else None
        self.initial_dropout = initial_dropout if self.choose_dropout else None
        self.clock = clock
        self.dropout_in_model = None  # the rate this callback last set (None: the model's own)
        # (clock, step) where the timing window began: after the first step of this start (which includes tracing),
        # then at each prediction, so that a prediction follows the machine's current speed.
        self.window_start = None
        # The epoch-end pauses: the clock at the last step's end, whether an epoch began since, the pauses inside the
        # current window, and the latest pause (the step after it included).
        self.last_step_end = None
        self.epoch_began = False
        self.window_pauses = 0.0
        self.pause_seconds = 0.0
        # After the end is fixed: the speeds of the last GUARD_WINDOWS windows of GUARD_WINDOW steps each.
        self.guard_speeds = collections.deque(maxlen=self.GUARD_WINDOWS)

    GUARD_WINDOW = 20
    # The end moves by the median of several windows, and only when it is slower than the prediction's speed (which
    # spans whole checkpoint periods): the one window that holds a validation pass and a checkpoint is not a slower
    # machine. Judged on that window alone, the end would move hundreds of steps early (docs/multi30k.md).
    GUARD_WINDOWS = 5
    GUARD_MIN_WINDOWS = 3

    def on_train_begin(self, logs=None):
        self.schedule.set_plan(**self.plan.schedule_settings())
        if self.plan.dropout is not None:  # a resumed segment keeps its dropout (before the first trace)
            self._apply_dropout(self._dropout_at(int(self.step.numpy())))
        else:
            if self.initial_dropout is not None:  # from the segment's first step
                self._apply_dropout(self.initial_dropout[0])
            if self.plan.end_step is not None:  # a plan that ends at train_steps: its epochs are known now
                self._choose_dropout()
        self.on_plan(self.plan)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_began = True

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.step.numpy())
        if self.plan.end_step is not None and step >= self.plan.end_step:
            if not self.model.stop_training:
                logger.info("Reached the planned end of the time budget at step %d: stopping after a checkpoint.", step)
            self.model.stop_training = True
            return
        if self.plan.dropout is not None and self._apply_dropout(self._dropout_at(step)):
            logger.info("Dropout %g after step %d.", self.plan.dropout, step)
            # The next step holds the new trace: the timing window starts after it.
            self.window_start, self.window_pauses, self.last_step_end = None, 0.0, None
            return
        if self.plan.time_limit_minutes is None:  # a plan that ends at train_steps: nothing to time
            return
        now = self.clock()
        if self.epoch_began and self.last_step_end is not None:  # this step followed an epoch's validation and save
            self.pause_seconds = now - self.last_step_end
            self.window_pauses += self.pause_seconds
        self.epoch_began, self.last_step_end = False, now
        if self.window_start is None:
            self.window_start = (now, step)
            return
        if self.plan.frozen:
            self._keep_end_before_deadline(step, now)
            return
        timed = step - self.window_start[1]
        stepping = now - self.window_start[0] - self.window_pauses
        steps_due = timed >= (self.calibration_steps if self.plan.predicted_at_step is None else self.repredict_every)
        # Slow steps (a big model, a busy machine): also predict once a window has lasted a share of the limit.
        time_due = timed >= 5 and stepping >= self.window_fraction * self.time_limit_seconds
        if not (steps_due or time_due):
            return
        seconds_per_step = stepping / timed
        if self.pause_every:
            seconds_per_step += self.pause_seconds / self.pause_every
        retraced = self._predict(step, now, seconds_per_step)
        # After a retrace the next step holds the tracing: the next window starts after it.
        self.window_start, self.window_pauses = (None if retraced else (now, step)), 0.0

    def _choose_dropout(self) -> bool:
        """Chooses the segment's dropout from its planned end in epochs, once (and the step it starts at, after
        an initial phase); True when the model's dropout changed (its training function is traced again)."""
        if self.choose_dropout is None or self.plan.dropout is not None:
            return False
        plan = self.plan
        plan.epochs = round(plan.end_step / self.steps_per_epoch, 2)
        plan.dropout = float(self.choose_dropout(plan.epochs))
        if self.initial_dropout is not None:
            fraction = self.initial_dropout[1]
            plan.dropout_from_step = plan.segment_start + round(fraction * (plan.end_step - plan.segment_start))
        logger.info(
            "Dropout %g for the %.1f epochs the plan holds (%d steps of %.0f batches an epoch)%s.",
            plan.dropout, plan.epochs, plan.end_step, self.steps_per_epoch,
            "" if plan.dropout_from_step is None else
            f", after step {plan.dropout_from_step} (dropout {self.initial_dropout[0]:g} up to it)",
        )  # fmt: skip
        return self._apply_dropout(self._dropout_at(int(self.step.numpy())))

    def _dropout_at(self, step: int) -> float:
        """The plan's dropout at `step`: the initial phase's before `dropout_from_step`, the chosen one after."""
        if self.plan.dropout_from_step is not None and step < self.plan.dropout_from_step:
            return self.initial_dropout[0] if self.initial_dropout is not None else self.plan.dropout
        return self.plan.dropout

    def _apply_dropout(self, rate: float) -> bool:
        """Sets the model's dropout unless it is already `rate`; True when it changed."""
        if rate == self.dropout_in_model:
            return False
        # The training function traced before keeps the rate it was traced with: the model rebuilds it.
        self.model.set_dropout(rate, rebuild_train_function=True)
        self.dropout_in_model = rate
        return True

    def _keep_end_before_deadline(self, step: int, now: float) -> None:
        """Moves a fixed end earlier when the steps have become slower than predicted, so that the rate still
        reaches zero before the clock runs out (a later end is never taken: the decay has begun)."""
        timed = step - self.window_start[1]
        if timed >= self.GUARD_WINDOW:  # the recent speed, over windows of GUARD_WINDOW steps
            self.guard_speeds.append((now - self.window_start[0]) / timed)
            self.window_start = (now, step)
        seconds_per_step = self.plan.seconds_per_step  # measured over whole checkpoint periods: validation included
        if len(self.guard_speeds) >= self.GUARD_MIN_WINDOWS:
            seconds_per_step = max(seconds_per_step or 0.0, statistics.median(self.guard_speeds))
        if not seconds_per_step:
            return
        seconds_left = self.deadline - now - 0.5 * self.reserve_fraction * self.time_limit_seconds
        affordable = step + max(int(seconds_left / seconds_per_step), 1)
        if affordable >= self.plan.end_step:
            return
        logger.info(
            "Steps slower than predicted (%.3f s): the planned end moves from step %d to %d.",
            seconds_per_step, self.plan.end_step, affordable,
        )  # fmt: skip
        self.plan.end_step = affordable
        self.plan.decay_start = min(self.plan.decay_start, affordable - 1)
        self.schedule.set_plan(**self.plan.schedule_settings())
        self.on_plan(self.plan)

    def _predict(self, step: int, now: float, seconds_per_step: float) -> bool:
        """Predicts the end and places the decay; True when the dropout was chosen (the model retraced)."""
        plan = self.plan
        seconds_left = self.deadline - now - self.reserve_fraction * self.time_limit_seconds
        steps_left = max(int(seconds_left / seconds_per_step), 0) if seconds_per_step > 0 else 0
        end_step = max(min(self.train_steps, step + steps_left), step + 1)
        decay_steps = max(math.ceil(plan.decay_fraction * (end_step - plan.segment_start)), 1)
        decay_start = max(end_step - decay_steps, step)
        changed = (end_step, decay_start) != (plan.end_step, plan.decay_start)
        plan.seconds_per_step = round(seconds_per_step, 6)
        plan.predicted_at_step = step
        plan.end_step, plan.decay_start = end_step, decay_start
        # Frozen from the step before the decay's first: the next prediction would come too late to move it.
        plan.frozen = decay_start <= step + self.repredict_every
        self.schedule.set_plan(**plan.schedule_settings())
        retraced = self._choose_dropout()
        if changed or plan.frozen or retraced:
            self.on_plan(plan)
        return retraced
