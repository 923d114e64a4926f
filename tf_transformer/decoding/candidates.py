"""The best allowed tokens of a step: an exact chunked top-k, the log-sum-exp, and NEG_INF, the score of an
impossible token."""

from __future__ import annotations

import tensorflow as tf

# The score of an impossible token or hypothesis: finite, so that sums and the length-penalty division
# never produce NaN (the model's masks use the same convention). Anything below NEG_INF / 2 is "dead".
NEG_INF = -1e9


def top_k(values, k, return_max=False):
    """`tf.math.top_k(values, k)` of float `[rows, n]` with a static n: the same values and indices (ties: the
    lower index first), searched in chunks when n is large, which is cheaper on CPU (benchmarks/NOTES.md,
    entry 9). `return_max=True` also returns each row's maximum `[rows, 1]`, which the chunked search gets
    almost for free.

    The rows are cut into chunks of about sqrt(n / k) entries. Every entry of the top k lies in one of the k
    chunks with the largest maxima: a chunk outside those has k chunks whose maxima are at least as large
    (and of lower index when equal), so k entries rank before each of its entries. One top_k over the chunk
    maxima and one over the entries of the k chosen chunks, taken in index order, therefore give the exact
    result.
    """
    size = values.shape[-1]
    chunk = _chunk_size(size, k) if size is not None else None
    if chunk is None:
        best, indices = tf.math.top_k(values, k)
        return (best, indices, best[:, :1]) if return_max else (best, indices)
    num_chunks = -(-size // chunk)
    if num_chunks * chunk != size:
        # -inf padding sorts after every real entry (also after real -inf ones: its indices are larger).
        values = tf.pad(values, [[0, 0], [0, num_chunks * chunk - size]], constant_values=float("-inf"))
    chunks = tf.reshape(values, [-1, num_chunks, chunk])
    chunk_max, chosen = tf.math.top_k(tf.reduce_max(chunks, axis=-1), k)
    chosen = tf.sort(chosen, axis=-1)  # index order, so that ties keep top_k's rule
    candidates = tf.reshape(tf.gather(chunks, chosen, batch_dims=1), [-1, k * chunk])
    best, position = tf.math.top_k(candidates, k)
    indices = tf.gather(chosen, position // chunk, batch_dims=1) * chunk + position % chunk
    return (best, indices, chunk_max[:, :1]) if return_max else (best, indices)


def _chunk_size(size, k):
    """The chunk width for `top_k`, or None where one plain top_k is as fast (small rows, or k near n)."""
    if size < 1024 or k * 16 > size:
        return None
    target = max(int(round((size / k) ** 0.5)), 8)
    # A width that divides the row avoids a padded copy of it.
    divisors = [width for width in range(target // 2, 2 * target + 1) if size % width == 0]
    return min(divisors, key=lambda width: abs(width - target)) if divisors else target


def log_sum_exp(logits, row_max, jit_compile=False):
    """`reduce_logsumexp(logits, axis=-1, keepdims=True)` of float32 `[rows, vocab]`, given the rows' maxima
    `[rows, 1]`.

    Outside XLA: while every row's maximum lies in [-60, 60], exp cannot overflow and the largest term cannot
    underflow, so the sum needs no shifted copy of the logits (one pass over them instead of three). Under
    XLA, which fuses the shift into the sum, it is `reduce_logsumexp` itself: computing from `row_max` there
    made beam search slower (benchmarks/NOTES.md, entry 12). `jit_compile`: the caller compiles with XLA.
    """
    if jit_compile:
        return tf.reduce_logsumexp(logits, axis=-1, keepdims=True)

    def shifted():
        return row_max + tf.math.log(tf.reduce_sum(tf.exp(logits - row_max), axis=-1, keepdims=True))

    def unshifted():
        return tf.math.log(tf.reduce_sum(tf.exp(logits), axis=-1, keepdims=True))

    return tf.cond(tf.reduce_all(tf.abs(row_max) <= 60.0), unshifted, shifted)


def best_allowed_tokens(logits, k, config, step, caps, min_length, jit_compile=False, allowed=None):
    """The k most probable tokens of each row of float32 logits `[rows, vocab]` that `allowed_tokens` allows
    at `step`, best first (ties: the lower id first): `(log_probs [rows, k], tokens [rows, k])`. Forbidden
    tokens fill the rest with about NEG_INF. `caps` and `min_length` are int32 `[rows]`. `allowed`: bool
    `[rows, vocab]` or None, more tokens to forbid (`constraint_mask`).

    The same as a top_k of the masked log-softmax, without the log-softmax and the mask over the whole
    vocabulary (two passes over it per step). Only padding and EOS can be forbidden, except at a row's
    length cap where EOS is the only allowed token, so the k best allowed tokens are among the k + 2 best of
    the raw logits without padding and EOS, plus EOS itself; log-probabilities are those logits minus the
    row's log-sum-exp. With `allowed`, the search runs over the logits with NEG_INF where it is False, and
    the log-sum-exp is still that of the model's own logits: constraints do not renormalise, so the scores
    stay the model's log-probabilities. `jit_compile`: the caller compiles with XLA (see `log_sum_exp`).
    """
    vocab_size = logits.shape[-1]
    if allowed is None:
        values, tokens, row_max = top_k(logits, min(k + 2, vocab_size), return_max=True)
        normalizer = log_sum_exp(logits, row_max, jit_compile)
    else:
        normalizer = log_sum_exp(logits, tf.reduce_max(logits, axis=-1, keepdims=True), jit_compile)
        searched = tf.where(allowed, logits, NEG_INF)
        values, tokens = top_k(searched, min(k + 2, vocab_size))
    at_cap = (step >= caps - 1)[:, tf.newaxis]
    eos_allowed = at_cap | (step >= min_length - 1)[:, tf.newaxis]
    if allowed is not None:
        eos_allowed &= allowed[:, config.eos_id, None] | at_cap  # the cap's EOS stays possible
    others = tf.not_equal(tokens, config.pad_id) & tf.not_equal(tokens, config.eos_id) & ~at_cap
    values = tf.concat(
        [
            tf.where(others, values, NEG_INF),
            tf.where(eos_allowed, logits[:, config.eos_id, None], NEG_INF),
        ],
        axis=1,
    )
    tokens = tf.concat([tokens, tf.fill(tf.shape(eos_allowed), tf.constant(config.eos_id, tf.int32))], axis=1)
    # Ties go to the lower id, as in a top_k over the vocabulary: order the candidates by id first.
    by_id = tf.argsort(tokens, axis=1, stable=True)
    values, tokens = tf.gather(values, by_id, batch_dims=1), tf.gather(tokens, by_id, batch_dims=1)
    best, picked = tf.math.top_k(values, k)
    return best - normalizer, tf.gather(tokens, picked, batch_dims=1)
