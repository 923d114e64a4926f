"""Source ids, the rule that training, `tf_transformer.decoding.text` and the SavedModel export share: a
sentence's tokens, cut to the first `max_length - 1` if longer, then EOS.

It has two forms, one per kind of caller: `truncate_source` on one NumPy row (eager Python code), and
`truncate_source_ragged` on a `tf.RaggedTensor` batch (graph code: the tf.data pipeline and the SavedModel).
Both cut at `source_token_limit(max_length)`; tests/data/test_source_ids.py checks that they agree.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def source_token_limit(max_length: int) -> int:
    """The most tokens of a sentence a model of `max_length` positions sees: `max_length - 1`, room for the EOS."""
    return max_length - 1


def truncate_source(tokens, max_length: int, eos_id: int) -> np.ndarray:
    """Source ids of one sentence, eager form: int32 `[min(len(tokens), max_length - 1) + 1]`, the first
    `max_length - 1` of the 1-D `tokens`, then `eos_id`."""
    tokens = np.asarray(tokens)[: source_token_limit(max_length)]
    return np.concatenate([tokens.astype(np.int32), np.array([eos_id], np.int32)])


def truncate_source_ragged(tokens: tf.RaggedTensor, max_length: int, eos_id: int) -> tf.RaggedTensor:
    """Source ids of a ragged `[batch, (tokens)]` batch, graph form (core TensorFlow ops: it serves SavedModels)."""
    return end_with_eos(tokens[:, : source_token_limit(max_length)], eos_id)


def end_with_eos(tokens: tf.RaggedTensor, eos_id: int) -> tf.RaggedTensor:
    """Ragged `[batch, (tokens)]` with `eos_id` appended to every row (rows that already fit: no cut)."""
    return _add_to_every_row(tokens, eos_id, at_end=True)


def start_with_bos(tokens: tf.RaggedTensor, bos_id: int) -> tf.RaggedTensor:
    """Ragged `[batch, (tokens)]` with `bos_id` put before every row's first token."""
    return _add_to_every_row(tokens, bos_id, at_end=False)


def _add_to_every_row(tokens: tf.RaggedTensor, token_id: int, at_end: bool) -> tf.RaggedTensor:
    """`token_id` added at the end or the start of every row, in about 30 graph ops on the flat values.

    `tf.concat` of ragged tensors (the obvious way) builds about 105 (its row ids, checks), which every tf.data
    map traces anew and every batch runs. Here the new splits move row r's start r places on; the new
    tokens take each row's last (or first) place, and the old values fill the other places in their order.
    """
    splits = tokens.row_splits
    new_splits = splits + tf.range(tf.size(splits, out_type=splits.dtype), dtype=splits.dtype)
    added = new_splits[1:] - 1 if at_end else new_splits[:-1]
    size = tf.stack([tf.cast(new_splits[-1], tf.int64)])  # a stacked scalar: the values' static rank stays known
    is_added = tf.scatter_nd(tf.cast(added, tf.int64)[:, None], tf.ones_like(added, tokens.dtype), size)
    values = tf.scatter_nd(tf.where(tf.equal(is_added, 0)), tokens.flat_values, size) + is_added * token_id
    return tf.RaggedTensor.from_row_splits(values, new_splits, validate=False)
