"""Sampling: seeds, the greedy limits, and the distribution temperature / top-k / top-p sample from."""

import numpy as np
import pytest

from tf_transformer.decoding import DecodingSettings, greedy_decode, sample_decode

# First-step probabilities of a table model: 0 pad (never emitted), 1 BOS, 2 EOS, 3..7 symbols.
FIRST_STEP = np.array([1e-9, 0.05, 0.05, 0.35, 0.25, 0.15, 0.1, 0.05])
ROWS = 4000


def first_token_frequencies(helpers, **kwargs):
    probabilities = np.tile(FIRST_STEP, (2, 1))
    model = helpers.TableModel(np.log(probabilities), max_length=2)
    sources = np.full((ROWS, 2), [5, 2], np.int32)
    ids, scores = sample_decode(model, sources, DecodingSettings(method="sample", max_decode_length=2, **kwargs))
    ids, scores = ids.numpy(), scores.numpy()
    # The scores are the model's own log-probabilities, whatever the temperature or filtering.
    expected = np.array([model.prefix_log_probs(helpers.strip(row)).sum() for row in ids[:50]])
    np.testing.assert_allclose(scores[:50], expected, rtol=1e-5)
    return np.bincount(ids[:, 0], minlength=len(FIRST_STEP)) / ROWS


def renormalised(weights):
    weights = np.asarray(weights, np.float64)
    weights[0] = 0.0  # padding is never sampled
    return weights / weights.sum()


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature_scales_the_logits(helpers, temperature):
    frequencies = first_token_frequencies(helpers, temperature=temperature, seed=1)
    expected = renormalised(FIRST_STEP ** (1.0 / temperature))
    np.testing.assert_allclose(frequencies, expected, atol=0.03)


def test_top_k_samples_among_the_k_best(helpers):
    frequencies = first_token_frequencies(helpers, top_k=3, seed=2)
    expected = renormalised(np.where(FIRST_STEP >= 0.15, FIRST_STEP, 0.0))
    np.testing.assert_allclose(frequencies, expected, atol=0.03)


def test_top_p_samples_from_the_nucleus(helpers):
    # Sorted: 0.35, 0.25 (sum 0.6 < 0.7), 0.15 (sum 0.75 >= 0.7): the nucleus is tokens 3, 4, 5.
    frequencies = first_token_frequencies(helpers, top_p=0.7, seed=3)
    expected = renormalised(np.where(FIRST_STEP >= 0.15, FIRST_STEP, 0.0))
    np.testing.assert_allclose(frequencies, expected, atol=0.03)
    assert frequencies[[0, 1, 2, 6, 7]].sum() == 0


@pytest.fixture(scope="module")
def random_table_model():
    # Logits depend on the whole prefix (through the cache) and are about as flat as a random Transformer's.
    rng = np.random.default_rng(21)
    return rng.normal(scale=1.5, size=(12, 97, 30))


def test_same_seed_same_output_and_other_seeds_differ(helpers, random_table_model):
    model = helpers.TableModel(random_table_model, max_length=12)
    sources = helpers.make_sources([5, 3, 6, 4], seed=5)
    ids, scores = sample_decode(model, sources, DecodingSettings(method="sample", seed=42))
    again_ids, again_scores = sample_decode(model, sources, DecodingSettings(method="sample", seed=42))
    np.testing.assert_array_equal(ids, again_ids)
    np.testing.assert_array_equal(scores, again_scores)
    helpers.check_output_convention(ids)
    assert not np.array_equal(ids, sample_decode(model, sources, DecodingSettings(method="sample", seed=43))[0])
    assert not np.array_equal(sample_decode(model, sources)[0], sample_decode(model, sources)[0])  # fresh seeds


@pytest.mark.parametrize("settings", [dict(top_k=1), dict(temperature=0.0), dict(top_p=1e-6), dict(temperature=1e-4)])
def test_the_greedy_limits_equal_greedy_search(helpers, random_table_model, settings):
    model = helpers.TableModel(random_table_model, max_length=12)
    sources = helpers.make_sources([5, 3, 6, 4], seed=6)
    greedy_ids, greedy_scores = greedy_decode(model, sources)
    ids, scores = sample_decode(model, sources, DecodingSettings(method="sample", seed=7, **settings))
    np.testing.assert_array_equal(ids, greedy_ids)
    np.testing.assert_allclose(scores, greedy_scores, atol=1e-6)


def test_sampling_a_real_model_is_reproducible_and_follows_the_output_convention(tiny_model, helpers):
    sources = helpers.make_sources([5, 3], seed=8)
    ids, scores = sample_decode(
        tiny_model, sources, DecodingSettings(method="sample", top_p=0.95, seed=9, max_decode_length="x+3")
    )
    again_ids, _ = sample_decode(
        tiny_model, sources, DecodingSettings(method="sample", top_p=0.95, seed=9, max_decode_length="x+3")
    )
    np.testing.assert_array_equal(ids, again_ids)
    helpers.check_output_convention(ids)
    for row, source in enumerate(sources):
        hypothesis = helpers.strip(ids[row])
        log_probs = helpers.full_pass_log_probs(tiny_model, source, hypothesis)
        np.testing.assert_allclose(scores[row], log_probs[np.arange(len(hypothesis)), hypothesis].sum(), atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(temperature=-1.0), "temperature"),
        (dict(top_k=-2), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
    ],
)
def test_bad_settings_are_refused(tiny_model, kwargs, match):
    with pytest.raises(ValueError, match=match):
        sample_decode(tiny_model, np.array([[5, 2]], np.int32), DecodingSettings(method="sample", **kwargs))
