"""Rules shared across the package, each written once: argument checks, the default output length, source ids.

Imports no other package module but `decoding_settings` (which imports no TensorFlow and holds
EXTRA_DECODE_LENGTH, for the commands' flags), so the data pipeline, the decoders and the exports can all use
it without an import cycle or a heavy import.

Source ids (the rule that training, `tf_transformer.decoding.text` and the SavedModel export share): a
sentence's tokens, cut to the first `max_length - 1` if longer, then EOS. It has two forms, one per kind of
caller: `truncate_source` on one NumPy row (eager Python code), and `truncate_source_ragged` on a
`tf.RaggedTensor` batch (graph code: the tf.data pipeline and the SavedModel). Both cut at
`source_token_limit(max_length)`; tests/test_rules.py checks that they agree.
"""

from __future__ import annotations

import numbers

import numpy as np
import tensorflow as tf

# The default output length allowance (the paper's "input length + 50"): a sentence gets at most its source
# length + this many tokens, EOS included.
from tf_transformer.decoding_settings import EXTRA_DECODE_LENGTH


def is_int(value) -> bool:
    """A Python or NumPy integer, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


# ------------------------------------------------------------------------------------------ decoding settings


def check_length_arguments(max_decode_length, extra_decode_length, min_decode_length=0, max_decode_length_ratio=1.0):
    """ValueErrors that name the argument and the fix, raised before anything is traced."""
    ratio = max_decode_length_ratio
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not 0 <= ratio < float("inf"):
        raise ValueError(
            f"max_decode_length_ratio: must be a number >= 0, got {ratio!r}. Fix: use e.g. 1.0 (the paper: source "
            "length + extra_decode_length) or 1.5."
        )
    if not is_int(min_decode_length) or min_decode_length < 0:
        raise ValueError(
            f"min_decode_length: must be an int >= 0, got {min_decode_length!r}. "
            "Fix: use 0 (no minimum) or the fewest output tokens, EOS included."
        )
    if not is_int(extra_decode_length) or extra_decode_length < 0:
        raise ValueError(
            f"extra_decode_length: must be an int >= 0, got {extra_decode_length!r}. "
            f"Fix: use e.g. {EXTRA_DECODE_LENGTH} (the paper's input length + {EXTRA_DECODE_LENGTH})."
        )
    if max_decode_length is not None and not tf.is_tensor(max_decode_length):
        if not is_int(max_decode_length) or max_decode_length < 1:
            raise ValueError(
                f"max_decode_length: must be None, an int >= 1 or an int scalar tensor, "
                f"got {max_decode_length!r}. "
                "Fix: pass None to use the source length + extra_decode_length."
            )


def check_no_repeat_ngram_size(no_repeat_ngram_size):
    """A ValueError unless `no_repeat_ngram_size` is an int >= 0 (0: no n-gram ban)."""
    if not is_int(no_repeat_ngram_size) or no_repeat_ngram_size < 0:
        raise ValueError(
            f"no_repeat_ngram_size: must be an int >= 0 (0: off), got {no_repeat_ngram_size!r}. Fix: use 0, or N "
            "to forbid repeating any N-gram of output tokens (e.g. 4)."
        )


def check_beam_arguments(beam_size, length_penalty, n_best):
    """ValueErrors for beam search settings: beam_size an int >= 1, n_best an int in [1, beam_size],
    length_penalty (alpha) a number >= 0."""
    if not is_int(beam_size) or beam_size < 1:
        raise ValueError(f"beam_size: must be an int >= 1, got {beam_size!r}. Fix: use e.g. beam_size=4.")
    if not is_int(n_best) or not 1 <= n_best <= beam_size:
        raise ValueError(
            f"n_best: must be an int in [1, beam_size={beam_size}], got {n_best!r}. "
            "Fix: lower n_best or raise beam_size (the n-best list comes from the beam)."
        )
    if not isinstance(length_penalty, numbers.Real) or isinstance(length_penalty, bool) or length_penalty < 0:
        raise ValueError(
            f"length_penalty: alpha must be a number >= 0, got {length_penalty!r}. "
            "Fix: use 0 for raw log-probabilities or e.g. 0.6 (the paper)."
        )


def check_single_hypothesis(n_best, method):
    """A ValueError when `n_best` is not 1 for a decoding `method` other than "beam": greedy search and
    sampling give one hypothesis per sentence."""
    if method != "beam" and n_best != 1:
        raise ValueError(
            f"n_best: {method} decoding gives one hypothesis, got n_best={n_best}. Fix: use method='beam'."
        )


# ------------------------------------------------------------------------------------------------ source ids


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
