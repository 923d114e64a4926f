"""WarmupSchedule against a NumPy transcription of the paper's equation (3)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.training import WarmupSchedule


def reference(step, d_model=512, warmup_steps=4000, scale=1.0):
    step = np.maximum(np.asarray(step, dtype=np.float64), 1.0)
    return scale * d_model**-0.5 * np.minimum(step**-0.5, step * warmup_steps**-1.5)


@pytest.mark.parametrize("step", [1, 4000, 100000])
def test_matches_paper_formula(step):
    schedule = WarmupSchedule(512, 4000)
    expected = reference(step)
    np.testing.assert_allclose(float(schedule(step)), expected, rtol=1e-6)
    np.testing.assert_allclose(float(schedule(tf.Variable(step, dtype=tf.int64))), expected, rtol=1e-6)
    assert schedule(step).dtype == "float32"


def test_step_zero_equals_step_one():
    schedule = WarmupSchedule(512, 4000)
    value = float(schedule(0))
    assert value == float(schedule(1))
    assert np.isfinite(value) and value > 0
    assert float(schedule(tf.constant(0, tf.int64))) == value


def test_scale_multiplies():
    np.testing.assert_allclose(float(WarmupSchedule(256, 100, scale=2.0)(50)), reference(50, 256, 100, 2.0), rtol=1e-6)


def test_peak_at_warmup_and_monotone():
    schedule = WarmupSchedule(512, 4000)
    steps = np.arange(1, 20001)
    values = np.asarray(schedule(tf.constant(steps, tf.int64)))
    np.testing.assert_allclose(values, reference(steps), rtol=1e-5)
    assert steps[np.argmax(values)] == 4000
    np.testing.assert_allclose(values.max(), (512 * 4000) ** -0.5, rtol=1e-6)
    assert np.all(np.diff(values[:4000]) > 0)  # steps 1..4000 rise
    assert np.all(np.diff(values[3999:]) < 0)  # steps 4000.. fall


def test_config_round_trip():
    schedule = WarmupSchedule(256, warmup_steps=100, scale=2.0)
    assert schedule.get_config() == {"d_model": 256, "warmup_steps": 100, "scale": 2.0}
    restored = WarmupSchedule.from_config(schedule.get_config())
    assert restored.get_config() == schedule.get_config()
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert isinstance(revived, WarmupSchedule)
    assert revived.get_config() == schedule.get_config()


def test_in_adam_after_apply_gradients():
    optimizer = keras.optimizers.Adam(learning_rate=WarmupSchedule(512, 4000))
    variable = keras.Variable(np.ones(3, np.float32))
    for _ in range(5):
        optimizer.apply_gradients([(keras.ops.ones(3), variable)])
    assert int(optimizer.iterations) == 5
    np.testing.assert_allclose(float(optimizer.learning_rate), reference(5), rtol=1e-6)
