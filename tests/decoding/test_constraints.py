"""The decoders' constraints: the n-gram repetition ban, the relative length cap and forced target prefixes,
against NumPy references, in every decoder and in the traced and XLA modes."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.decoding import (
    DecodingSettings,
    beam_search,
    constraints,
    greedy_decode,
    sample_decode,
    score_ids,
    translate,
)

UNKNOWN_SHAPE = [tf.TensorSpec([None, None], tf.int32)]


def banned_reference(ids, step, n, vocab_size):
    """NumPy: the tokens that would complete, at `step`, an n-gram already in ids[:step] (fairseq's rule)."""
    banned = np.zeros((len(ids), vocab_size), bool)
    for row, tokens in enumerate(ids):
        emitted = list(tokens[:step])
        last = emitted[len(emitted) - (n - 1) :] if n > 1 else []
        for start in range(len(emitted) - n + 1):
            if emitted[start : start + n - 1] == last:
                banned[row, emitted[start + n - 1]] = True
    return banned


def ngrams(tokens, n):
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def emitted(ids):
    """The tokens of one output row before its EOS."""
    ids = list(np.asarray(ids))
    return ids[: ids.index(2)] if 2 in ids else [t for t in ids if t]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_the_ngram_ban_equals_numpy(n):
    rng = np.random.default_rng(n)
    ids = rng.integers(3, 7, size=(6, 12)).astype(np.int32)  # a small vocabulary: many repeats
    for step in range(13):
        written = np.where(np.arange(12) < step, ids, 0)  # the decoders' buffer: 0 from `step` on
        got = constraints.repeated_ngram_tokens(tf.constant(written), tf.constant(step), n, 9).numpy()
        np.testing.assert_array_equal(got, banned_reference(written, step, n, 9), err_msg=f"step {step}")


@pytest.fixture
def looping(helpers):
    """A table model that prefers to repeat: each step's logits favour two tokens that alternate, so greedy
    search loops (4 5 4 5 ...) until the length cap, and beam search likewise."""
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(20, 8, 12)).astype(np.float32)
    logits[:, :, 4] += 6.0
    logits[:, :, 5] += 5.5
    logits[:, :, 2] -= 4.0  # EOS unlikely
    return helpers.TableModel(logits, max_length=20)


def numpy_greedy(model, n, cap, prefix=()):
    """NumPy greedy search over a TableModel with the n-gram ban (n = 0: none), forced `prefix`, EOS at cap."""
    tokens, total, state = [], 0.0, 0
    for step in range(cap):
        state = (state * 31 + ([model.config.bos_id] + tokens)[-1]) % model.num_states
        log_probs = np.log(np.exp(model.logits[step, state].astype(np.float64)).sum())
        log_probs = model.logits[step, state].astype(np.float64) - log_probs
        if step < len(prefix):
            token = prefix[step]
        elif step == cap - 1:
            token = 2
        else:
            masked = log_probs.copy()
            masked[0] = -np.inf
            if n:
                masked[banned_reference([tokens + [0]], step, n, len(masked))[0]] = -np.inf
            token = int(np.argmax(masked))
        tokens.append(token)
        total += log_probs[token]
        if token == 2:
            break
    return tokens, total


@pytest.mark.parametrize("n", [1, 2, 3])
def test_greedy_with_the_ban_equals_numpy(looping, n):
    sources = np.array([[5, 6, 7, 2], [5, 6, 2, 0]], np.int32)
    ids, scores = greedy_decode(looping, sources, DecodingSettings(no_repeat_ngram_size=n, max_decode_length=14))
    for row in range(2):
        tokens, total = numpy_greedy(looping, n, 14)
        assert list(ids[row].numpy()[: len(tokens)]) == tokens
        # The model's own log-probabilities, not renormalised over the tokens left.
        np.testing.assert_allclose(scores[row], total, rtol=1e-5)


def test_without_the_ban_the_table_loops_and_with_it_no_ngram_repeats(looping, helpers):
    sources = np.array([[5, 6, 7, 2], [3, 2, 0, 0]], np.int32)
    free, _ = greedy_decode(looping, sources, DecodingSettings(max_decode_length=14))
    assert len(set(ngrams(emitted(free[0]), 3))) < len(ngrams(emitted(free[0]), 3))  # it loops
    for n in (1, 2, 3):
        for method in ("greedy", "beam", "sample"):
            kwargs = {"beam_size": 3, "n_best": 3} if method == "beam" else {}
            if method == "sample":
                kwargs = {"seed": 5}
            settings = DecodingSettings(method=method, no_repeat_ngram_size=n, max_decode_length=14, **kwargs)
            result = translate(looping, sources, settings)
            helpers.check_output_convention(result.ids)
            for row in result.ids.numpy().reshape(-1, result.ids.shape[-1]):
                grams = ngrams(emitted(row), n)
                assert len(grams) == len(set(grams)), (method, n, row)


