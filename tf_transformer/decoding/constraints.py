"""Which tokens a decoder may emit: forced target prefixes, the repeated n-gram ban, padding and EOS."""

from __future__ import annotations

from typing import NamedTuple, Optional

import tensorflow as tf

from tf_transformer.decoding.lengths import as_source_ids


class TargetPrefix(NamedTuple):
    """Forced first output tokens, one prefix per row (see `target_prefix`).

    ids: int32 `[rows, prefix_len + 1]`, each row's prefix, 0-padded, with one more 0 column (so that a
        step past every prefix still reads a column).
    lengths: int32 `[rows]`, each row's prefix length (its non-padding ids).
    """

    ids: tf.Tensor
    lengths: tf.Tensor


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


def tile_prefix(prefix: Optional[TargetPrefix], beam_size) -> Optional[TargetPrefix]:
    """The prefix of each sentence repeated for its `beam_size` hypotheses (rows b * beam_size + j)."""
    if prefix is None:
        return None
    return TargetPrefix(tf.repeat(prefix.ids, beam_size, axis=0), tf.repeat(prefix.lengths, beam_size, axis=0))


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


def constraint_mask(config, step, history, no_repeat_ngram_size=0, prefix: Optional[TargetPrefix] = None):
    """Boolean `[rows, vocab]`, True where the user's constraints allow a token at `step`, or None without
    constraints. `history` int32 `[rows, T]`: each row's emitted tokens (positions before `step` filled).

    A row still inside its prefix may emit only the prefix's token there (it wins over the n-gram ban: the
    user asked for it); otherwise a token that would repeat an n-gram of `no_repeat_ngram_size` tokens is
    banned (0: no ban). Padding and EOS are `allowed_tokens`' business.
    """
    vocab_size = config.output_vocab_size
    allowed = None
    if no_repeat_ngram_size:
        allowed = ~repeated_ngram_tokens(history, step, int(no_repeat_ngram_size), vocab_size)
    if prefix is not None:
        forced = step < prefix.lengths  # [rows]
        token = tf.gather(prefix.ids, tf.minimum(step, tf.shape(prefix.ids)[1] - 1), axis=1)
        is_token = tf.equal(tf.range(vocab_size)[tf.newaxis], token[:, tf.newaxis])
        free = tf.ones_like(is_token) if allowed is None else allowed
        allowed = tf.where(forced[:, tf.newaxis], is_token, free)
    return allowed


def allowed_tokens(config, step, plan):
    """Boolean `[batch, vocab]`: which tokens may be emitted at `step`.

    Padding is never emitted (id 0 marks the end of an output, and a fed-back 0 would be masked out by the
    full forward pass but not by the cache). At a sentence's last allowed position only EOS is allowed, so
    every output ends with EOS within its cap; before `plan.min_length - 1` EOS is not allowed.
    """
    vocab = tf.range(config.output_vocab_size)[tf.newaxis]
    at_cap = (step >= plan.caps - 1)[:, tf.newaxis]  # [batch, 1]
    too_short = (step < plan.min_length - 1)[:, tf.newaxis]
    is_eos = tf.equal(vocab, config.eos_id)
    return tf.where(at_cap, is_eos, tf.not_equal(vocab, config.pad_id) & ~(is_eos & too_short))
