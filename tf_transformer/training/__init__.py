"""Training pieces of the paper: warmup learning-rate schedule, Adam, label-smoothed loss, accuracy."""

from tf_transformer._lazy import lazy_attributes

# Imported on first use (PEP 562; see tf_transformer/_lazy.py): public name -> its module.
_LAZY = {
    "configure_devices": "tf_transformer.training.trainer",
    "make_optimizer": "tf_transformer.training.optimizer",
    "MaskedAccuracy": "tf_transformer.training.metrics",
    "MaskedCrossEntropy": "tf_transformer.training.losses",
    "PeerWorkerLost": "tf_transformer.training.multi_worker",
    "StopSignals": "tf_transformer.training.callbacks",
    "synthetic_task_config": "tf_transformer.training.synthetic",
    "train": "tf_transformer.training.trainer",
    "train_synthetic_task": "tf_transformer.training.synthetic",
    "TrainConfig": "tf_transformer.training.train_config",
    "TrainingDiverged": "tf_transformer.training.callbacks",
    "TrainingInterrupted": "tf_transformer.training.callbacks",
    "TrainResult": "tf_transformer.training.trainer",
    "WarmupSchedule": "tf_transformer.training.schedule",
}
__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)

__all__ = [
    "WarmupSchedule",
    "MaskedCrossEntropy",
    "MaskedAccuracy",
    "make_optimizer",
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