def test_a_ban_or_a_prefix_that_cannot_apply_changes_nothing(looping):
    # No output of 14 tokens holds two 15-grams, and a row of zeros is no prefix: the constrained path must give
    # the unconstrained results, scores included (the log-sum-exp of the model's own logits).
    sources = np.array([[5, 6, 7, 2], [3, 2, 0, 0]], np.int32)
    for method, kwargs in (("beam", {"beam_size": 3, "n_best": 2}), ("greedy", {}), ("sample", {"seed": 2})):
        settings = DecodingSettings(method=method, max_decode_length=14, **kwargs)
        plain = translate(looping, sources, settings)
        for constraint in ({"no_repeat_ngram_size": 15}, {"target_prefix_ids": np.zeros((2, 3), np.int32)}):
            banned = dataclasses.replace(settings, **{k: v for k, v in constraint.items() if k != "target_prefix_ids"})
            constrained = translate(looping, sources, banned, target_prefix_ids=constraint.get("target_prefix_ids"))
            np.testing.assert_array_equal(constrained.ids, plain.ids)
            np.testing.assert_allclose(constrained.scores, plain.scores, atol=1e-5)


def test_beam_scores_under_the_ban_are_the_models_log_probabilities(looping, helpers):
    sources = np.array([[5, 6, 7, 2], [3, 2, 0, 0]], np.int32)
    ids, scores = beam_search(
        looping,
        sources,
        DecodingSettings(beam_size=3, length_penalty=0.6, n_best=3, no_repeat_ngram_size=2, max_decode_length=12),
    )
    for row in range(2):
        for k in range(3):
            hypothesis = helpers.strip(ids[row, k].numpy())
            expected = looping.prefix_log_probs(hypothesis).sum() / helpers.length_penalty(len(hypothesis), 0.6)
            np.testing.assert_allclose(scores[row, k], expected, rtol=1e-5)


@pytest.mark.parametrize("ratio, extra", [(1.5, 2), (0.5, 1)])
def test_the_relative_cap_is_floor_ratio_times_source_length_plus_extra(looping, ratio, extra):
    sources = np.zeros((3, 7), np.int32)
    for row, length in enumerate((7, 4, 1)):
        sources[row, : length - 1], sources[row, length - 1] = 6, 2
    settings = DecodingSettings(max_decode_length=f"{ratio}x+{extra}")
    traced = tf.function(lambda source: greedy_decode(looping, source, settings), input_signature=UNKNOWN_SHAPE)
    for decode in (lambda source: greedy_decode(looping, source, settings), traced):
        ids, _ = decode(tf.constant(sources))
        lengths = (ids.numpy() != 0).sum(axis=1)
        # EOS is unlikely in this table: every output runs to its cap (at least 1, at most max_length 20).
        expected = [max(1, min(int(np.floor(ratio * length)) + extra, 20)) for length in (7, 4, 1)]
        assert lengths.tolist() == expected
        assert ids.shape[-1] == max(1, min(int(np.floor(ratio * 7)) + extra, 20))


def test_bad_constraint_arguments_name_the_fix(looping):
    source = np.array([[5, 2]], np.int32)
    with pytest.raises(ValueError, match="no_repeat_ngram_size: must be an integer >= 0"):
        greedy_decode(looping, source, DecodingSettings(no_repeat_ngram_size=-1))
    with pytest.raises(ValueError, match=r"max_decode_length: must be N .* or Ax\+B"):
        beam_search(looping, source, DecodingSettings(max_decode_length="-0.5x+50"))
    with pytest.raises(ValueError, match="target_prefix_ids: 2 rows for 1 source"):
        greedy_decode(looping, source, target_prefix_ids=np.array([[4], [5]]))


# ------------------------------------------------------------------------------------------- target prefixes


