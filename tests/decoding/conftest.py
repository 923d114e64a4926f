"""Shared fixtures of the decoding tests: a tiny random Transformer, a table-driven stand-in model, and
NumPy references (full forward pass rescoring, the length penalty)."""

import types

import numpy as np
import pytest
import tensorflow as tf

import tf_transformer as tft

TINY = tft.TransformerConfig(
    vocab_size=40,
    d_model=32,
    d_ff=64,
    num_heads=4,
    num_encoder_layers=2,
    num_decoder_layers=2,
    max_length=64,
    dropout=0.0,
)


def make_sources(lengths, width=None, vocab_size=40, seed=0):
    """int32 `[len(lengths), width]` random sources (ids >= 3), each ending with EOS, 0-padded."""
    rng = np.random.default_rng(seed)
    width = width or max(lengths)
    sources = np.zeros((len(lengths), width), np.int32)
    for row, length in enumerate(lengths):
        sources[row, : length - 1] = rng.integers(3, vocab_size, size=length - 1)
        sources[row, length - 1] = 2
    return sources


def length_penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def full_pass_log_probs(model, source, hypothesis):
    """Log-probabilities `[len(hypothesis), vocab]` of each position, from the full (uncached) forward pass
    of `source` `[source_len]` with target input BOS + hypothesis[:-1]."""
    target_in = np.array([[model.config.bos_id] + list(hypothesis[:-1])], np.int32)
    logits = model((source[np.newaxis], target_in), training=False).numpy()[0]
    return log_softmax(logits.astype(np.float64))


def strip(ids):
    """The emitted tokens of one output row (up to and including EOS)."""
    ids = list(np.asarray(ids))
    return ids[: ids.index(2) + 1] if 2 in ids else [t for t in ids if t]


def check_output_convention(ids):
    """ids `[..., T]`: exactly one EOS per row, no padding before it, only padding after it."""
    rows = np.asarray(ids).reshape(-1, np.shape(ids)[-1])
    for row in rows:
        eos = np.flatnonzero(row == 2)
        assert eos.size == 1, row
        assert (row[: eos[0]] != 0).all() and (row[eos[0] + 1 :] == 0).all(), row


class TableModel:
    """A stand-in for `Transformer` with the decoding API (`encode`, `init_cache`, `decode`, `config`).

    Its logits come from a table `[steps, num_states, vocab]` indexed by the step and a state that hashes
    the whole prefix (`state = (state * 31 + token) % num_states`, kept in the cache). Beam search must
    therefore reorder the cache correctly to get the right logits, and NumPy can enumerate every
    hypothesis with the same rule (`prefix_log_probs`).
    """

    def __init__(self, logits, max_length=None):
        logits = np.asarray(logits, np.float32)
        if logits.ndim == 2:  # one row per step, the same whatever the prefix
            logits = logits[:, np.newaxis, :]
        self.logits = logits
        self.num_states = logits.shape[1]
        self.table = tf.constant(logits)
        self.decode_calls = 0
        self.config = types.SimpleNamespace(
            bos_id=1,
            eos_id=2,
            pad_id=0,
            max_length=max_length or logits.shape[0],
            output_vocab_size=logits.shape[-1],
        )

    def encode(self, source_ids, training=None):
        memory = tf.cast(source_ids, tf.float32)[:, :, tf.newaxis]
        return memory, tf.not_equal(source_ids, 0)[:, tf.newaxis, tf.newaxis, :]

    def init_cache(self, memory, max_length):
        batch_size = tf.shape(memory)[0]
        return [{"self": {"state": tf.zeros([batch_size], tf.int32)}, "cross": {"memory": memory}}]

    def decode(self, target_ids, memory, memory_mask, training=None, cache=None, decode_index=None):
        self.decode_calls += 1  # counts steps when run eagerly
        state = (cache[0]["self"]["state"] * 31 + target_ids[:, 0]) % self.num_states
        rows = self.table[tf.minimum(decode_index, self.logits.shape[0] - 1)]  # [num_states, vocab]
        logits = tf.gather(rows, state)  # [batch, vocab]
        return logits[:, tf.newaxis], [{"self": {"state": state}, "cross": cache[0]["cross"]}]

    def prefix_log_probs(self, hypothesis):
        """NumPy: the log-probabilities of the tokens of `hypothesis` (BOS excluded), one per step."""
        state, result = 0, []
        previous = [self.config.bos_id] + list(hypothesis[:-1])
        for step, (token_in, token_out) in enumerate(zip(previous, hypothesis, strict=True)):
            state = (state * 31 + token_in) % self.num_states
            row = self.logits[min(step, self.logits.shape[0] - 1), state].astype(np.float64)
            result.append(log_softmax(row)[token_out])
        return np.array(result)


@pytest.fixture(scope="session")
def tiny_model():
    tf.keras.utils.set_random_seed(1)
    model = tft.Transformer(TINY)
    model((np.ones((1, 3), np.int32), np.ones((1, 2), np.int32)))
    return model


@pytest.fixture(scope="session")
def one_layer_model():
    # For the tests of tracing and XLA, whose cost grows with the number of layers traced.
    tf.keras.utils.set_random_seed(2)
    model = tft.Transformer(TINY.replace(num_encoder_layers=1, num_decoder_layers=1))
    model((np.ones((1, 3), np.int32), np.ones((1, 2), np.int32)))
    return model


@pytest.fixture
def helpers():
    return types.SimpleNamespace(
        TINY=TINY,
        TableModel=TableModel,
        make_sources=make_sources,
        length_penalty=length_penalty,
        log_softmax=log_softmax,
        full_pass_log_probs=full_pass_log_probs,
        strip=strip,
        check_output_convention=check_output_convention,
    )
