"""Keras callbacks of the training loop: step-exact checkpoints, stopping at a step or on a signal, per-step logs."""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from typing import Optional

import keras
import tensorflow as tf

from tf_transformer.errors import TrainingDiverged, TrainingInterrupted  # defined there for the commands; re-exported

logger = logging.getLogger("tf_transformer")


class StopSignals:
    """Turns SIGTERM and SIGINT into a request to stop that the training loop honours between steps.

    A context manager. Inside it, the first SIGTERM (what a preempted VM, an evicted pod or `kill` sends) or
    SIGINT (Ctrl-C) is recorded in `received` and logged instead of ending the process, so the loop can
    finish its step and save a checkpoint; the previous handlers come back at once, so a second signal acts
    as it would have (stops at once). Python installs signal handlers only in the main thread: elsewhere
    this records nothing and signals act as usual.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.received: Optional[int] = None
        self._previous = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for number in self.SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc_info) -> None:
        self._restore()

    def _handle(self, signal_number, frame) -> None:
        del frame
        self.received = signal_number
        self._restore()
        logger.warning(
            "%s received: saving a checkpoint after the step in progress, then stopping (send it again to stop at "
            "once, without saving).",
            signal.Signals(signal_number).name,
        )

    def _restore(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
        self._previous = {}


class StopOnNonFiniteLoss(keras.callbacks.TerminateOnNaN):
    """Keras' `TerminateOnNaN` that raises `TrainingDiverged`, judged from the loss value itself.

    Keras' own raises a `RuntimeError` whose message would have to be parsed to tell divergence from any other
    runtime error; this one gives the package's error type.
    """

    def __init__(self):
        super().__init__(raise_error=True)

    def on_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            raise TrainingDiverged(f"the training loss became {float(loss)} at batch {batch}")


def weights_are_finite(model: keras.Model) -> bool:
    """Whether every trainable weight is finite (one reduction per variable, once per checkpoint)."""
    return all(bool(tf.reduce_all(tf.math.is_finite(variable))) for variable in model.trainable_variables)


class CheckpointEveryEpoch(keras.callbacks.Callback):
    """Saves a `tf.train.CheckpointManager` checkpoint at each epoch end, when training ends, and on a signal.

    An "epoch" of the training loop is `checkpoint_every` steps. The checkpoint number is the optimizer
    step, so a restart restores the weights, the optimizer moments and the step counter together.
    TensorFlow writes the checkpoint files first and only then points the `checkpoint` index at them, so
    a crash during a save leaves the previous checkpoint as the latest one. Weights are checked before
    each save: a finite loss can still be followed by an update that makes them NaN, and such weights
    must never become the latest checkpoint (`TrainingDiverged` is raised instead).

    With `stop_signals`, a SIGTERM or SIGINT it recorded makes the callback save at the end of the step in
    progress (or of the epoch, when it came during validation) and raise `TrainingInterrupted`.

    With `checkpoint_every`, checkpoints stay on the multiples of it (and the last step): a run resumed from a
    signal's checkpoint mid-period has its epochs shifted, so the save happens at the batch that reaches a
    multiple, and an epoch end elsewhere saves nothing.
    """

    def __init__(
        self,
        manager: tf.train.CheckpointManager,
        step: tf.Variable,
        stop_signals: Optional[StopSignals] = None,
        checkpoint_every: Optional[int] = None,
    ):
        super().__init__()
        self.manager = manager
        self.step = step
        self.stop_signals = stop_signals
        self.checkpoint_every = checkpoint_every
        self.last_saved = None

    def on_train_begin(self, logs=None):
        if self.manager.latest_checkpoint:  # restored from it: saving the same step again would add nothing
            self.last_saved = int(self.step.numpy())

    def on_train_batch_end(self, batch, logs=None):
        if self.checkpoint_every and int(self.step.numpy()) % self.checkpoint_every == 0:
            self._save()
        self._stop_if_signalled()

    def on_epoch_end(self, epoch, logs=None):
        if not self.checkpoint_every or int(self.step.numpy()) % self.checkpoint_every == 0:
            self._save()
        self._stop_if_signalled()

    def on_train_end(self, logs=None):
        self._save()

    def _stop_if_signalled(self):
        if self.stop_signals is None or self.stop_signals.received is None:
            return
        self._save()
        step = int(self.step.numpy())
        logger.warning("Saved %s at step %d before stopping.", self.manager.latest_checkpoint, step)
        raise TrainingInterrupted(self.stop_signals.received, step, self.manager.latest_checkpoint)

    def _save(self):
        step = int(self.step.numpy())
        if step == self.last_saved:
            return
        if not weights_are_finite(self.model):
            raise TrainingDiverged(f"the weights became NaN or infinite by step {step}")
        self.manager.save(checkpoint_number=step)
        self.last_saved = step


class EpochProgress(keras.callbacks.ProgbarLogger):
    """Keras' progress bar and end-of-epoch line, where an epoch that a callback stopped early (`train_steps`, the
    time limit, a signal) ends at the steps it ran: Keras' own would read `500/500` and divide the time by 500."""

    def on_epoch_end(self, epoch, logs=None):
        if self.progbar is not None and self.target and self.seen < self.target:
            self.progbar.update(self.seen, list((logs or {}).items()), finalize=True)
        else:
            super().on_epoch_end(epoch, logs)


