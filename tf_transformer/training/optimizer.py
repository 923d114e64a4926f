"""The paper's optimizer and loss, built from a `TransformerConfig` (Vaswani et al., 2017, sections 5.3-5.4)."""

from __future__ import annotations

import keras

from tf_transformer.training.losses import MaskedCrossEntropy
from tf_transformer.training.schedule import BudgetSchedule, WarmupSchedule


def make_optimizer(config, budget: bool = False) -> keras.optimizers.Adam:
    """Adam with beta_1 = 0.9, beta_2 = 0.98, epsilon = 1e-9 and the paper's warmup schedule.

    Args:
        config: a `TransformerConfig`; `d_model`, `warmup_steps` and `learning_rate_scale` set the
            `WarmupSchedule`.
        budget: wrap the schedule in a `BudgetSchedule` (the trainer's time-limited runs), which is the same
            schedule until its plan is set (`optimizer.budget_schedule`). Its variables are not part of
            the optimizer's checkpoint.

    Returns:
        A new `keras.optimizers.Adam` (build one per model: an optimizer holds per-variable state).

    Example:

    >>> from tf_transformer.config import TransformerConfig
    >>> optimizer = make_optimizer(TransformerConfig())
    """
    schedule = WarmupSchedule(config.d_model, config.warmup_steps, config.learning_rate_scale)
    if budget:
        schedule = BudgetSchedule(schedule)
    optimizer = keras.optimizers.Adam(learning_rate=schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    # Keras keeps a schedule only privately; the trainer's budget callback needs this one to set its plan.
    optimizer.budget_schedule = schedule if budget else None
    return optimizer


def make_loss(config) -> MaskedCrossEntropy:
    """The training loss: `MaskedCrossEntropy` with the config's `label_smoothing` and `pad_id`.

    Example:

    >>> from tf_transformer.config import TransformerConfig
    >>> loss = make_loss(TransformerConfig(label_smoothing=0.1))
    """
    return MaskedCrossEntropy(label_smoothing=config.label_smoothing, pad_id=config.pad_id)
