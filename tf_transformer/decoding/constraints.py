"""What a decoder may emit: how long the outputs may be (the length plan), which tokens each step allows (padding
and EOS, forced target prefixes, the repeated n-gram ban) and the best allowed ones (an exact chunked top-k).

A decoding call builds its `OutputRules` once (`output_rules`); greedy search, sampling and beam search read them
at every step.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import tensorflow as tf

# The score of an impossible token or hypothesis: finite, so that sums and the length-penalty division
# never produce NaN (the model's masks use the same convention). Anything below NEG_INF / 2 is "dead".
NEG_INF = -1e9


class LengthPlan(NamedTuple):
    """How long the outputs may be.

    buffer_length: width of the output and self-attention cache buffers (a Python int when it is known
        while tracing, which XLA needs; else an int32 scalar tensor).
    caps: int32 `[batch]`, the most tokens (EOS included) each sentence may emit; EOS is forced at the last.
    num_steps: int32 scalar, the loop bound: the largest cap.
    min_length: int32 `[batch]`, the fewest tokens (EOS included) each sentence emits: EOS is forbidden
        before it (never above the cap, so the cap's forced EOS stays possible).
    """

    buffer_length: object
    caps: tf.Tensor
    num_steps: tf.Tensor
    min_length: tf.Tensor


class TargetPrefix(NamedTuple):
    """Forced first output tokens, one prefix per row (see `target_prefix`).

    ids: int32 `[rows, prefix_len + 1]`, each row's prefix, 0-padded, with one more 0 column (so that a
        step past every prefix still reads a column).
    lengths: int32 `[rows]`, each row's prefix length (its non-padding ids).
    """

    ids: tf.Tensor
    lengths: tf.Tensor


class OutputRules(NamedTuple):
    """What the rows of one decoding call may emit: the model's special ids (`config`), how long (`plan`) and
    the user's constraints (`no_repeat_ngram_size`, 0: none; `prefix`, a `TargetPrefix` or None)."""

    config: object
    plan: LengthPlan
    no_repeat_ngram_size: int
    prefix: Optional[TargetPrefix]

    def tile(self, beam_size) -> "OutputRules":
        """The rules of beam search's rows: each sentence's caps, minimum and prefix repeated for its
        `beam_size` hypotheses (rows b * beam_size + j)."""
        plan = self.plan._replace(
            caps=tf.repeat(self.plan.caps, beam_size, axis=0),
            min_length=tf.repeat(self.plan.min_length, beam_size, axis=0),
        )
        prefix = self.prefix
        if prefix is not None:
            prefix = TargetPrefix(*(tf.repeat(tensor, beam_size, axis=0) for tensor in prefix))
        return self._replace(plan=plan, prefix=prefix)


def output_rules(config, source_ids, settings, target_prefix_ids=None) -> OutputRules:
    """The `OutputRules` of a batch of int32 `source_ids` `[batch, source_len]` under `settings` (a
    `DecodingSettings`), with forced `target_prefix_ids` (see `target_prefix`) or None."""
    prefix = target_prefix(target_prefix_ids, source_ids)
    plan = plan_lengths(config, source_ids, settings, prefix)
    return OutputRules(config, plan, int(settings.no_repeat_ngram_size), prefix)


def target_prefix(target_prefix_ids, source_ids) -> Optional[TargetPrefix]:
    """`TargetPrefix` of int `[batch, prefix_len]` ids, 0-padded at the end (a row of zeros: no prefix), or
    None for None. A ValueError names a rank or batch size that does not fit `source_ids`."""
    if target_prefix_ids is None:
        return None
    ids = as_source_ids(target_prefix_ids, "target_prefix_ids", "prefix_len")
    batch, rows = source_ids.shape[0], ids.shape[0]
    if batch is not None and rows is not None and batch != rows:
        raise ValueError(
            f"target_prefix_ids: {rows} rows for {batch} source sentences. Fix: give one prefix row per source "
            "sentence (a row of zeros for none)."
        )
    ids = tf.pad(ids, [[0, 0], [0, 1]])
    return TargetPrefix(ids, tf.reduce_sum(tf.cast(tf.not_equal(ids, 0), tf.int32), axis=1))


def as_source_ids(source_ids, name: str = "source_ids", length: str = "source_len"):
    """int32 `[batch, source_len]` source ids (numpy int64 arrays are common); with `name` and `length`, the same
    for other ids (`target_ids`, `[batch, target_len]`), a ValueError naming them."""
    source_ids = tf.convert_to_tensor(source_ids)
    if source_ids.dtype != tf.int32:
        source_ids = tf.cast(source_ids, tf.int32)
    if source_ids.shape.rank is not None and source_ids.shape.rank != 2:
        raise ValueError(
            f"{name}: expected int ids of shape [batch, {length}], got shape {source_ids.shape}. "
            f"Fix: add a batch dimension, e.g. {name}[None]."
        )
    return source_ids


