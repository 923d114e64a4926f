"""Tests of TokenEmbedding: scaled lookup, the tied output projection, and gradients through both."""

import keras
import numpy as np
import pytest
from keras.ops import convert_to_numpy

from tf_transformer.layers import TokenEmbedding

TOLERANCE = dict(rtol=1e-5, atol=1e-5)
IDS = np.array([[5, 7, 0, 3], [1, 1, 9, 0]], dtype=np.int32)


@pytest.mark.parametrize("scale", [True, False])
def test_lookup_is_scaled_rows_of_the_matrix(scale):
    layer = TokenEmbedding(vocab_size=10, d_model=6, scale=scale)
    output = convert_to_numpy(layer(IDS))
    matrix = convert_to_numpy(layer.embeddings)
    assert matrix.shape == (10, 6)
    factor = np.sqrt(6.0) if scale else 1.0
    np.testing.assert_allclose(output, matrix[IDS] * factor, **TOLERANCE)


def test_int64_ids_work():
    layer = TokenEmbedding(vocab_size=10, d_model=4)
    np.testing.assert_allclose(convert_to_numpy(layer(IDS.astype(np.int64))), convert_to_numpy(layer(IDS)))


def test_project_is_matmul_with_transposed_matrix():
    layer = TokenEmbedding(vocab_size=10, d_model=6)
    layer.build()
    x = np.random.default_rng(0).normal(size=(2, 3, 6)).astype(np.float32)
    logits = convert_to_numpy(layer.project(x))
    assert logits.shape == (2, 3, 10)
    np.testing.assert_allclose(logits, x @ convert_to_numpy(layer.embeddings).T, **TOLERANCE)


def test_project_builds_an_unbuilt_layer():
    layer = TokenEmbedding(vocab_size=5, d_model=4)
    assert layer.project(np.ones((1, 2, 4), np.float32)).shape == (1, 2, 5)
    assert layer.built


def test_gradient_reaches_the_matrix_from_lookup_and_projection(gradient):
    layer = TokenEmbedding(vocab_size=10, d_model=4, scale=False)
    layer.build()
    ids = np.array([[2, 3]], np.int32)
    assert layer.trainable_weights == [layer.embeddings]
    gradient = gradient(lambda: keras.ops.sum(layer.project(layer(ids))), layer.embeddings)
    # loss = sum_t sum_v e_{id_t} . e_v, so d loss / d e_w = count(w in ids) * sum_v e_v  (through the lookup)
    #                                                     + sum_t e_{id_t}              (through the projection).
    matrix = convert_to_numpy(layer.embeddings)
    counts = np.bincount(ids.ravel(), minlength=10)[:, None]
    through_lookup = counts * matrix.sum(axis=0, keepdims=True)
    through_projection = matrix[ids.ravel()].sum(axis=0, keepdims=True)
    expected = through_lookup + through_projection
    np.testing.assert_allclose(gradient, expected, **TOLERANCE)


def test_gradient_through_lookup_only_touches_used_rows(gradient):
    layer = TokenEmbedding(vocab_size=10, d_model=4)
    layer.build()
    gradient = gradient(lambda: keras.ops.sum(layer(np.array([[2, 2, 5]], np.int32))), layer.embeddings)
    expected = np.zeros((10, 4))
    expected[2], expected[5] = 2 * np.sqrt(4.0), np.sqrt(4.0)
    np.testing.assert_allclose(gradient, expected, **TOLERANCE)
