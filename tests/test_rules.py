"""tf_transformer.rules: the shared rules, and the callers that use them instead of their own copies."""

import inspect

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer import rules
from tf_transformer.decoding import beam_search, greedy_decode, sample_decode, translate, translate_texts
from tf_transformer.decoding.text import TextTranslator
from tf_transformer.export import TranslationModule, export_saved_model

ROWS = [[], [5], [5, 6, 7], [5, 6, 7, 8], [5, 6, 7, 8, 9, 10, 11]]


@pytest.mark.parametrize("max_length", [1, 2, 4, 5, 9])
def test_the_eager_and_graph_forms_of_the_source_rule_agree(max_length):
    eager = [rules.truncate_source(np.array(row, np.int32), max_length, eos_id=2) for row in ROWS]
    tokens = tf.ragged.constant(ROWS, dtype=tf.int32)
    graph = tf.function(lambda t: rules.truncate_source_ragged(t, max_length, 2))(tokens)
    assert graph.to_list() == [row.tolist() for row in eager]
    for row, ids in zip(ROWS, eager, strict=True):
        # The rule itself: the first max_length - 1 tokens, then EOS; never longer than max_length.
        assert ids.dtype == np.int32 and ids.tolist() == row[: max_length - 1] + [2]
        assert len(ids) <= max(max_length, 1)


def test_the_graph_form_keeps_the_row_splits_dtype():
    tokens = tf.RaggedTensor.from_row_lengths(tf.constant([5, 6, 7], tf.int32), tf.constant([2, 1], tf.int32))
    ids = rules.truncate_source_ragged(tokens, 3, 2)
    assert ids.row_splits.dtype == tf.int32 and ids.to_list() == [[5, 6, 2], [7, 2]]


def test_is_int():
    assert rules.is_int(3) and rules.is_int(np.int64(3))
    assert not rules.is_int(True) and not rules.is_int(3.0) and not rules.is_int("3")


def test_every_default_output_length_is_the_constant():
    functions = [
        beam_search, greedy_decode, sample_decode, translate, translate_texts, TextTranslator,
        TranslationModule, export_saved_model,
    ]  # fmt: skip
    for function in functions:
        default = inspect.signature(function).parameters["extra_decode_length"].default
        assert default == rules.EXTRA_DECODE_LENGTH, function.__name__


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(beam_size=0, length_penalty=0.6, n_best=1), r"beam_size: must be an int >= 1.*Fix"),
        (dict(beam_size=2, length_penalty=0.6, n_best=3), r"n_best: must be an int in \[1, beam_size=2\].*Fix"),
        (dict(beam_size=2, length_penalty=-1.0, n_best=1), r"length_penalty: .*Fix"),
    ],
)
def test_beam_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rules.check_beam_arguments(**kwargs)
    rules.check_beam_arguments(4, 0.6, 4)


def test_single_hypothesis():
    rules.check_single_hypothesis(2, "beam")
    rules.check_single_hypothesis(1, "greedy")
    with pytest.raises(ValueError, match="n_best: greedy decoding gives one hypothesis.*Fix"):
        rules.check_single_hypothesis(2, "greedy")


def test_length_arguments_name_the_default():
    with pytest.raises(ValueError, match=f"Fix: use e.g. {rules.EXTRA_DECODE_LENGTH}"):
        rules.check_length_arguments(None, -1)
