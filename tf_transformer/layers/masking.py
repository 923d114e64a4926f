"""Attention masks, with one convention for the whole package.

A mask is a boolean tensor broadcastable to the attention logits `[batch, num_heads, query_len, key_len]`,
**True where the query may attend to the key**. Masks combine with logical AND (`combine_masks`).
`MultiHeadAttention` turns a False into a large finite negative logit (`mask_value`) before a float32
softmax, so a fully masked row gives a uniform distribution, never NaN.
"""

from __future__ import annotations

import tensorflow as tf


def padding_mask(token_ids, pad_id: int = 0):
    """True for real tokens: `[batch, length]` ids -> `[batch, 1, 1, length]` (keys that may be attended)."""
    return tf.not_equal(token_ids, pad_id)[:, tf.newaxis, tf.newaxis, :]


def look_ahead_mask(query_length, key_length=None, query_offset=0):
    """True where key position j <= query position i: `[1, 1, query_length, key_length]`.

    Query i sits at absolute position `query_offset + i` (the decode step when keys come from a cache).
    """
    key_length = query_length if key_length is None else key_length
    query_positions = tf.range(query_length) + query_offset
    key_positions = tf.range(key_length)
    return (key_positions[tf.newaxis, :] <= query_positions[:, tf.newaxis])[tf.newaxis, tf.newaxis]


def window_mask(query_length, key_length, window: int, query_offset=0):
    """True where |i - j| <= window (the paper's restricted self-attention): `[1, 1, query_len, key_len]`."""
    query_positions = tf.range(query_length) + query_offset
    key_positions = tf.range(key_length)
    distance = tf.abs(query_positions[:, tf.newaxis] - key_positions[tf.newaxis, :])
    return (distance <= window)[tf.newaxis, tf.newaxis]


def combine_masks(*masks):
    """Logical AND of the masks that are not None; None when all are None."""
    result = None
    for mask in masks:
        if mask is None:
            continue
        result = mask if result is None else tf.logical_and(result, mask)
    return result


def mask_value(dtype) -> float:
    """The finite logit of masked positions, -1e9 or half the dtype's minimum: -inf would turn a fully masked
    row into NaN, and -1e9 overflows to -inf in float16."""
    dtype = tf.as_dtype(dtype)
    return max(-1e9, float(dtype.min) / 2)
