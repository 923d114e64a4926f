"""`TrainConfig`: how a run trains (steps, checkpoints, devices, precision), as opposed to what it trains."""

from __future__ import annotations

import dataclasses
from typing import Optional

from tf_transformer.config import ConfigError, JsonConfig, unknown_option

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker_mirrored", "tpu")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


@dataclasses.dataclass(frozen=True)
class TrainConfig(JsonConfig):
    """Settings of a training run, validated on creation and saved as `train_config.json`.

    Attributes:
        model_dir: where checkpoints, logs, the vocabulary and the resolved configs go.
        train_steps: optimizer updates in total; a restarted run continues up to this number.
        checkpoint_every: steps between checkpoints (also the period of validation).
        keep_checkpoints: how many recent checkpoints to keep (averaging needs several).
        strategy: "auto" (mirrored over all GPUs when there are several, else one device),
            "one_device", "mirrored", "multi_worker_mirrored" (reads TF_CONFIG) or "tpu".
        num_cpu_devices: split the CPU into this many logical devices (mirrored training without GPUs);
            0 leaves the CPU as it is.
        mixed_precision: "float32", "mixed_bfloat16" or "mixed_float16".
        jit_compile: compile the training step with XLA.
        log_every: steps between TensorBoard points (loss, learning rate, tokens/s).
        validation_batches: batches of the validation set per evaluation; 0 means all of it.
        seed: seeds weights, data order and dropout; None for a random run.
        deterministic: also makes TensorFlow ops deterministic (slower), for reproducible runs.
    """

    model_dir: str
    train_steps: int = 100000
    checkpoint_every: int = 1000
    keep_checkpoints: int = 5
    strategy: str = "auto"
    num_cpu_devices: int = 0
    mixed_precision: str = "float32"
    jit_compile: bool = False
    log_every: int = 100
    validation_batches: int = 0
    seed: Optional[int] = None
    deterministic: bool = False

    def __post_init__(self):
        if not self.model_dir:
            raise ConfigError("model_dir: empty. Fix: pass --model_dir, a directory for checkpoints and logs.")
        for name in ("train_steps", "checkpoint_every", "keep_checkpoints", "log_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name}: must be a positive integer, got {value!r}. Fix: set {name} >= 1.")
        for name in ("num_cpu_devices", "validation_batches"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name}: must be an integer >= 0, got {value!r}. Fix: set {name} >= 0.")
        if self.strategy not in STRATEGIES:
            raise ConfigError(unknown_option("strategy", self.strategy, STRATEGIES))
        if self.mixed_precision not in PRECISIONS:
            raise ConfigError(unknown_option("mixed_precision", self.mixed_precision, PRECISIONS))
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise ConfigError(f"seed: must be an integer or null, got {self.seed!r}. Fix: set seed=42 or null.")