class StopAtStep(keras.callbacks.Callback):
    """Stops `fit` once the optimizer has made `train_steps` updates in total (across restarts)."""

    def __init__(self, train_steps: int, step: tf.Variable):
        super().__init__()
        self.train_steps = train_steps
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.step.numpy()) >= self.train_steps:
            self.model.stop_training = True


class LogFirstStep(keras.callbacks.Callback):
    """Logs when the run's first training step is done: the time to the first step (data checks, vocabulary,
    the input's skip on a resume, tracing), which grows with the corpus where the steps do not."""

    def __init__(self, started: float, step: tf.Variable, clock=time.monotonic):
        super().__init__()
        self.started = started
        self.step = step
        self.clock = clock
        self.logged = False

    def on_train_batch_end(self, batch, logs=None):
        if not self.logged:
            self.logged = True
            elapsed = self.clock() - self.started
            logger.info("First step (step %d) done %.1f s after the start.", int(self.step.numpy()), elapsed)


class StopAtTimeLimit(keras.callbacks.Callback):
    """Stops `fit` after the first step that ends at or past `deadline` (a `clock()` reading, in seconds).

    `fit` then runs the shortened epoch's validation and `CheckpointEveryEpoch` saves at the step reached.
    `stopped_at_step` is that step, or None while the deadline has not been reached.
    """

    def __init__(self, deadline: float, step: tf.Variable, clock=time.monotonic):
        super().__init__()
        self.deadline = deadline
        self.step = step
        self.clock = clock
        self.stopped_at_step = None

    def on_train_batch_end(self, batch, logs=None):
        if self.stopped_at_step is None and self.clock() >= self.deadline:
            self.stopped_at_step = int(self.step.numpy())
            self.model.stop_training = True
            logger.info("Time limit reached at step %d: stopping after a checkpoint.", self.stopped_at_step)


class TrainingMonitor(keras.callbacks.Callback):
    """Writes the learning rate and target tokens per second to TensorBoard every `log_every` steps.

    Keras' TensorBoard callback logs the loss per step but the learning rate only per epoch; tokens/s
    come from the `TokenCount` metric ("target_tokens" in the logs, reset every epoch).
    """

    def __init__(self, log_dir: str, log_every: int, step: tf.Variable):
        super().__init__()
        self.log_dir = log_dir
        self.log_every = log_every
        self.step = step
        self.writer = None
        self.last_tokens = 0.0
        self.last_time = None
        self.tokens_per_second = None

    def on_train_begin(self, logs=None):
        self.writer = tf.summary.create_file_writer(self.log_dir)

    def on_epoch_begin(self, epoch, logs=None):
        self.last_tokens, self.last_time = 0.0, time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.step.numpy())
        if step % self.log_every or logs is None or "target_tokens" not in logs:
            return
        now, tokens = time.perf_counter(), float(logs["target_tokens"])
        elapsed = now - self.last_time
        if elapsed > 0:
            self.tokens_per_second = (tokens - self.last_tokens) / elapsed
        self.last_tokens, self.last_time = tokens, now
        learning_rate = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        # Keras' TensorBoard callback sets a global record_if on its own batch counter, which restarts at 0 in every
        # fit: after a resume from a step off the multiples it would never agree with the global step here.
        with self.writer.as_default(step=step), tf.summary.record_if(True):
            tf.summary.scalar("learning_rate", learning_rate)
            if self.tokens_per_second is not None:
                tf.summary.scalar("target_tokens_per_second", self.tokens_per_second)
        self.writer.flush()

    def on_train_end(self, logs=None):
        if self.writer is not None:
            self.writer.close()
