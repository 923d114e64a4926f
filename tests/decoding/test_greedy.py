"""Greedy search: cached decoding equals the full forward pass, output convention, length limits, padding."""

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.decoding import DecodingSettings, beam_search, greedy_decode, sample_decode


class Recorder:
    """Delegates the decoding API to a model and keeps the logits of every (eager) decode step."""

    def __init__(self, model):
        self.model, self.config, self.steps = model, model.config, []

    def encode(self, *args, **kwargs):
        return self.model.encode(*args, **kwargs)

    def init_cache(self, *args, **kwargs):
        return self.model.init_cache(*args, **kwargs)

    def decode(self, *args, **kwargs):
        logits, cache = self.model.decode(*args, **kwargs)
        self.steps.append(logits.numpy()[:, 0])
        return logits, cache


def test_greedy_equals_the_full_forward_pass_at_every_step(tiny_model, helpers):
    extra = 3
    sources = helpers.make_sources([5, 3, 6], seed=2)
    recorder = Recorder(tiny_model)
    ids, scores = greedy_decode(recorder, sources, DecodingSettings(max_decode_length=f"x+{extra}"))
    helpers.check_output_convention(ids)
    assert len(recorder.steps) == max(len(helpers.strip(row)) for row in ids.numpy())
    for row, source in enumerate(sources):
        hypothesis = helpers.strip(ids[row])
        cap = np.count_nonzero(source) + extra
        assert len(hypothesis) <= cap
        target_in = np.array([[1] + hypothesis[:-1]], np.int32)
        full = tiny_model((source[np.newaxis], target_in), training=False).numpy()[0]
        log_probs = helpers.log_softmax(full.astype(np.float64))
        for step, token in enumerate(hypothesis):
            # The cached step's logits are the full pass's logits at that position.
            np.testing.assert_allclose(recorder.steps[step][row], full[step], atol=1e-5)
            if step == cap - 1:
                assert token == 2  # EOS is forced at the length limit
            else:
                assert token == 1 + np.argmax(log_probs[step, 1:])  # padding (id 0) is never emitted
        chosen = log_probs[np.arange(len(hypothesis)), hypothesis]
        np.testing.assert_allclose(scores[row], chosen.sum(), atol=1e-5)


def test_greedy_stops_as_soon_as_every_sentence_emitted_eos(helpers):
    logits = np.zeros((10, 6), np.float32)
    logits[:, 2] = 5.0  # EOS is the best token at every step
    model = helpers.TableModel(logits, max_length=10)
    ids, _ = greedy_decode(model, helpers.make_sources([3, 5]), DecodingSettings(max_decode_length=10))
    assert model.decode_calls == 1
    np.testing.assert_array_equal(ids.numpy()[:, :2], [[2, 0], [2, 0]])


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_output_lengths_follow_the_source_and_the_config(helpers, method):
    logits = np.zeros((64, 6), np.float32)
    logits[:, 2] = -20.0  # EOS only when forced
    logits[:, 3] = 2.0
    model = helpers.TableModel(logits, max_length=20)
    decode = {
        "greedy": lambda model, sources, **k: greedy_decode(model, sources, DecodingSettings(**k)),
        "beam": lambda model, sources, **k: beam_search(model, sources, DecodingSettings(beam_size=3, **k)),
        "sample": lambda model, sources, **k: sample_decode(
            model, sources, DecodingSettings(method="sample", seed=5, **k)
        ),
    }[method]

    def lengths(ids):
        ids = np.asarray(ids).reshape(3, -1, np.shape(ids)[-1])[:, 0]
        helpers.check_output_convention(ids)
        return [len(helpers.strip(row)) for row in ids]

    sources = helpers.make_sources([3, 7, 12], width=14)  # source lengths 3, 7, 12 (EOS included)
    ids, _ = decode(model, sources, max_decode_length="x+4")
    assert ids.shape[-1] == 18  # 14 + 4
    assert lengths(ids) == [7, 11, 16]  # each sentence: its source length + 4
    ids, _ = decode(model, sources)  # + 50, capped at config.max_length
    assert ids.shape[-1] == 20 and lengths(ids) == [20, 20, 20]
    ids, _ = decode(model, sources, max_decode_length=5)
    assert ids.shape[-1] == 5 and lengths(ids) == [5, 5, 5]
    ids, _ = decode(model, sources, max_decode_length=tf.constant(5))  # e.g. a SavedModel input
    assert ids.shape[-1] == 5 and lengths(ids) == [5, 5, 5]
    ids, _ = decode(model, sources, max_decode_length=np.int64(100))
    assert ids.shape[-1] == 20 and lengths(ids) == [20, 20, 20]


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_min_decode_length_forbids_an_earlier_eos(helpers, method):
    logits = np.zeros((12, 6), np.float32)
    logits[:, 2] = 5.0  # EOS is the best token at every step
    model = helpers.TableModel(logits, max_length=12)
    decode = {
        "greedy": lambda model, sources, **k: greedy_decode(model, sources, DecodingSettings(**k)),
        "beam": lambda model, sources, **k: beam_search(model, sources, DecodingSettings(beam_size=3, **k)),
        "sample": lambda model, sources, **k: sample_decode(
            model, sources, DecodingSettings(method="sample", top_k=1, seed=5, **k)
        ),
    }[method]
    sources = helpers.make_sources([3, 5])
    for minimum, expected in [(0, 1), (1, 1), (4, 4), (10, 8)]:  # never beyond the cap of 8 tokens
        ids, _ = decode(model, sources, max_decode_length=8, min_decode_length=minimum)
        rows = np.asarray(ids).reshape(2, -1, 8)[:, 0]
        helpers.check_output_convention(rows)
        assert [len(helpers.strip(row)) for row in rows] == [expected, expected], (minimum, rows)
    with pytest.raises(ValueError, match="min_decode_length"):
        decode(model, sources, min_decode_length=-1)


def test_padding_does_not_change_a_sentence_greedy(tiny_model, helpers):
    lengths = [6, 3, 5]
    sources = helpers.make_sources(lengths, width=8, seed=4)
    ids, scores = greedy_decode(tiny_model, sources, DecodingSettings(max_decode_length="x+3"))
    for row, length in enumerate(lengths):
        alone_ids, alone_scores = greedy_decode(
            tiny_model, sources[row : row + 1, :length], DecodingSettings(max_decode_length="x+3")
        )
        assert helpers.strip(alone_ids[0]) == helpers.strip(ids[row])
        np.testing.assert_allclose(alone_scores[0], scores[row], atol=1e-5)


@pytest.mark.parametrize(
    "bad", [dict(max_decode_length=0), dict(max_decode_length="x+-1"), dict(max_decode_length=2.5)]
)
def test_bad_lengths_are_refused(tiny_model, bad):
    with pytest.raises(ValueError, match="decode_length"):
        greedy_decode(tiny_model, np.array([[5, 2]], np.int32), DecodingSettings(**bad))


def test_numpy_int64_sources_are_accepted(tiny_model):
    source = np.array([[5, 6, 2]], np.int64)
    ids, _ = greedy_decode(tiny_model, source, DecodingSettings(max_decode_length=4))
    assert ids.dtype == tf.int32 and ids.shape == (1, 4)