def plan_lengths(config, source_ids, settings, prefix: Optional[TargetPrefix] = None) -> LengthPlan:
    """The `LengthPlan` of a batch under `settings`' length cap rule and `min_decode_length` (see the package
    docstring): a sentence's cap is N, or `floor(A * source_length) + B` for "Ax+B" (source_length: its
    non-padding ids, EOS included); with a `prefix`, at least the sentence's prefix + EOS; always at most
    `config.max_length`.
    """
    batch_size = tf.shape(source_ids)[0]
    max_decode_length, ratio, extra_decode_length = settings.length_cap
    ratio = float(ratio)
    if max_decode_length is not None:
        if tf.is_tensor(max_decode_length):
            buffer_length = tf.maximum(tf.minimum(tf.cast(max_decode_length, tf.int32), config.max_length), 1)
        else:
            buffer_length = max(min(int(max_decode_length), config.max_length), 1)
        caps = tf.fill([batch_size], tf.cast(buffer_length, tf.int32))
    else:
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, config.pad_id), tf.int32), axis=1)
        caps = _relative_cap(lengths, ratio, extra_decode_length)
        # The buffers are sized from the padded source length: it is static under XLA, where a shape may not
        # depend on the data, and equals the longest source whenever the batch was padded to its longest.
        padded_length = source_ids.shape[1]
        if padded_length is not None:
            longest = int(math.floor(ratio * padded_length)) + int(extra_decode_length)
            buffer_length = max(min(longest, config.max_length), 1)
        else:
            buffer_length = tf.maximum(
                tf.minimum(_relative_cap(tf.shape(source_ids)[1], ratio, extra_decode_length), config.max_length), 1
            )
    if prefix is not None:
        # Room for the whole prefix and an EOS (within max_length): a cap never cuts a prefix.
        caps = tf.maximum(caps, prefix.lengths + 1)
        width = prefix.ids.shape[1]  # the prefix columns + the extra 0 column of TargetPrefix
        if isinstance(buffer_length, int) and width is not None:
            buffer_length = max(buffer_length, min(width, config.max_length))
        else:
            buffer_length = tf.maximum(buffer_length, tf.minimum(tf.shape(prefix.ids)[1], config.max_length))
    # Never beyond the buffer (float rounding of the ratio may not make a cap exceed it) nor max_length.
    caps = tf.maximum(tf.minimum(tf.minimum(caps, buffer_length), config.max_length), 1)
    num_steps = tf.reduce_max(tf.concat([caps, [0]], axis=0))  # 0 for an empty batch
    return LengthPlan(buffer_length, caps, num_steps, tf.minimum(caps, int(settings.min_decode_length)))


def _relative_cap(lengths, ratio, extra):
    """floor(ratio * lengths) + extra, int32, computed in float64 (as Python computes the static buffer width)."""
    if ratio == 1.0:
        return lengths + int(extra)
    scaled = tf.floor(tf.cast(lengths, tf.float64) * ratio)
    return tf.cast(scaled, tf.int32) + int(extra)


def constraint_mask(rules: OutputRules, step, history):
    """Boolean `[rows, vocab]`, True where the user's constraints allow a token at `step`, or None without
    constraints. `history` int32 `[rows, T]`: each row's emitted tokens (positions before `step` filled).

    A row still inside its prefix may emit only the prefix's token there (it wins over the n-gram ban: the
    user asked for it); otherwise a token that would repeat an n-gram of `rules.no_repeat_ngram_size` tokens
    is banned. Padding and EOS are `allowed_tokens`' business.
    """
    vocab_size = rules.config.output_vocab_size
    prefix = rules.prefix
    allowed = None
    if rules.no_repeat_ngram_size:
        allowed = ~repeated_ngram_tokens(history, step, rules.no_repeat_ngram_size, vocab_size)
    if prefix is not None:
        forced = step < prefix.lengths  # [rows]
        token = tf.gather(prefix.ids, tf.minimum(step, tf.shape(prefix.ids)[1] - 1), axis=1)
        is_token = tf.equal(tf.range(vocab_size)[tf.newaxis], token[:, tf.newaxis])
        free = tf.ones_like(is_token) if allowed is None else allowed
        allowed = tf.where(forced[:, tf.newaxis], is_token, free)
    return allowed


