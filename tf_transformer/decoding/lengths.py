"""How long the outputs may be: the length plan of every decoder, the length penalty, output lengths."""

from __future__ import annotations

import math
from typing import NamedTuple

import tensorflow as tf


class LengthPlan(NamedTuple):
    """How long the outputs may be.

    buffer_length: width of the output and self-attention cache buffers (a Python int when it is known
        while tracing, which XLA needs; else an int32 scalar tensor).
    caps: int32 `[batch]`, the most tokens (EOS included) each sentence may emit; EOS is forced at the last.
    num_steps: int32 scalar, the loop bound: the largest cap.
    min_length: int32 `[batch]`, the fewest tokens (EOS included) each sentence emits: EOS is forbidden
        before it (never above the cap, so the cap's forced EOS stays possible).
    """

    buffer_length: object
    caps: tf.Tensor
    num_steps: tf.Tensor
    min_length: tf.Tensor


def as_source_ids(source_ids, name: str = "source_ids", length: str = "source_len"):
    """int32 `[batch, source_len]` source ids (numpy int64 arrays are common); with `name` and `length`, the same
    for other ids (`target_ids`, `[batch, target_len]`), a ValueError naming them."""
    source_ids = tf.convert_to_tensor(source_ids)
    if source_ids.dtype != tf.int32:
        source_ids = tf.cast(source_ids, tf.int32)
    if source_ids.shape.rank is not None and source_ids.shape.rank != 2:
        raise ValueError(
            f"{name}: expected int ids of shape [batch, {length}], got shape {source_ids.shape}. "
            f"Fix: add a batch dimension, e.g. {name}[None]."
        )
    return source_ids


def plan_lengths(
    config,
    source_ids,
    max_decode_length,
    extra_decode_length,
    min_decode_length=0,
    max_decode_length_ratio=1.0,
    prefix=None,
) -> LengthPlan:
    """The output length rule shared by all decoders (see the package docstring).

    Without `max_decode_length`, a sentence's cap is `floor(max_decode_length_ratio * source_length) +
    extra_decode_length` (fairseq's max_len_a * src_len + max_len_b), source_length counting its non-padding
    ids (EOS included). With a `prefix` (`TargetPrefix`), a cap is at least the sentence's prefix + EOS. Always
    at most `config.max_length`.
    """
    batch_size = tf.shape(source_ids)[0]
    ratio = float(max_decode_length_ratio)
    if max_decode_length is not None:
        if tf.is_tensor(max_decode_length):
            buffer_length = tf.maximum(tf.minimum(tf.cast(max_decode_length, tf.int32), config.max_length), 1)
        else:
            buffer_length = max(min(int(max_decode_length), config.max_length), 1)
        caps = tf.fill([batch_size], tf.cast(buffer_length, tf.int32))
    else:
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, config.pad_id), tf.int32), axis=1)
        caps = _relative_cap(lengths, ratio, extra_decode_length)
        # The buffers are sized from the padded source length: it is static under XLA, where a shape may not
        # depend on the data, and equals the longest source whenever the batch was padded to its longest.
        padded_length = source_ids.shape[1]
        if padded_length is not None:
            longest = int(math.floor(ratio * padded_length)) + int(extra_decode_length)
            buffer_length = max(min(longest, config.max_length), 1)
        else:
            buffer_length = tf.maximum(
                tf.minimum(_relative_cap(tf.shape(source_ids)[1], ratio, extra_decode_length), config.max_length), 1
            )
    if prefix is not None:
        # Room for the whole prefix and an EOS (within max_length): a cap never cuts a prefix.
        caps = tf.maximum(caps, prefix.lengths + 1)
        width = prefix.ids.shape[1]  # the prefix columns + the extra 0 column of TargetPrefix
        if isinstance(buffer_length, int) and width is not None:
            buffer_length = max(buffer_length, min(width, config.max_length))
        else:
            buffer_length = tf.maximum(buffer_length, tf.minimum(tf.shape(prefix.ids)[1], config.max_length))
    # Never beyond the buffer (float rounding of the ratio may not make a cap exceed it) nor max_length.
    caps = tf.maximum(tf.minimum(tf.minimum(caps, buffer_length), config.max_length), 1)
    num_steps = tf.reduce_max(tf.concat([caps, [0]], axis=0))  # 0 for an empty batch
    return LengthPlan(buffer_length, caps, num_steps, tf.minimum(caps, int(min_decode_length)))


def _relative_cap(lengths, ratio, extra):
    """floor(ratio * lengths) + extra, int32, computed in float64 (as Python computes the static buffer width)."""
    if ratio == 1.0:
        return lengths + int(extra)
    scaled = tf.floor(tf.cast(lengths, tf.float64) * ratio)
    return tf.cast(scaled, tf.int32) + int(extra)


def length_penalty(length, alpha):
    """Wu et al. (2016): ((5 + length) / 6) ** alpha, float32; `length` counts emitted tokens with EOS."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, float(alpha))


def output_lengths(ids, pad_id=0):
    """Number of emitted tokens (EOS included) of ids `[..., T]` written by the decoders."""
    return tf.reduce_sum(tf.cast(tf.not_equal(ids, pad_id), tf.int32), axis=-1)
