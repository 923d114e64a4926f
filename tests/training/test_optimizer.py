"""make_optimizer builds the paper's Adam from the model's width and the schedule's settings."""

import keras
import numpy as np
import pytest

from tf_transformer.config import TransformerConfig
from tf_transformer.training import TrainConfig, WarmupSchedule, make_optimizer


def reference(step, d_model, warmup_steps, scale):
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def test_make_optimizer_is_the_papers_adam():
    optimizer = make_optimizer(256, warmup_steps=100, learning_rate_scale=2.0)
    assert isinstance(optimizer, keras.optimizers.Adam)
    assert optimizer.beta_1 == 0.9
    assert optimizer.beta_2 == 0.98
    assert optimizer.epsilon == 1e-9
    schedule = optimizer._learning_rate
    assert isinstance(schedule, WarmupSchedule)
    assert schedule.get_config() == {"d_model": 256, "warmup_steps": 100, "scale": 2.0}
    for step in (0, 1, 50, 100, 1000):
        np.testing.assert_allclose(float(schedule(step)), reference(step, 256, 100, 2.0), rtol=1e-6)
    np.testing.assert_allclose(float(optimizer.learning_rate), reference(0, 256, 100, 2.0), rtol=1e-6)


def test_make_optimizer_defaults_are_the_papers_and_a_train_configs():
    schedule = make_optimizer(512)._learning_rate
    assert schedule.get_config() == {"d_model": 512, "warmup_steps": 4000, "scale": 1.0}
    train_config = TrainConfig(model_dir="run")
    assert (train_config.warmup_steps, train_config.learning_rate_scale) == (4000, 1.0)


def test_a_whole_config_is_refused_with_the_call_to_make_instead():
    with pytest.raises(TypeError, match=r"d_model: expected an int, got TransformerConfig. Fix: .*config.d_model"):
        make_optimizer(TransformerConfig())
