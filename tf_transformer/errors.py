"""The errors the console commands catch that are raised by modules importing TensorFlow, defined here, in a
module that imports nothing, so that a command's `except` clause costs no TensorFlow import (its --help stays
instant). Their old homes re-export them: `tf_transformer.checkpoints.CheckpointError`,
`tf_transformer.training.TrainingDiverged`, ... are these classes. (`ConfigError` is in `config.py` and
`DataError` in `data/errors.py`, neither of which imports TensorFlow.) Also the check that the parts that are
TensorFlow's by design run where Keras does (`require_tensorflow_backend`, raising `BackendError`).
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


class BackendError(RuntimeError):
    """A part that is TensorFlow's by design (decoding, the export, loading a model directory, training) was called in
    a process whose Keras runs on another backend."""


DEFAULT_BACKEND_FIX = (
    "save the model here (model.save('model.keras')) and load it where Keras runs on TensorFlow (KERAS_BACKEND "
    "unset or tensorflow): docs/python.md, 'Train anywhere, serve from TensorFlow'"
)


def require_tensorflow_backend(what: str, fix: str = DEFAULT_BACKEND_FIX) -> None:
    """A `BackendError` naming `what`, Keras' backend and `fix` unless Keras runs on TensorFlow: under JAX or PyTorch
    these parts would fail deep inside TensorFlow, with an error that names neither."""
    import keras  # inside: this module imports nothing at its top (its callers have imported Keras already)

    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise BackendError(
            f"{what} runs on Keras' TensorFlow backend, but this process runs Keras on {backend} (KERAS_BACKEND or "
            f"keras.json). Fix: {fix}."
        )
