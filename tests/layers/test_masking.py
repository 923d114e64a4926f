"""Tests of tf_transformer.layers.masking against small NumPy references (True = may attend)."""

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.layers import masking


def reference_look_ahead(query_length, key_length, query_offset=0):
    mask = np.zeros((query_length, key_length), dtype=bool)
    for i in range(query_length):
        for j in range(key_length):
            mask[i, j] = j <= i + query_offset
    return mask[np.newaxis, np.newaxis]


def reference_window(query_length, key_length, window, query_offset=0):
    mask = np.zeros((query_length, key_length), dtype=bool)
    for i in range(query_length):
        for j in range(key_length):
            mask[i, j] = abs(i + query_offset - j) <= window
    return mask[np.newaxis, np.newaxis]


def test_padding_mask_marks_real_tokens():
    ids = np.array([[5, 3, 0, 0], [7, 0, 2, 0]], dtype=np.int32)
    mask = masking.padding_mask(ids).numpy()
    assert mask.shape == (2, 1, 1, 4)
    assert mask.dtype == np.bool_
    np.testing.assert_array_equal(mask, (ids != 0)[:, None, None, :])


def test_padding_mask_with_other_pad_id():
    ids = np.array([[1, 4, 1]], dtype=np.int32)
    np.testing.assert_array_equal(masking.padding_mask(ids, pad_id=1).numpy(), np.array([[[[False, True, False]]]]))


@pytest.mark.parametrize(
    "query_length,key_length,query_offset", [(4, None, 0), (3, 5, 0), (2, 6, 3), (1, 4, 2), (5, 3, 0)]
)
def test_look_ahead_mask(query_length, key_length, query_offset):
    mask = masking.look_ahead_mask(query_length, key_length, query_offset).numpy()
    expected = reference_look_ahead(query_length, key_length or query_length, query_offset)
    assert mask.shape == expected.shape
    np.testing.assert_array_equal(mask, expected)


def test_look_ahead_mask_with_tensor_arguments():
    mask = masking.look_ahead_mask(tf.constant(2), tf.constant(5), tf.constant(1)).numpy()
    np.testing.assert_array_equal(mask, reference_look_ahead(2, 5, 1))


@pytest.mark.parametrize(
    "query_length,key_length,window,query_offset",
    [(5, 5, 1, 0), (5, 5, 0, 0), (3, 7, 2, 2), (1, 6, 1, 4), (4, 4, 10, 0)],
)
def test_window_mask(query_length, key_length, window, query_offset):
    mask = masking.window_mask(query_length, key_length, window, query_offset).numpy()
    np.testing.assert_array_equal(mask, reference_window(query_length, key_length, window, query_offset))


def test_combine_masks_none_handling():
    assert masking.combine_masks() is None
    assert masking.combine_masks(None, None) is None
    only = tf.constant([[True, False]])
    assert masking.combine_masks(None, only, None) is only


def test_combine_masks_is_logical_and_with_broadcasting():
    ids = np.array([[4, 2, 0], [1, 0, 0]], dtype=np.int32)
    combined = masking.combine_masks(masking.padding_mask(ids), None, masking.look_ahead_mask(3)).numpy()
    expected = (ids != 0)[:, None, None, :] & reference_look_ahead(3, 3)
    assert combined.shape == (2, 1, 3, 3)
    np.testing.assert_array_equal(combined, expected)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16, "float16"])
def test_mask_value_is_finite_and_very_negative(dtype):
    value = masking.mask_value(dtype)
    as_dtype = tf.cast(value, dtype)
    assert np.isfinite(float(as_dtype.numpy()))
    assert value < -1e4
    # Adding a typical logit to it must not overflow either.
    assert np.isfinite(float((as_dtype - tf.cast(10.0, dtype)).numpy()))


def test_mask_value_float32_is_minus_1e9():
    assert masking.mask_value(tf.float32) == -1e9


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32])
def test_softmax_of_fully_masked_row_has_no_nan(dtype):
    logits = tf.constant([[0.5, -2.0, 3.0, 1.0], [0.5, -2.0, 3.0, 1.0]], dtype)
    mask = tf.constant([[False, False, False, False], [True, False, True, False]])
    masked = tf.where(mask, logits, tf.cast(masking.mask_value(dtype), dtype))
    weights = tf.nn.softmax(masked, axis=-1).numpy().astype(np.float32)
    assert not np.isnan(weights).any()
    np.testing.assert_allclose(weights[0], np.full(4, 0.25), atol=1e-3)
    row = np.exp(np.array([0.5, 3.0]) - 3.0)
    np.testing.assert_allclose(weights[1], [row[0] / row.sum(), 0, row[1] / row.sum(), 0], atol=1e-2)
