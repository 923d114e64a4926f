"""Beam search: reduction to greedy, scores against the full forward pass, length penalty, n-best, padding."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.decoding import DecodingSettings, beam_search, constraints, greedy_decode
from tf_transformer.decoding.beam_search import _beam_search_loop


@pytest.fixture(scope="module")
def greedy_reference(tiny_model):
    sources = np.array([[5, 9, 14, 30, 8, 2], [7, 30, 2, 0, 0, 0], [11, 4, 21, 7, 2, 0]], np.int32)
    return sources, greedy_decode(tiny_model, sources, DecodingSettings(max_decode_length="x+3"))


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_size_one_is_greedy(tiny_model, helpers, greedy_reference, alpha):
    sources, (greedy_ids, greedy_scores) = greedy_reference
    ids, scores = beam_search(
        tiny_model, sources, DecodingSettings(beam_size=1, length_penalty=alpha, max_decode_length="x+3")
    )
    np.testing.assert_array_equal(ids.numpy()[:, 0], greedy_ids.numpy())
    lengths = np.array([len(helpers.strip(row)) for row in greedy_ids.numpy()])
    np.testing.assert_allclose(scores[:, 0], greedy_scores / helpers.length_penalty(lengths, alpha), rtol=1e-6)


def test_the_beam_machinery_with_one_beam_and_no_penalty_is_greedy(tiny_model, greedy_reference):
    # The full search (tiling, top-k, cache reordering, finished set) reduces to greedy search when one
    # hypothesis is kept and EOS is only accepted from within the beam.
    sources, (greedy_ids, greedy_scores) = greedy_reference
    settings = DecodingSettings(beam_size=1, length_penalty=0.0, max_decode_length="x+3")
    ids, scores = _beam_search_loop(tiny_model, sources, settings)
    np.testing.assert_array_equal(ids.numpy()[:, 0], greedy_ids.numpy())
    np.testing.assert_allclose(scores[:, 0], greedy_scores, atol=1e-5)


def test_beam_scores_are_the_full_pass_scores_and_n_best_is_sorted_and_distinct(tiny_model, helpers):
    alpha, extra = 0.6, 3
    sources = helpers.make_sources([6, 3, 5], seed=9)
    ids, scores = beam_search(
        tiny_model,
        sources,
        DecodingSettings(beam_size=4, length_penalty=alpha, n_best=4, max_decode_length=f"x+{extra}"),
    )
    assert ids.shape == (3, 4, 6 + extra) and scores.shape == (3, 4)
    helpers.check_output_convention(ids)
    greedy_ids, greedy_scores = greedy_decode(tiny_model, sources, DecodingSettings(max_decode_length=f"x+{extra}"))
    for row, source in enumerate(sources):
        hypotheses = [helpers.strip(h) for h in ids[row].numpy()]
        assert len({tuple(h) for h in hypotheses}) == 4  # distinct
        assert np.all(np.diff(scores[row]) <= 0)  # best first
        for hypothesis, score in zip(hypotheses, scores[row].numpy(), strict=True):
            assert len(hypothesis) <= np.count_nonzero(source) + extra
            log_probs = helpers.full_pass_log_probs(tiny_model, source, hypothesis)
            expected = log_probs[np.arange(len(hypothesis)), hypothesis].sum()
            np.testing.assert_allclose(score, expected / helpers.length_penalty(len(hypothesis), alpha), atol=1e-4)
        # Never worse than greedy under the same (length-penalised) scoring.
        greedy_length = len(helpers.strip(greedy_ids[row]))
        assert scores[row, 0] >= greedy_scores[row] / helpers.length_penalty(greedy_length, alpha) - 1e-5


def test_the_length_penalty_decides_between_a_short_and_a_long_hypothesis(helpers):
    # Tokens: 0 pad, 1 BOS, 2 EOS, 3 "a", 4 "b". Per step, the same probabilities whatever the prefix.
    probabilities = np.full((6, 5), 1e-4)
    probabilities[0, 3] = 0.9  # a
    probabilities[1, [2, 4]] = [0.5, 0.45]  # then EOS (short) or b
    probabilities[2, 4] = 0.99  # b
    probabilities[3:, 2] = 0.99  # EOS
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    model = helpers.TableModel(np.log(probabilities), max_length=6)
    short, long = [3, 2], [3, 4, 4, 2]
    raw = {name: model.prefix_log_probs(h).sum() for name, h in (("short", short), ("long", long))}
    assert raw["short"] > raw["long"]
    for alpha, winner in ((0.0, short), (1.0, long)):
        expected = {n: raw[n] / helpers.length_penalty(len(h), alpha) for n, h in (("short", short), ("long", long))}
        assert (expected["long"] > expected["short"]) == (winner is long)  # the formula's verdict
        ids, scores = beam_search(
            model, np.array([[5, 2]]), DecodingSettings(beam_size=3, length_penalty=alpha, max_decode_length=6)
        )
        assert helpers.strip(ids[0, 0]) == winner
        np.testing.assert_allclose(scores[0, 0], max(expected.values()), rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_a_wide_beam_returns_the_exhaustive_n_best_list(helpers, alpha):
    # 5 tokens (padding is never emitted), at most 3 output tokens: 1 + 3 + 9 = 13 hypotheses, which a
    # beam of 16 holds entirely. Logits depend on the whole prefix through the cache, so a wrong cache
    # reordering would change the scores.
    rng = np.random.default_rng(11)
    model = helpers.TableModel(rng.normal(scale=2.0, size=(3, 97, 5)), max_length=3)
    hypotheses = [[2]] + [[x, 2] for x in (1, 3, 4)] + [[x, y, 2] for x, y in itertools.product((1, 3, 4), repeat=2)]
    scored = sorted(
        ((model.prefix_log_probs(h).sum() / helpers.length_penalty(len(h), alpha), h) for h in hypotheses),
        key=lambda pair: -pair[0],
    )
    ids, scores = beam_search(
        model, np.array([[5, 6, 2]]), DecodingSettings(beam_size=16, length_penalty=alpha, n_best=13)
    )
    assert [helpers.strip(h) for h in ids[0].numpy()] == [h for _, h in scored]
    np.testing.assert_allclose(scores[0], [s for s, _ in scored], rtol=1e-5)


def test_early_stop_when_no_alive_hypothesis_can_win(helpers):
    logits = np.zeros((20, 6), np.float32)
    logits[:, 2] = 12.0  # EOS first is all but certain
    model = helpers.TableModel(logits, max_length=20)
    ids, scores = beam_search(model, np.array([[5, 2]]), DecodingSettings(beam_size=4, max_decode_length=20))
    assert model.decode_calls == 1  # the bound of the alive hypotheses is below the finished [EOS]
    assert helpers.strip(ids[0, 0]) == [2]


def test_padding_does_not_change_a_sentence_beam(tiny_model, helpers):
    lengths = [6, 3, 5]
    sources = helpers.make_sources(lengths, width=8, seed=12)
    ids, scores = beam_search(tiny_model, sources, DecodingSettings(beam_size=3, n_best=2, max_decode_length="x+3"))
    for row, length in enumerate(lengths):
        alone_ids, alone_scores = beam_search(
            tiny_model,
            sources[row : row + 1, :length],
            DecodingSettings(beam_size=3, n_best=2, max_decode_length="x+3"),
        )
        assert [helpers.strip(h) for h in alone_ids[0].numpy()] == [helpers.strip(h) for h in ids[row].numpy()]
        np.testing.assert_allclose(alone_scores[0], scores[row], atol=1e-5)


def test_missing_hypotheses_are_empty_with_minus_infinity(helpers):
    model = helpers.TableModel(np.zeros((4, 6), np.float32), max_length=4)
    ids, scores = beam_search(model, np.array([[5, 2]]), DecodingSettings(beam_size=3, n_best=3, max_decode_length=1))
    np.testing.assert_array_equal(ids.numpy()[0], [[2], [0], [0]])  # one token allowed: only [EOS] exists
    assert np.isfinite(scores[0, 0]) and np.isneginf(scores[0, 1:]).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(beam_size=0), "beam_size"),
        (dict(beam_size=2.0), "beam_size"),
        (dict(beam_size=2, n_best=3), "n_best"),
        (dict(n_best=0), "n_best"),
        (dict(length_penalty=-0.1), "length_penalty"),
    ],
)
def test_bad_settings_are_refused(tiny_model, kwargs, match):
    with pytest.raises(ValueError, match=match):
        beam_search(tiny_model, np.array([[5, 2]], np.int32), DecodingSettings(**kwargs))


@pytest.mark.parametrize(
    "size,k", [(8000, 10), (7999, 10), (37000, 8), (1024, 4), (100, 3)], ids=lambda value: str(value)
)
def test_the_chunked_top_k_equals_tf_top_k_ties_and_infinities_included(size, k):
    rng = np.random.default_rng(size)
    values = rng.normal(size=(6, size)).astype(np.float32)
    values[1] = np.round(values[1] * 2) / 2  # many ties
    values[2] = 1.0  # all tied: the lowest indices win
    values[3, ::2], values[3, 1::2] = -np.inf, 0.0
    values[4, :-3] = -np.inf  # fewer finite entries than k
    expected = tf.math.top_k(values, k)
    best, indices = constraints.top_k(tf.constant(values), k)
    np.testing.assert_array_equal(indices, expected.indices)
    np.testing.assert_array_equal(best, expected.values)


def test_the_best_allowed_tokens_are_the_top_k_of_the_masked_log_softmax(helpers):
    # Rows: an ordinary step, a step before the minimum length (no EOS), a step at the cap (only EOS), and
    # rows whose best tokens are padding and EOS, with ties.
    vocab, k, step = 3000, 8, 4
    config = helpers.TableModel(np.zeros((1, vocab), np.float32)).config
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(6, vocab)).astype(np.float32)
    logits[3, [config.pad_id, config.eos_id]] = 9.0
    logits[4] = np.round(logits[4])
    logits[5, [config.eos_id, 7, 8]] = 5.0
    caps = np.array([20, 20, step + 1, 20, 20, 20], np.int32)
    min_length = np.array([0, step + 2, 0, 0, 0, 0], np.int32)

    plan = constraints.LengthPlan(vocab, tf.constant(caps), None, tf.constant(min_length))
    rules = constraints.OutputRules(config, plan, 0, None)
    log_probs, tokens = constraints.best_allowed_tokens(tf.constant(logits), k, rules, step)
    log_probs, tokens = log_probs.numpy(), tokens.numpy()

    allowed = constraints.allowed_tokens(rules, step).numpy()
    reference = helpers.log_softmax(logits.astype(np.float64))
    for row in range(len(logits)):
        masked = np.where(allowed[row], reference[row], -np.inf)
        expected = np.argsort(-masked, kind="stable")[:k]  # ties: the lower id first
        live = np.isfinite(masked[expected])
        np.testing.assert_array_equal(tokens[row][live], expected[live])
        np.testing.assert_allclose(log_probs[row][live], masked[expected][live], atol=1e-5)
        assert (log_probs[row][~live] < constraints.NEG_INF / 2).all()
    assert list(tokens[2][:1]) == [config.eos_id] and (log_probs[2][1:] < constraints.NEG_INF / 2).all()
    assert config.eos_id not in tokens[1] and config.pad_id not in tokens[3]


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("scale,shift", [(1.0, 0.0), (30.0, 50.0), (5.0, -200.0), (1.0, 300.0)])
def test_the_log_sum_exp_equals_numpys_for_small_and_huge_logits(scale, shift, jit):
    logits = (np.random.default_rng(5).normal(size=(4, 3000)) * scale + shift).astype(np.float32)
    row_max = logits.max(axis=1, keepdims=True)
    expected = row_max + np.log(np.exp(logits.astype(np.float64) - row_max).sum(axis=1, keepdims=True))
    log_sum_exp = tf.function(lambda *args: constraints.log_sum_exp(*args, jit_compile=jit), jit_compile=jit)
    result = log_sum_exp(tf.constant(logits), tf.constant(row_max)).numpy()
    assert np.isfinite(result).all()
    np.testing.assert_allclose(result, expected, rtol=1e-6, atol=1e-5)
