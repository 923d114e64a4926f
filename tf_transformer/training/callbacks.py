"""Keras callbacks of the training loop: step-exact checkpoints, stopping at a step, per-step logs."""

from __future__ import annotations

import time

import keras
import tensorflow as tf


class TrainingDiverged(RuntimeError):
    """The loss or the weights became NaN or infinite; the last good checkpoint is kept."""


def weights_are_finite(model: keras.Model) -> bool:
    """Whether every trainable weight is finite (one reduction per variable, once per checkpoint)."""
    return all(bool(tf.reduce_all(tf.math.is_finite(variable))) for variable in model.trainable_variables)


class CheckpointEveryEpoch(keras.callbacks.Callback):
    """Saves a `tf.train.CheckpointManager` checkpoint at each epoch end and when training ends.

    An "epoch" of the training loop is `checkpoint_every` steps. The checkpoint number is the optimizer
    step, so a restart restores the weights, the optimizer moments and the step counter together.
    TensorFlow writes the checkpoint files first and only then points the `checkpoint` index at them, so
    a crash during a save leaves the previous checkpoint as the latest one. Weights are checked before
    each save: a finite loss can still be followed by an update that makes them NaN, and such weights
    must never become the latest checkpoint (`TrainingDiverged` is raised instead).
    """

    def __init__(self, manager: tf.train.CheckpointManager, step: tf.Variable):
        super().__init__()
        self.manager = manager
        self.step = step
        self.last_saved = None

    def on_epoch_end(self, epoch, logs=None):
        self._save()

    def on_train_end(self, logs=None):
        self._save()

    def _save(self):
        step = int(self.step.numpy())
        if step == self.last_saved:
            return
        if not weights_are_finite(self.model):
            raise TrainingDiverged(f"the weights became NaN or infinite by step {step}")
        self.manager.save(checkpoint_number=step)
        self.last_saved = step


class StopAtStep(keras.callbacks.Callback):
    """Stops `fit` once the optimizer has made `train_steps` updates in total (across restarts)."""

    def __init__(self, train_steps: int, step: tf.Variable):
        super().__init__()
        self.train_steps = train_steps
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.step.numpy()) >= self.train_steps:
            self.model.stop_training = True


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
        with self.writer.as_default(step=step):
            tf.summary.scalar("learning_rate", learning_rate)
            if self.tokens_per_second is not None:
                tf.summary.scalar("target_tokens_per_second", self.tokens_per_second)
        self.writer.flush()

    def on_train_end(self, logs=None):
        if self.writer is not None:
            self.writer.close()
