"""Tests of the sinusoidal position encoding (against a loop-by-loop NumPy reference) and learned positions."""

import math

import keras
import numpy as np
import pytest
from keras.ops import convert_to_numpy

from tf_transformer.layers import LearnedPositionEmbedding, SinusoidalPositionEncoding, sinusoidal_table

TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def reference_table(max_length, d_model):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))."""
    table = np.zeros((max_length, d_model))
    for pos in range(max_length):
        for i in range((d_model + 1) // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            table[pos, 2 * i] = math.sin(angle)
            if 2 * i + 1 < d_model:
                table[pos, 2 * i + 1] = math.cos(angle)
    return table


@pytest.mark.parametrize("max_length,d_model", [(50, 8), (20, 7), (3, 1), (64, 16)])
def test_sinusoidal_table_matches_paper(max_length, d_model):
    table = sinusoidal_table(max_length, d_model)
    assert table.shape == (max_length, d_model)
    assert table.dtype == np.float32
    np.testing.assert_allclose(table, reference_table(max_length, d_model), **TOLERANCE)


@pytest.mark.parametrize("d_model", [8, 7])
def test_sinusoidal_layer_adds_table(d_model):
    inputs = np.random.default_rng(0).normal(size=(2, 5, d_model)).astype(np.float32)
    layer = SinusoidalPositionEncoding(max_length=12, d_model=d_model)
    np.testing.assert_allclose(convert_to_numpy(layer(inputs)), inputs + reference_table(12, d_model)[:5], **TOLERANCE)
    assert layer.trainable_weights == []


@pytest.mark.parametrize("start_index", [0, 3, 7])
def test_sinusoidal_start_index_offsets_rows(start_index):
    layer = SinusoidalPositionEncoding(max_length=10, d_model=6)
    output = convert_to_numpy(layer(np.zeros((1, 3, 6), np.float32), start_index=start_index))
    np.testing.assert_allclose(output[0], reference_table(10, 6)[start_index : start_index + 3], **TOLERANCE)
    # A tensor start index (as in a decoding loop) gives the same rows.
    index = keras.ops.convert_to_tensor(start_index)
    tensor = convert_to_numpy(layer(np.zeros((1, 3, 6), np.float32), start_index=index))
    np.testing.assert_allclose(tensor, output, **TOLERANCE)


def position_layers():
    return [SinusoidalPositionEncoding(max_length=6, d_model=4), LearnedPositionEmbedding(max_length=6, d_model=4)]


@pytest.mark.parametrize("layer", position_layers(), ids=lambda layer: type(layer).__name__)
def test_too_long_static_input_raises_value_error(layer):
    with pytest.raises(ValueError, match="max_length"):
        layer(np.zeros((1, 7, 4), np.float32))
    with pytest.raises(ValueError, match="max_length"):
        layer(np.zeros((1, 3, 4), np.float32), start_index=4)
    # Exactly max_length is fine.
    assert layer(np.zeros((1, 6, 4), np.float32)).shape == (1, 6, 4)


@pytest.mark.tensorflow_only  # a tf.function's run-time check: the serving graph (tft.export) is TensorFlow's
@pytest.mark.parametrize("layer", position_layers(), ids=lambda layer: type(layer).__name__)
def test_too_long_dynamic_input_raises_in_tf_function(layer):
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, None, 4], tf.float32), tf.TensorSpec([], tf.int32)])
    def apply(inputs, start_index):
        return layer(inputs, start_index=start_index)

    assert apply(tf.zeros((1, 6, 4)), tf.constant(0)).shape == (1, 6, 4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_length"):
        apply(tf.zeros((1, 7, 4)), tf.constant(0))
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_length"):
        apply(tf.zeros((1, 2, 4)), tf.constant(5))


@pytest.mark.parametrize("start_index", [0, 2])
def test_learned_position_embedding_adds_its_weights(start_index):
    layer = LearnedPositionEmbedding(max_length=9, d_model=4)
    inputs = np.random.default_rng(1).normal(size=(2, 5, 4)).astype(np.float32)
    output = convert_to_numpy(layer(inputs, start_index=start_index))
    table = convert_to_numpy(layer.position_embeddings)
    assert np.abs(table).sum() > 0
    np.testing.assert_allclose(output, inputs + table[start_index : start_index + 5], **TOLERANCE)


def test_learned_position_embedding_weights_are_trainable(gradient):
    layer = LearnedPositionEmbedding(max_length=9, d_model=4)
    inputs = np.zeros((2, 3, 4), np.float32)
    layer.build(inputs.shape)
    assert len(layer.trainable_weights) == 1
    assert sum(int(np.prod(w.shape)) for w in layer.trainable_weights) == 9 * 4
    gradient = gradient(lambda: keras.ops.sum(layer(inputs)), layer.trainable_weights[0])
    # Only the rows that were used get a gradient (of 2: the batch size).
    np.testing.assert_allclose(gradient[:3], np.full((3, 4), 2.0))
    np.testing.assert_allclose(gradient[3:], 0.0)
