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
