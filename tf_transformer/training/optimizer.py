"""The paper's optimizer (Vaswani et al., 2017, section 5.3): Adam with the warmup learning-rate schedule."""

from __future__ import annotations

import numbers

import keras

from tf_transformer.training.schedule import BudgetSchedule, WarmupSchedule


def make_optimizer(
    d_model: int, warmup_steps: int = 4000, learning_rate_scale: float = 1.0, budget: bool = False
) -> keras.optimizers.Adam:
    """Adam with beta_1 = 0.9, beta_2 = 0.98, epsilon = 1e-9 and the paper's `WarmupSchedule` for a model of width
    `d_model`, with a `TrainConfig`'s (or a recipe's) `warmup_steps` and `learning_rate_scale`. A new optimizer per
    model (it holds per-variable state). `budget`: the schedule wrapped in a `BudgetSchedule` (the trainer's budget
    plans), kept as `optimizer.budget_schedule`; the same schedule until its plan is set.

    Raises:
        TypeError: `d_model` is not an int (e.g. a whole config, as release 0.1 took).

    Example:

    >>> optimizer = make_optimizer(512, warmup_steps=4000)
    """
    if not isinstance(d_model, numbers.Integral) or isinstance(d_model, bool):
        raise TypeError(
            f"d_model: expected an int, got {type(d_model).__name__}. Fix: pass the model's width and the "
            "schedule's settings, e.g. make_optimizer(config.d_model, warmup_steps=4000, learning_rate_scale=1.0)."
        )
    schedule = WarmupSchedule(d_model, warmup_steps, learning_rate_scale)
    if budget:
        schedule = BudgetSchedule(schedule)
    optimizer = keras.optimizers.Adam(learning_rate=schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    # Keras keeps a schedule only privately; the trainer's budget callback needs this one to set its plan.
    optimizer.budget_schedule = schedule if budget else None
    return optimizer
