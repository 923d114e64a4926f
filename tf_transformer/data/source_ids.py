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
    """Source ids of a batch, graph form: ragged `[batch, (tokens)]` -> each row's first `max_length - 1`
    tokens, then `eos_id` (core TensorFlow ops only, so it serves in a SavedModel)."""
    return end_with_eos(tokens[:, : source_token_limit(max_length)], eos_id)


def end_with_eos(tokens: tf.RaggedTensor, eos_id: int) -> tf.RaggedTensor:
    """Ragged `[batch, (tokens)]` with `eos_id` appended to every row (rows that already fit: no cut)."""
    column = tf.fill([tokens.nrows(), 1], tf.constant(eos_id, tokens.dtype))
    eos = tf.RaggedTensor.from_tensor(column, row_splits_dtype=tokens.row_splits.dtype)
    return tf.concat([tokens, eos], axis=1)
