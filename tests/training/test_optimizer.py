"""make_optimizer / make_loss build the paper's Adam and loss from a TransformerConfig."""

import keras
import numpy as np

from tf_transformer.config import TransformerConfig
from tf_transformer.training import MaskedCrossEntropy, WarmupSchedule, make_loss, make_optimizer


def reference(step, d_model, warmup_steps, scale):
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def test_make_optimizer_is_the_papers_adam():
    config = TransformerConfig(d_model=256, warmup_steps=100, learning_rate_scale=2.0)
    optimizer = make_optimizer(config)
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


def test_make_optimizer_defaults():
    schedule = make_optimizer(TransformerConfig())._learning_rate
    assert schedule.get_config() == {"d_model": 512, "warmup_steps": 4000, "scale": 1.0}


def test_make_loss():
    loss = make_loss(TransformerConfig(label_smoothing=0.2))
    assert isinstance(loss, MaskedCrossEntropy)
    assert loss.label_smoothing == 0.2 and loss.pad_id == 0
