"""Training pieces of the paper: warmup learning-rate schedule, Adam, label-smoothed loss, accuracy."""

from tf_transformer.training.callbacks import StopSignals, TrainingInterrupted
from tf_transformer.training.losses import MaskedCrossEntropy
from tf_transformer.training.metrics import MaskedAccuracy
from tf_transformer.training.multi_worker import PeerWorkerLost
from tf_transformer.training.optimizer import make_loss, make_optimizer
from tf_transformer.training.schedule import WarmupSchedule
from tf_transformer.training.synthetic import synthetic_task_config, train_synthetic_task
from tf_transformer.training.train_config import TrainConfig
from tf_transformer.training.trainer import TrainingDiverged, TrainResult, configure_devices, train

__all__ = [
    "WarmupSchedule",
    "MaskedCrossEntropy",
    "MaskedAccuracy",
    "make_optimizer",
    "make_loss",
    "synthetic_task_config",
    "train_synthetic_task",
    "TrainConfig",
    "TrainingDiverged",
    "TrainingInterrupted",
    "StopSignals",
    "PeerWorkerLost",
    "TrainResult",
    "configure_devices",
    "train",
]