def repeated_ngram_tokens(ids, step, ngram_size, vocab_size):
    """Boolean `[rows, vocab_size]`: the tokens that would complete, at position `step`, an n-gram of
    `ngram_size` tokens already present in `ids[:, :step]` (int32 `[rows, T]`, the tokens emitted so far).

    fairseq's NGramRepeatBlock and Hugging Face's no_repeat_ngram_size: every earlier window
    `ids[s : s + n - 1]` equal to the last n - 1 tokens bans the token that followed it, `ids[s + n - 1]`
    (n = 1 bans every token emitted so far). Fixed shapes only (column rolls, a scatter), so it runs in
    every mode; a start s whose window runs past `step` never matches, so the roll's wrap-around is harmless.
    """
    rows = tf.shape(ids)[0]
    starts = tf.range(tf.shape(ids)[1])[tf.newaxis]  # [1, T]: window start positions s
    match = tf.broadcast_to(starts <= step - ngram_size, tf.shape(ids))  # the window and its next token: before step
    for offset in range(ngram_size - 1):
        column = tf.maximum(step - (ngram_size - 1) + offset, 0)  # negative only when no start matches
        last = tf.gather(ids, column, axis=1)  # [rows]: the offset-th of the last n - 1 tokens
        match &= tf.equal(tf.roll(ids, -offset, axis=1), last[:, tf.newaxis])
    following = tf.roll(ids, -(ngram_size - 1), axis=1)  # [rows, T]: the token after each window
    row_index = tf.broadcast_to(tf.range(rows)[:, tf.newaxis], tf.shape(ids))
    counts = tf.scatter_nd(
        tf.stack([row_index, following], axis=-1), tf.cast(match, tf.int32), tf.stack([rows, vocab_size])
    )
    return counts > 0


def allowed_tokens(rules: OutputRules, step):
    """Boolean `[rows, vocab]`: which tokens `rules`' length plan and the model's special ids allow at `step`.

    Padding is never emitted (id 0 marks the end of an output, and a fed-back 0 would be masked out by the
    full forward pass but not by the cache). At a sentence's last allowed position only EOS is allowed, so
    every output ends with EOS within its cap; before `plan.min_length - 1` EOS is not allowed.
    """
    config, plan = rules.config, rules.plan
    vocab = tf.range(config.output_vocab_size)[tf.newaxis]
    at_cap = (step >= plan.caps - 1)[:, tf.newaxis]  # [batch, 1]
    too_short = (step < plan.min_length - 1)[:, tf.newaxis]
    is_eos = tf.equal(vocab, config.eos_id)
    return tf.where(at_cap, is_eos, tf.not_equal(vocab, config.pad_id) & ~(is_eos & too_short))


def best_allowed_tokens(logits, k, rules: OutputRules, step, allowed=None, jit_compile=False):
    """The k most probable tokens of each row of float32 logits `[rows, vocab]` that `allowed_tokens(rules,
    step)` allows, best first (ties: the lower id first): `(log_probs [rows, k], tokens [rows, k])`. Forbidden
    tokens fill the rest with about NEG_INF. `allowed`: bool `[rows, vocab]` or None, more tokens to forbid
    (`constraint_mask`).

    The same as a top_k of the masked log-softmax, without the log-softmax and the mask over the whole
    vocabulary (two passes over it per step). Only padding and EOS can be forbidden, except at a row's
    length cap where EOS is the only allowed token, so the k best allowed tokens are among the k + 2 best of
    the raw logits without padding and EOS, plus EOS itself; log-probabilities are those logits minus the
    row's log-sum-exp. With `allowed`, the search runs over the logits with NEG_INF where it is False, and
    the log-sum-exp is still that of the model's own logits: constraints do not renormalise, so the scores
    stay the model's log-probabilities. `jit_compile`: the caller compiles with XLA (see `log_sum_exp`).
    """
    config, plan = rules.config, rules.plan
    vocab_size = logits.shape[-1]
    if allowed is None:
        values, tokens, row_max = top_k(logits, min(k + 2, vocab_size), return_max=True)
        normalizer = log_sum_exp(logits, row_max, jit_compile)
    else:
        normalizer = log_sum_exp(logits, tf.reduce_max(logits, axis=-1, keepdims=True), jit_compile)
        searched = tf.where(allowed, logits, NEG_INF)
        values, tokens = top_k(searched, min(k + 2, vocab_size))
    at_cap = (step >= plan.caps - 1)[:, tf.newaxis]
    eos_allowed = at_cap | (step >= plan.min_length - 1)[:, tf.newaxis]
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
