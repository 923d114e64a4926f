"""What a training checkpoint holds besides the weights and Adam, so that a resumed run is the uninterrupted one.

A restart that restored only the weights, the Adam moments and the step would start the seeded input pipeline
from its first batch again (the next hour trained on the first hour's batch order) and the dropout masks from
their first draw. So every checkpoint of `tft-train` also holds, under `input_state/`:

- `position`: how many batches of the run's seeded input stream (`make_dataset` with the run's `DataConfig`)
  training has consumed. A resumed run rebuilds the same stream and skips that many batches
  (`make_dataset(..., skip_batches=position)`), as Orbit and SeqIO restore an input position. The stream is the
  same batches in the same order when the data order is deterministic (`--deterministic`); without it the
  parallel tokenization may reorder pairs within the stream, and the skip still moves past the batches
  already trained on. Skipping costs the pipeline's work for those batches (tokenizing and bucketing, no model
  step): benchmarks/NOTES.md gives the figures.
- `random/<i>`: the model's non-trainable variables, which are the state of Keras' dropout seed generators
  (Keras leaves them out of the model's own checkpoint). Restored, the next dropout masks are those the
  uninterrupted run would have drawn.

Checkpoints written before this existed have no `input_state/`: their position is taken to be the step (one
batch a step), and the dropout generators start from the seed.
"""

from __future__ import annotations

import logging
from typing import Optional

import keras
import tensorflow as tf

logger = logging.getLogger("tf_transformer")

KEY = "input_state"  # its name in the training checkpoint
_VALUE = ".ATTRIBUTES/VARIABLE_VALUE"


class ResumeState:
    """The input position and the dropout generators' states of a training run (see the module docstring).

    Args:
        model: the model being trained (built, so its seed generators exist).
        batches_per_step: batches of the seeded stream one optimizer step consumes: 1 under `model.fit`
            (one global batch, split across the replicas), the number of replicas under the multi-worker loop
            (every replica takes its own batch).

    Attributes:
        position: a `tf.Variable` (int64), the batches consumed so far.
        trackable: what to put into the training `tf.train.Checkpoint` under `KEY`.
    """

    def __init__(self, model: keras.Model, batches_per_step: int = 1):
        self.batches_per_step = batches_per_step
        self.position = tf.Variable(0, dtype=tf.int64, trainable=False, name="input_position")
        self.random = list(model.non_trainable_variables)
        self.trackable = tf.train.Checkpoint(position=self.position, random=self.random)

    def restore(self, path: Optional[str], step: int) -> None:
        """Reads the state from the training checkpoint `path` (None: a fresh run, position 0).

        `step` is the restored optimizer step, the position of a checkpoint written before the state was saved.
        Dropout states are restored only when the checkpoint has as many, of the same shapes: a restart that
        changed a dropout rate to or from 0 has other generators, which then start from the seed.
        """
        if path is None:
            return
        reader = tf.train.load_checkpoint(path)
        shapes = reader.get_variable_to_shape_map()
        position_name = f"{KEY}/position/{_VALUE}"
        if position_name not in shapes:
            self.position.assign(step * self.batches_per_step)
            logger.info(
                "%s has no input position (written by an older version): resuming the input at batch %d (the step).",
                path,
                int(self.position.numpy()),
            )
            return
        self.position.assign(int(reader.get_tensor(position_name)))
        names = [f"{KEY}/random/{index}/{_VALUE}" for index in range(len(self.random))]
        saved = sum(1 for name in shapes if name.startswith(f"{KEY}/random/"))
        if saved == len(self.random) and all(
            list(shapes[name]) == list(variable.shape) for name, variable in zip(names, self.random, strict=True)
        ):
            for name, variable in zip(names, self.random, strict=True):
                variable.assign(reader.get_tensor(name))
        else:
            logger.warning(
                "%s holds %d dropout generator states but the model has %d (a dropout rate changed to or from 0): "
                "the dropout masks start afresh from the seed.",
                path,
                saved,
                len(self.random),
            )

    def counter(self) -> keras.callbacks.Callback:
        """A `model.fit` callback advancing the position each step: list it before the checkpoint saver."""
        return _CountBatches(self)  # before the saver, so that each checkpoint holds its own step's position

    def advance(self) -> None:
        """Advances the position by one optimizer step's batches (the multi-worker loop calls it after a step)."""
        self.position.assign_add(self.batches_per_step)


class _CountBatches(keras.callbacks.Callback):
    def __init__(self, state: ResumeState):
        super().__init__()
        self.state = state

    def on_train_batch_end(self, batch, logs=None):
        self.state.advance()
