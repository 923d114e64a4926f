"""The errors the console commands catch that are raised by modules importing TensorFlow, defined here, in a
module that imports nothing, so that a command's `except` clause costs no TensorFlow import (its --help stays
instant). Their old homes re-export them: `tf_transformer.checkpoints.CheckpointError`,
`tf_transformer.training.TrainingDiverged`, ... are these classes. (`ConfigError` is in `config.py` and
`DataError` in `data/errors.py`, neither of which imports TensorFlow.)
"""

from __future__ import annotations

import signal
from typing import Optional


class CheckpointError(ValueError):
    """A checkpoint that cannot be read (missing, truncated or corrupted files) or that holds other weights.

    A `ValueError`, as bad input is elsewhere in the package. `path` is the checkpoint's path prefix and
    `unreadable` tells a damaged checkpoint (True) from one of another model (False).
    """

    def __init__(self, message: str, path: str = "", unreadable: bool = True):
        super().__init__(message)
        self.path = path
        self.unreadable = unreadable


class TrainingDiverged(RuntimeError):
    """The loss or the weights became NaN or infinite; the last good checkpoint is kept."""


class TrainingInterrupted(Exception):
    """SIGTERM or SIGINT stopped training after the step in progress, and a checkpoint was saved at that step.

    `signal_number` is the signal (a worker stopped by a peer's signal reports SIGTERM), `step` the saved
    step and `checkpoint` the checkpoint's path (None on a worker that does not write the model directory).
    The convention for the process's exit status is `128 + signal_number`.
    """

    def __init__(self, signal_number: int, step: int, checkpoint: Optional[str]):
        self.signal_number = signal_number
        self.step = step
        self.checkpoint = checkpoint
        name = signal.Signals(signal_number).name
        where = f"saved {checkpoint}" if checkpoint else "the chief saved a checkpoint"
        super().__init__(
            f"{name} received: training stopped at step {step} and {where}. Run the same command again to resume."
        )


class PeerWorkerLost(RuntimeError):
    """Another worker of a multi-worker run stopped without warning; this one stopped rather than wait for it."""
