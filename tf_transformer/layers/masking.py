"""Attention masks, with one convention for the whole package.

A mask is a boolean tensor broadcastable to the attention logits `[batch, num_heads, query_len, key_len]`,
**True where the query may attend to the key**. Masks combine with logical AND (`combine_masks`).
`MultiHeadAttention` turns a False into a large finite negative logit (`mask_value`) before a float32
softmax, so a fully masked row gives a uniform distribution, never NaN.
"""

from __future__ import annotations

import keras
import ml_dtypes
from keras import ops


def padding_mask(token_ids, pad_id: int = 0):
    """True for real tokens: `[batch, length]` ids -> `[batch, 1, 1, length]` (keys that may be attended)."""
    return ops.not_equal(token_ids, pad_id)[:, None, None, :]


def look_ahead_mask(query_length, key_length=None, query_offset=0):
    """True where key position j <= query position i: `[1, 1, query_length, key_length]`.

    Query i sits at absolute position `query_offset + i` (the decode step when keys come from a cache).
    """
    key_length = query_length if key_length is None else key_length
    query_positions = ops.arange(query_length) + query_offset
    key_positions = ops.arange(key_length)
    return (key_positions[None, :] <= query_positions[:, None])[None, None]


def window_mask(query_length, key_length, window: int, query_offset=0):
    """True where |i - j| <= window (the paper's restricted self-attention): `[1, 1, query_len, key_len]`."""
    query_positions = ops.arange(query_length) + query_offset
    key_positions = ops.arange(key_length)
    distance = ops.abs(query_positions[:, None] - key_positions[None, :])
    return (distance <= window)[None, None]


def combine_masks(*masks):
    """Logical AND of the masks that are not None; None when all are None."""
    result = None
    for mask in masks:
        if mask is None:
            continue
        result = mask if result is None else ops.logical_and(result, mask)
    return result


def mask_value(dtype) -> float:
    """The finite logit of masked positions, -1e9 or half the dtype's minimum: -inf would turn a fully masked
    row into NaN, and -1e9 overflows to -inf in float16."""
    minimum = ml_dtypes.finfo(keras.backend.standardize_dtype(dtype)).min  # ml_dtypes: numpy has no bfloat16
    return max(-1e9, float(minimum) / 2)
