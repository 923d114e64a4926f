"""tf_transformer.data.source_ids: the source rule's eager and graph forms agree."""

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.data.source_ids import end_with_eos, start_with_bos, truncate_source, truncate_source_ragged

ROWS = [[], [5], [5, 6, 7], [5, 6, 7, 8], [5, 6, 7, 8, 9, 10, 11]]


@pytest.mark.parametrize("max_length", [1, 2, 4, 5, 9])
def test_the_eager_and_graph_forms_of_the_source_rule_agree(max_length):
    eager = [truncate_source(np.array(row, np.int32), max_length, eos_id=2) for row in ROWS]
    tokens = tf.ragged.constant(ROWS, dtype=tf.int32)
    graph = tf.function(lambda t: truncate_source_ragged(t, max_length, 2))(tokens)
    assert graph.to_list() == [row.tolist() for row in eager]
    for row, ids in zip(ROWS, eager, strict=True):
        # The rule itself: the first max_length - 1 tokens, then EOS; never longer than max_length.
        assert ids.dtype == np.int32 and ids.tolist() == row[: max_length - 1] + [2]
        assert len(ids) <= max(max_length, 1)


def test_the_graph_form_keeps_the_row_splits_dtype():
    tokens = tf.RaggedTensor.from_row_lengths(tf.constant([5, 6, 7], tf.int32), tf.constant([2, 1], tf.int32))
    ids = truncate_source_ragged(tokens, 3, 2)
    assert ids.row_splits.dtype == tf.int32 and ids.to_list() == [[5, 6, 2], [7, 2]]


@pytest.mark.parametrize("splits_dtype", [tf.int32, tf.int64])
@pytest.mark.parametrize("rows", [ROWS, [[], []], [[7]], []])
def test_a_token_added_to_every_row_at_its_end_or_start_in_graph_mode(rows, splits_dtype):
    tokens = tf.RaggedTensor.from_row_lengths(
        tf.constant([token for row in rows for token in row], tf.int32),
        tf.constant([len(row) for row in rows], splits_dtype),
    )
    spec = tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1, row_splits_dtype=splits_dtype)
    with_eos = tf.function(lambda t: end_with_eos(t, 2), input_signature=[spec])(tokens)
    with_bos = tf.function(lambda t: start_with_bos(t, 1), input_signature=[spec])(tokens)
    assert with_eos.to_list() == [row + [2] for row in rows]
    assert with_bos.to_list() == [[1] + row for row in rows]
    assert with_eos.row_splits.dtype == with_bos.row_splits.dtype == splits_dtype
    # The static shape stays [batch, (tokens)]: graphs built on it (the export's decoding) are those of a known rank.
    traced = tf.function(lambda t: end_with_eos(t, 2)).get_concrete_function(spec).structured_outputs
    assert traced.shape.as_list() == [None, None] and traced.flat_values.shape.as_list() == [None]
