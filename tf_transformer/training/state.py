"""`TrainingState`: the model and what trains and saves it, as `train` hands them to a training loop."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from tf_transformer.training.resume_state import ResumeState


@dataclasses.dataclass(frozen=True)
class TrainingState:
    """A built (and possibly restored) run, ready for a training loop (`trainer._fit`, `fit_multi_worker`).

    Attributes:
        model: the `Transformer`, built in the strategy's scope.
        optimizer: its Keras optimizer, built (its moments exist, so a restore fills them).
        loss: the training loss (a `MaskedCrossEntropy`).
        checkpoint: the `tf.train.Checkpoint` of the model, the optimizer and the resume state.
        manager: the `tf.train.CheckpointManager` of the model directory's checkpoints.
        resume_state: the input position and dropout states a resumed run continues from; None: none kept.
        start_step: the optimizer's step when the run started (0, or the restored checkpoint's).
    """

    model: Any
    optimizer: Any
    loss: Any
    checkpoint: Any
    manager: Any
    resume_state: Optional[ResumeState]
    start_step: int

    @property
    def step(self) -> int:
        """The optimizer's step now."""
        return int(self.optimizer.iterations.numpy())
