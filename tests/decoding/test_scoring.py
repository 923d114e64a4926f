"""score_ids: a teacher-forced pass gives the log-probabilities the decoders report for their own outputs."""

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.decoding import DecodingSettings, beam_search, greedy_decode, sample_decode, score_ids
from tf_transformer.decoding.scoring import PairScore, format_scores


def hypotheses_of(sources, ids):
    """Each hypothesis of `ids` `[batch, n_best, T]` as a row, beside its sentence's source."""
    ids = np.asarray(ids)
    batch, n_best, length = ids.shape
    return np.repeat(sources, n_best, axis=0), ids.reshape(batch * n_best, length)


@pytest.mark.parametrize("min_decode_length", [0, 4])
def test_beam_search_scores_are_score_ids_of_its_hypotheses(tiny_model, helpers, min_decode_length):
    # length_penalty=0: the penalty is 1, so beam search reports raw log-probability sums. It forbids padding
    # always and EOS before min_decode_length without renormalising; the scorer must agree either way.
    sources = helpers.make_sources([7, 5, 9], seed=3)
    ids, scores = beam_search(
        tiny_model,
        sources,
        DecodingSettings(
            beam_size=4, length_penalty=0.0, n_best=3, min_decode_length=min_decode_length, max_decode_length=8
        ),
    )
    helpers.check_output_convention(ids)
    rows_source, rows_target = hypotheses_of(sources, ids)
    result = score_ids(tiny_model, rows_source, rows_target)
    np.testing.assert_allclose(result.log_probs.numpy(), scores.numpy().reshape(-1), atol=1e-4)
    np.testing.assert_array_equal(result.num_tokens.numpy(), [len(helpers.strip(row)) for row in rows_target])
    for hypotheses in np.asarray(ids):  # a sentence's hypotheses differ: n_best real comparisons each
        assert len(set(map(tuple, hypotheses))) == len(hypotheses)


def test_with_a_length_penalty_beam_scores_are_score_ids_over_the_penalty(tiny_model, helpers):
    sources = helpers.make_sources([6, 8], seed=4)
    ids, scores = beam_search(
        tiny_model, sources, DecodingSettings(beam_size=3, length_penalty=0.6, n_best=2, max_decode_length=7)
    )
    rows_source, rows_target = hypotheses_of(sources, ids)
    result = score_ids(tiny_model, rows_source, rows_target)
    penalties = helpers.length_penalty(result.num_tokens.numpy(), 0.6)
    np.testing.assert_allclose(result.log_probs.numpy() / penalties, scores.numpy().reshape(-1), atol=1e-4)


def test_greedy_and_sampling_scores_are_score_ids_of_their_outputs(tiny_model, helpers):
    sources = helpers.make_sources([4, 9, 6, 3], seed=5)
    ids, scores = greedy_decode(tiny_model, sources, DecodingSettings(max_decode_length=10))
    result = score_ids(tiny_model, sources, ids)
    np.testing.assert_allclose(result.log_probs.numpy(), scores.numpy(), atol=1e-4)
    # Sampling reports the model's own log-probabilities, before temperature and top-k filtering.
    sampled, sampled_scores = sample_decode(
        tiny_model, sources, DecodingSettings(method="sample", temperature=1.5, top_k=5, seed=3, max_decode_length=10)
    )
    assert not np.array_equal(sampled.numpy(), ids.numpy())  # other outputs than greedy's
    result = score_ids(tiny_model, sources, sampled)
    np.testing.assert_allclose(result.log_probs.numpy(), sampled_scores.numpy(), atol=1e-4)


def test_score_ids_is_the_full_pass_log_probability_and_ignores_padding(tiny_model, helpers):
    sources = helpers.make_sources([5, 8], width=10, seed=6)
    targets = [[7, 9, 11, 2], [5, 30, 6, 12, 14, 8, 2]]
    padded = np.zeros((2, 9), np.int32)  # wider than either target: padding after every EOS
    for row, target in enumerate(targets):
        padded[row, : len(target)] = target
    result = score_ids(tiny_model, sources, padded)
    for row, target in enumerate(targets):
        source = sources[row][sources[row] != 0]
        reference = helpers.full_pass_log_probs(tiny_model, source, target)[np.arange(len(target)), target]
        np.testing.assert_allclose(result.token_log_probs.numpy()[row, : len(target)], reference, atol=1e-4)
        assert result.token_log_probs.numpy()[row, len(target) :].tolist() == [0.0] * (9 - len(target))
        assert result.log_probs.numpy()[row] == pytest.approx(reference.sum(), abs=1e-4)
        assert result.num_tokens.numpy()[row] == len(target)
        alone = score_ids(tiny_model, source[np.newaxis], np.array([target]))
        assert alone.log_probs.numpy()[0] == pytest.approx(result.log_probs.numpy()[row], abs=1e-4)


def test_score_ids_traces_with_unknown_shapes_and_refuses_a_flat_target(tiny_model, helpers):
    spec = tf.TensorSpec([None, None], tf.int32)
    traced = tf.function(lambda s, t: score_ids(tiny_model, s, t).log_probs, input_signature=[spec, spec])
    sources = helpers.make_sources([5, 3], seed=7)
    targets = np.array([[4, 5, 2], [6, 2, 0]], np.int32)
    np.testing.assert_allclose(traced(sources, targets), score_ids(tiny_model, sources, targets).log_probs, atol=1e-5)
    with pytest.raises(ValueError, match="target_ids: expected int ids of shape"):
        score_ids(tiny_model, sources, np.array([4, 5, 2]))


def test_format_scores_writes_three_tab_separated_fields():
    assert format_scores([PairScore(-12.3456, 12), PairScore(-0.5, 1)]) == [
        "-12.345600\t-1.028800\t12",
        "-0.500000\t-0.500000\t1",
    ]