def test_greedy_with_a_prefix_equals_numpy(looping):
    sources = np.array([[5, 6, 7, 2], [5, 6, 2, 0], [3, 2, 0, 0]], np.int32)
    prefixes = np.array([[7, 8, 9], [3, 0, 0], [0, 0, 0]], np.int32)  # the last: no prefix
    settings = DecodingSettings(no_repeat_ngram_size=2, max_decode_length=10)
    ids, scores = greedy_decode(looping, sources, settings, target_prefix_ids=prefixes)
    for row, prefix in enumerate(([7, 8, 9], [3], [])):
        tokens, total = numpy_greedy(looping, 2, 10, prefix)
        assert list(ids[row].numpy()[: len(tokens)]) == tokens
        np.testing.assert_allclose(scores[row], total, rtol=1e-5)


def test_a_prefix_longer_than_the_cap_raises_the_cap(looping):
    ids, _ = greedy_decode(looping, np.array([[5, 2]], np.int32), DecodingSettings(max_decode_length=2),
                           target_prefix_ids=np.array([[7, 7, 7, 7]], np.int32))  # fmt: skip
    assert emitted(ids[0]) == [7, 7, 7, 7] and ids.numpy()[0, 4] == 2


@pytest.fixture
def prefix_case(helpers):
    sources = helpers.make_sources([6, 4, 5], seed=21)
    prefixes = np.array([[9, 12, 30], [17, 0, 0], [0, 0, 0]], np.int32)
    return sources, prefixes


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_outputs_start_with_the_prefix_and_score_as_recomputation(tiny_model, helpers, prefix_case, method):
    sources, prefixes = prefix_case
    kwargs = {"beam_size": 3, "n_best": 2, "length_penalty": 0.6} if method == "beam" else {}
    settings = DecodingSettings(method=method, max_decode_length="x+4", **kwargs)
    result = translate(tiny_model, sources, settings, target_prefix_ids=prefixes)
    helpers.check_output_convention(result.ids)
    for row, prefix in enumerate(([9, 12, 30], [17], [])):
        for k in range(result.ids.shape[1]):
            hypothesis = helpers.strip(result.ids[row, k].numpy())
            assert hypothesis[: len(prefix)] == prefix
            # The cached decoding equals the full forward pass over prefix + continuation: the same scores ...
            target = result.ids[row : row + 1, k]
            full = score_ids(tiny_model, sources[row : row + 1], target).log_probs[0]
            penalty = helpers.length_penalty(len(hypothesis), 0.6) if method == "beam" else 1.0
            np.testing.assert_allclose(result.scores[row, k] * penalty, full, rtol=1e-4, atol=1e-4)
        if method == "greedy":  # ... and, after the prefix, the full pass's argmax at every step
            log_probs = helpers.full_pass_log_probs(tiny_model, sources[row][sources[row] != 0], hypothesis)
            for position in range(len(prefix), len(hypothesis) - 1):
                assert hypothesis[position] == np.argmax(np.where(np.arange(40) == 0, -np.inf, log_probs[position]))


def test_sampling_keeps_the_prefix(tiny_model, helpers, prefix_case):
    sources, prefixes = prefix_case
    settings = DecodingSettings(method="sample", seed=4, max_decode_length="x+4")
    ids, _ = sample_decode(tiny_model, sources, settings, target_prefix_ids=prefixes)
    assert helpers.strip(ids[0].numpy())[:3] == [9, 12, 30] and ids.numpy()[1, 0] == 17


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_constraints_in_tf_function_and_xla_equal_eager(looping, method):
    # The table model compiles fast, so XLA is affordable here (the Transformer's modes: test_graph_modes.py).
    sources = np.array([[5, 6, 7, 2], [5, 6, 2, 0], [3, 2, 0, 0]], np.int32)
    prefixes = np.array([[7, 8], [3, 0], [0, 0]], np.int32)
    kwargs = dict(no_repeat_ngram_size=2, max_decode_length="1.5x+3")
    if method == "beam":
        kwargs.update(beam_size=3, n_best=2)
    settings = DecodingSettings(method=method, **kwargs)

    def decode(source, prefix, jit_compile=False):
        return translate(looping, source, settings, target_prefix_ids=prefix, jit_compile=jit_compile)

    eager = decode(sources, prefixes)
    traced = tf.function(decode, input_signature=UNKNOWN_SHAPE * 2)(tf.constant(sources), tf.constant(prefixes))
    compiled = tf.function(lambda s, p: decode(s, p, jit_compile=True), jit_compile=True)(sources, prefixes)
    for other in (traced, compiled):
        np.testing.assert_array_equal(other.ids, eager.ids)
        np.testing.assert_allclose(other.scores, eager.scores, atol=1e-4)
