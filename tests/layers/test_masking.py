"""Tests of tf_transformer.layers.masking against small NumPy references (True = may attend)."""

import keras
import numpy as np
import pytest
from keras.ops import convert_to_numpy

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
    mask = convert_to_numpy(masking.padding_mask(ids))
    assert mask.shape == (2, 1, 1, 4)
    assert mask.dtype == np.bool_
    np.testing.assert_array_equal(mask, (ids != 0)[:, None, None, :])


def test_padding_mask_with_other_pad_id():
    ids = np.array([[1, 4, 1]], dtype=np.int32)
    np.testing.assert_array_equal(
        convert_to_numpy(masking.padding_mask(ids, pad_id=1)), np.array([[[[False, True, False]]]])
    )


@pytest.mark.parametrize(
    "query_length,key_length,query_offset", [(4, None, 0), (3, 5, 0), (2, 6, 3), (1, 4, 2), (5, 3, 0)]
)
def test_look_ahead_mask(query_length, key_length, query_offset):
    mask = convert_to_numpy(masking.look_ahead_mask(query_length, key_length, query_offset))
    expected = reference_look_ahead(query_length, key_length or query_length, query_offset)
    assert mask.shape == expected.shape
    np.testing.assert_array_equal(mask, expected)


def test_look_ahead_mask_with_tensor_arguments():
    mask = convert_to_numpy(masking.look_ahead_mask(*(keras.ops.convert_to_tensor(n) for n in (2, 5, 1))))
    np.testing.assert_array_equal(mask, reference_look_ahead(2, 5, 1))


@pytest.mark.parametrize(
    "query_length,key_length,window,query_offset",
    [(5, 5, 1, 0), (5, 5, 0, 0), (3, 7, 2, 2), (1, 6, 1, 4), (4, 4, 10, 0)],
)
def test_window_mask(query_length, key_length, window, query_offset):
    mask = convert_to_numpy(masking.window_mask(query_length, key_length, window, query_offset))
    np.testing.assert_array_equal(mask, reference_window(query_length, key_length, window, query_offset))


def test_combine_masks_none_handling():
    assert masking.combine_masks() is None
    assert masking.combine_masks(None, None) is None
    only = keras.ops.convert_to_tensor([[True, False]])
    assert masking.combine_masks(None, only, None) is only


def test_combine_masks_is_logical_and_with_broadcasting():
    ids = np.array([[4, 2, 0], [1, 0, 0]], dtype=np.int32)
    combined = convert_to_numpy(masking.combine_masks(masking.padding_mask(ids), None, masking.look_ahead_mask(3)))
    expected = (ids != 0)[:, None, None, :] & reference_look_ahead(3, 3)
    assert combined.shape == (2, 1, 3, 3)
    np.testing.assert_array_equal(combined, expected)


def as_float32(scalar):
    """A scalar tensor's value (cast first: NumPy has no bfloat16)."""
    return float(convert_to_numpy(keras.ops.cast(scalar, "float32")))


def backend_dtype(name):
    """The backend's own dtype object of a dtype name (tf.float16 under TensorFlow, torch.float16 under PyTorch)."""
    return keras.ops.convert_to_tensor(0, name).dtype


@pytest.mark.parametrize(
    "name,as_name", [("float32", False), ("float16", False), ("bfloat16", False), ("float16", True)]
)
def test_mask_value_is_finite_and_very_negative(name, as_name):
    value = masking.mask_value(name if as_name else backend_dtype(name))
    as_dtype = keras.ops.cast(value, name)
    assert np.isfinite(as_float32(as_dtype))
    assert value < -1e4
    # Adding a typical logit to it must not overflow either.
    assert np.isfinite(as_float32(as_dtype - keras.ops.cast(10.0, name)))


def test_mask_value_float32_is_minus_1e9():
    assert masking.mask_value(backend_dtype("float32")) == -1e9


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_softmax_of_fully_masked_row_has_no_nan(dtype):
    logits = keras.ops.convert_to_tensor([[0.5, -2.0, 3.0, 1.0], [0.5, -2.0, 3.0, 1.0]], dtype)
    mask = keras.ops.convert_to_tensor([[False, False, False, False], [True, False, True, False]])
    masked = keras.ops.where(mask, logits, keras.ops.cast(masking.mask_value(dtype), dtype))
    weights = convert_to_numpy(keras.ops.softmax(masked, axis=-1)).astype(np.float32)
    assert not np.isnan(weights).any()
    np.testing.assert_allclose(weights[0], np.full(4, 0.25), atol=1e-3)
    row = np.exp(np.array([0.5, 3.0]) - 3.0)
    np.testing.assert_allclose(weights[1], [row[0] / row.sum(), 0, row[1] / row.sum(), 0], atol=1e-2)
