"""Tests of FeedForward against the NumPy reference max(0, x W1 + b1) W2 + b2."""

import math

import numpy as np
import pytest
from keras.ops import convert_to_numpy

from tf_transformer.layers import FeedForward

TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def randomized(layer, inputs, seed=0):
    layer(inputs)
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(rng.normal(scale=0.5, size=weight.shape).astype(np.float32))
    return layer


def dense_weights(layer):
    return (
        convert_to_numpy(layer.inner.kernel),
        convert_to_numpy(layer.inner.bias),
        convert_to_numpy(layer.outer.kernel),
        convert_to_numpy(layer.outer.bias),
    )


def gelu(x):  # the exact (erf) form, Keras' default
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / np.sqrt(2.0)))


def test_relu_feed_forward_matches_reference():
    x = np.random.default_rng(1).normal(size=(2, 3, 4)).astype(np.float32)
    layer = randomized(FeedForward(d_model=4, d_ff=16), x)
    w1, b1, w2, b2 = dense_weights(layer)
    assert w1.shape == (4, 16) and w2.shape == (16, 4)
    assert all(np.abs(b).sum() > 0 for b in (b1, b2))
    expected = np.maximum(0.0, x @ w1 + b1) @ w2 + b2
    np.testing.assert_allclose(convert_to_numpy(layer(x)), expected, **TOLERANCE)


def test_acts_on_each_position_independently():
    x = np.random.default_rng(2).normal(size=(1, 5, 4)).astype(np.float32)
    layer = randomized(FeedForward(d_model=4, d_ff=8), x)
    full = convert_to_numpy(layer(x))
    for t in range(5):
        np.testing.assert_allclose(convert_to_numpy(layer(x[:, t : t + 1])), full[:, t : t + 1], **TOLERANCE)


@pytest.mark.parametrize("activation,reference", [("gelu", gelu), ("relu", lambda h: np.maximum(h, 0))])
def test_activation_option(activation, reference):
    x = np.random.default_rng(3).normal(size=(2, 3, 4)).astype(np.float32)
    layer = randomized(FeedForward(d_model=4, d_ff=8, activation=activation), x)
    w1, b1, w2, b2 = dense_weights(layer)
    expected = reference((x @ w1 + b1).astype(np.float64)) @ w2 + b2
    np.testing.assert_allclose(convert_to_numpy(layer(x)), expected, **TOLERANCE)


def test_activation_dropout_drops_inner_activations_in_training_only():
    # With the outer projection the identity, the output is the dropped inner activations themselves: each is
    # either 0 or max(0, x W1 + b1) / (1 - rate).
    rate = 0.5
    x = np.random.default_rng(4).normal(size=(4, 6, 8)).astype(np.float32)
    layer = randomized(FeedForward(d_model=8, d_ff=8, activation_dropout=rate), x)
    layer.outer.kernel.assign(np.eye(8, dtype=np.float32))
    layer.outer.bias.assign(np.zeros(8, np.float32))
    w1, b1, _, _ = dense_weights(layer)
    hidden = np.maximum(0.0, x @ w1 + b1)
    np.testing.assert_allclose(convert_to_numpy(layer(x, training=False)), hidden, **TOLERANCE)
    dropped = convert_to_numpy(layer(x, training=True))
    kept = ~np.isclose(dropped, 0.0, atol=1e-6)
    np.testing.assert_allclose(dropped[kept], hidden[kept] / (1 - rate), **TOLERANCE)
    active = hidden > 1e-3
    assert 0.3 < (kept & active).sum() / active.sum() < 0.7  # about half the active units survive
