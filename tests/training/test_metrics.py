"""MaskedAccuracy against a NumPy count of correct non-padding tokens."""

import keras
import numpy as np

from tf_transformer.training import MaskedAccuracy


def reference(batches):
    correct = total = 0.0
    for y_true, logits in batches:
        real = y_true != 0
        correct += np.sum((np.argmax(logits, -1) == y_true) & real)
        total += np.sum(real)
    return correct / total


def make_batches(seed=0, vocab=5):
    rng = np.random.default_rng(seed)
    batches = []
    for batch, length in [(3, 6), (2, 4)]:
        y_true = rng.integers(1, vocab, size=(batch, length))
        y_true[:, length - 2 :] = 0  # padding at the end of each sequence
        y_true[0, 1:] = 0
        logits = rng.normal(size=(batch, length, vocab)).astype(np.float32)
        # make the padding positions "correct" so that counting them would change the result
        logits[..., 0] = np.where(y_true == 0, 10.0, logits[..., 0])
        batches.append((y_true, logits))
    return batches


def test_accuracy_over_two_batches():
    batches = make_batches()
    metric = MaskedAccuracy()
    for y_true, logits in batches:
        metric.update_state(y_true, logits)
    np.testing.assert_allclose(float(metric.result()), reference(batches), rtol=1e-6)
    assert 0.0 < float(metric.result()) < 1.0


def test_sample_weight_per_sequence():
    y_true, logits = make_batches()[0]
    weights = np.array([0.0, 1.0, 2.0], np.float32)
    metric = MaskedAccuracy()
    metric.update_state(y_true, logits, sample_weight=weights)
    real = (y_true != 0) * weights[:, None]
    expected = np.sum((np.argmax(logits, -1) == y_true) * real) / np.sum(real)
    np.testing.assert_allclose(float(metric.result()), expected, rtol=1e-6)


def test_reset_and_empty():
    metric = MaskedAccuracy()
    assert float(metric.result()) == 0.0
    y_true, logits = make_batches()[0]
    metric.update_state(y_true, logits)
    metric.reset_state()
    assert float(metric.result()) == 0.0
    assert float(metric.correct) == 0.0 and float(metric.total) == 0.0
    metric.update_state(np.zeros((2, 3), np.int32), np.ones((2, 3, 4), np.float32))  # all padding
    assert float(metric.result()) == 0.0


def test_config_round_trip():
    metric = MaskedAccuracy(pad_id=3, name="acc")
    restored = MaskedAccuracy.from_config(metric.get_config())
    assert restored.pad_id == 3 and restored.name == "acc"
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(metric))
    assert isinstance(revived, MaskedAccuracy)
    assert revived.get_config() == metric.get_config()
