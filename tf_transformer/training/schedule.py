"""The learning-rate schedule of "Attention Is All You Need" (Vaswani et al., 2017, section 5.3)."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="tf_transformer")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup then inverse-square-root decay, the paper's equation (3).

        lrate = scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)

    The rate rises linearly for `warmup_steps` steps, peaks at
    `scale * (d_model * warmup_steps)**-0.5` and then decays as `step**-0.5`.

    Args:
        d_model: the model width; the rate scales with `d_model**-0.5`.
        warmup_steps: steps of linear warmup (4000 in the paper).
        scale: a constant multiplying the whole formula (1.0 in the paper).

    Call args:
        step: a scalar int or float (Python number or tensor, e.g. the optimizer's int64
            `iterations` variable). Keras passes its 0-based iteration count; `step` is clamped to
            at least 1, so step 0 gives the same rate as step 1 (never 0, never inf).

    Returns:
        A float32 scalar tensor, the learning rate.

    Example:

    >>> schedule = WarmupSchedule(d_model=512, warmup_steps=4000)
    >>> round(float(schedule(4000)), 8)  # the peak, (512 * 4000) ** -0.5
    0.00069877
    >>> optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        super().__init__()
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        # Evaluated in float32 whatever the optimizer's dtype; the paper's step_num is 1-based, so
        # Keras' first iteration (0) is clamped to 1 rather than giving a rate of 0 (or 0**-0.5 = inf).
        step = ops.maximum(ops.cast(step, "float32"), 1.0)
        d_model = ops.cast(self.d_model, "float32")
        warmup_steps = ops.cast(self.warmup_steps, "float32")
        scale = ops.cast(self.scale, "float32")
        return scale * ops.rsqrt(d_model) * ops.minimum(ops.rsqrt(step), step * warmup_steps**-1.5)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


@keras.saving.register_keras_serializable(package="tf_transformer")
class BudgetSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """A schedule (the paper's `WarmupSchedule` by default) fitted to a step budget known only while training:
    an optional linear re-warmup, then the schedule's own curve, then a linear decay to zero.

        rate(step) = schedule(step) * rewarm(step) * decay(step)
        rewarm(step) = min(1, (step + 1 - rewarm_start) / rewarm_steps)    (1 when rewarm_steps is 0)
        decay(step) = clip((decay_end - step) / (decay_end - decay_start), 0, 1)   (1 when decay_end is 0)

    This is "warmup-stable-decay" (Hägele et al., 2024, https://arxiv.org/abs/2405.18392) on the paper's
    warmup curve, with the decay placed where the budget ends ("Budgeted training", Li et al., 2020,
    https://arxiv.org/abs/1905.04753): a rate that reaches zero at the last step beats one cut off mid-curve.
    The four settings are variables, not constructor constants, because the end is predicted from step times
    measured during the run (`tf_transformer.training.budget.FitToBudget` assigns them; a traced training step
    reads the new values). `step` is Keras' 0-based update count, so the update with `step = decay_end - 1`,
    the last one, has a rate of `schedule(step) / (decay_end - decay_start)`: near zero.

    Args:
        schedule: the underlying `LearningRateSchedule` (e.g. `WarmupSchedule`).
        rewarm_start, rewarm_steps, decay_start, decay_end: initial values of the variables (all 0: the
            underlying schedule unchanged).

    Call args:
        step: a scalar int or float, as for `WarmupSchedule`.

    Returns:
        A float32 scalar tensor, the learning rate.

    Example:

    >>> schedule = BudgetSchedule(WarmupSchedule(d_model=128, warmup_steps=100), decay_start=800, decay_end=1000)
    >>> abs(float(schedule(999)) - float(WarmupSchedule(128, 100)(999)) / 200) < 1e-10
    True
    """

    def __init__(self, schedule, rewarm_start=0, rewarm_steps=0, decay_start=0, decay_end=0):
        super().__init__()
        self.schedule = schedule
        # Created where the optimizer is built (inside a strategy's scope when there is one), float32 because
        # the rate is computed in float32.
        self.rewarm_start = keras.Variable(float(rewarm_start), trainable=False, name="rewarm_start")
        self.rewarm_steps = keras.Variable(float(rewarm_steps), trainable=False, name="rewarm_steps")
        self.decay_start = keras.Variable(float(decay_start), trainable=False, name="decay_start")
        self.decay_end = keras.Variable(float(decay_end), trainable=False, name="decay_end")

    def set_plan(self, rewarm_start=0, rewarm_steps=0, decay_start=0, decay_end=0):
        """Assigns the four settings (see the class docstring); `decay_end` 0 means no decay."""
        for variable, value in (
            (self.rewarm_start, rewarm_start),
            (self.rewarm_steps, rewarm_steps),
            (self.decay_start, decay_start),
            (self.decay_end, decay_end),
        ):
            variable.assign(float(value))

    def __call__(self, step):
        base = self.schedule(step)
        step = ops.cast(step, "float32")
        rewarm_steps = ops.convert_to_tensor(self.rewarm_steps)
        rewarm = ops.where(
            rewarm_steps > 0,
            ops.clip((step + 1.0 - self.rewarm_start) / ops.maximum(rewarm_steps, 1.0), 0.0, 1.0),
            1.0,
        )
        decay_end = ops.convert_to_tensor(self.decay_end)
        span = ops.maximum(decay_end - self.decay_start, 1.0)
        decay = ops.where(decay_end > 0, ops.clip((decay_end - step) / span, 0.0, 1.0), 1.0)
        return base * rewarm * decay

    def get_config(self):
        return {
            "schedule": keras.saving.serialize_keras_object(self.schedule),
            "rewarm_start": float(self.rewarm_start.numpy()),
            "rewarm_steps": float(self.rewarm_steps.numpy()),
            "decay_start": float(self.decay_start.numpy()),
            "decay_end": float(self.decay_end.numpy()),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["schedule"] = keras.saving.deserialize_keras_object(config["schedule"])
        return cls(**config)
