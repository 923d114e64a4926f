"""Beam search with the GNMT length penalty, n-best lists and early stopping, over a cached decoder.

How it searches (the finished and alive sets, the early stop) is in docs/decoding.md, "Beam search".
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from tf_transformer.decoding import loop
from tf_transformer.decoding.constraints import (
    NEG_INF,
    as_source_ids,
    best_allowed_tokens,
    constraint_mask,
    output_rules,
)
from tf_transformer.decoding.loop import DecodableModel
from tf_transformer.decoding.settings import PAPER, DecodingSettings, require_settings
from tf_transformer.errors import require_tensorflow_backend


def beam_search(
    model: DecodableModel,
    source_ids,
    settings: DecodingSettings = PAPER,
    *,
    jit_compile: bool = False,
    target_prefix_ids=None,
):
    """The `settings.n_best` best hypotheses of each sentence by beam search.

    Args:
        model: a `DecodableModel` (`encode`, `init_cache`, `decode`, `config`), e.g. a `Transformer`.
        source_ids: int `[batch, source_len]`, 0 = padding.
        settings: a `DecodingSettings`; its beam_size, length_penalty, n_best, no_repeat_ngram_size,
            max_decode_length and min_decode_length apply.
        jit_compile, target_prefix_ids: as in `greedy_decode` (a prefix also counts in the length penalty);
            with jit_compile, outputs equal those without it up to float rounding.

    Returns:
        `(ids, scores)`: ids int32 `[batch, n_best, T]`, best first (the package docstring's convention);
        scores float32 `[batch, n_best]`, non-increasing, `log_prob_sum / ((5 + length) / 6) ** length_penalty`.
        Missing hypotheses (a cap of 1 token) are all 0 with score -inf.

    Raises:
        TypeError: `settings` is not a `DecodingSettings`. ValueError: jit_compile not a bool, or a
            `target_prefix_ids` that does not fit `source_ids`.

    Example:

    >>> import numpy as np
    >>> import tf_transformer as tft
    >>> from tf_transformer.decoding import DecodingSettings, beam_search
    >>> config = tft.TransformerConfig(vocab_size=40, d_model=32, d_ff=64, num_heads=4,
    ...     num_encoder_layers=2, num_decoder_layers=2, max_length=64, dropout=0.0)
    >>> model = tft.Transformer(config)
    >>> settings = DecodingSettings(beam_size=3, n_best=2, max_decode_length=5)
    >>> ids, scores = beam_search(model, np.array([[5, 6, 7, 2]]), settings)
    >>> ids.shape, scores.shape
    (TensorShape([1, 2, 5]), TensorShape([1, 2]))

    References: Vaswani et al., 2017, https://arxiv.org/abs/1706.03762; Wu et al., 2016 (length penalty),
    https://arxiv.org/abs/1609.08144
    """
    require_tensorflow_backend("tft.decoding")
    require_settings(settings)
    loop.check_jit_compile(jit_compile)
    if settings.beam_size == 1:  # greedy search, its score length-penalised
        ids, log_probs = loop.decode_one_hypothesis(
            model, source_ids, settings, jit_compile=jit_compile, target_prefix_ids=target_prefix_ids
        )
        scores = log_probs / length_penalty(output_lengths(ids, model.config.pad_id), settings.length_penalty)
        return ids[:, tf.newaxis], scores[:, tf.newaxis]
    return _beam_search_loop(model, source_ids, settings, jit_compile, target_prefix_ids)


class BeamState(NamedTuple):
    """The loop state of beam search (`tf.nest` treats a namedtuple as a structure, so `tf.while_loop`
    carries it).

    step: int32 scalar, the position being decoded.
    tokens: int32 `[batch, beam]`, each alive hypothesis's last token (BOS at step 0).
    cache: the model's decoder cache, one row per hypothesis (cross-attention: one per sentence).
    alive_ids: int32 `[batch, beam, T]`, the alive hypotheses.
    alive_log_probs: float32 `[batch, beam]`, their log-probability sums, best first (NEG_INF: dead).
    finished_ids: int32 `[batch, beam, T]`, the finished hypotheses, best first.
    finished_scores: float32 `[batch, beam]`, their length-penalised scores (NEG_INF: empty slot).
    finished_flags: bool `[batch, beam]`, which finished slots hold a hypothesis.
    done: bool `[batch]`, the sentences whose finished set is final.
    """

    step: tf.Tensor
    tokens: tf.Tensor
    cache: object
    alive_ids: tf.Tensor
    alive_log_probs: tf.Tensor
    finished_ids: tf.Tensor
    finished_scores: tf.Tensor
    finished_flags: tf.Tensor
    done: tf.Tensor


def _beam_search_loop(model, source_ids, settings, jit_compile=False, target_prefix_ids=None):
    """The beam search proper, for any beam_size >= 1 (beam_search routes beam_size=1 to greedy)."""
    config = model.config
    beam_size, n_best, alpha = int(settings.beam_size), int(settings.n_best), float(settings.length_penalty)
    per_beam = min(2 * beam_size, config.output_vocab_size)  # candidates taken from each beam
    source_ids = as_source_ids(source_ids)
    batch_size = tf.shape(source_ids)[0]
    rules = output_rules(config, source_ids, settings, target_prefix_ids)
    plan, caps = rules.plan, rules.plan.caps
    max_penalty = length_penalty(caps, alpha)  # [batch]; the largest penalty, as alpha >= 0

    memory, memory_mask = model.encode(source_ids, training=False)
    # Self-attention caches get a row per hypothesis; cross-attention keys stay one row per sentence, shared
    # by its beam_size hypotheses (consecutive rows), as the model's cross-attention allows.
    cache = loop.init_decoding_cache(model, memory, plan, jit_compile)
    cache = loop.tile_cache(cache, beam_size)
    constants = loop.decoding_constants(model)
    # Row offset of each sentence's beams in the flattened [batch * beam_size] cache.
    row_offsets = (tf.range(batch_size) * beam_size)[:, tf.newaxis]
    ranks = tf.range(2 * beam_size)[tf.newaxis]
    row_rules = rules.tile(beam_size)  # one row per hypothesis

    def body(state: BeamState) -> tuple[BeamState]:
        step = state.step
        logits, new_cache = model.decode(
            tf.reshape(state.tokens, [-1, 1]),
            None,
            memory_mask,
            training=False,
            cache=state.cache,
            decode_index=step,
            **constants,
        )
        # The 2 * beam_size best extensions: at most beam_size of them end in EOS (one per beam), so at
        # least beam_size remain to continue. Two stages, the same result: each of them is among its own
        # beam's 2 * beam_size best, and top_k over [batch * beam, vocab] rows is cheaper on CPU than over
        # [batch, beam * vocab] ones.
        # The constraints see each hypothesis's own tokens: alive_ids follow the beams' reordering.
        history = tf.reshape(state.alive_ids, [-1, tf.shape(state.alive_ids)[-1]])
        token_mask = constraint_mask(row_rules, step, history)
        beam_log_probs, beam_tokens = best_allowed_tokens(
            tf.cast(logits[:, -1], tf.float32), per_beam, row_rules, step, token_mask, jit_compile
        )
        # [batch * beam, per_beam] each
        # -1 for the batch keeps its static size (a loop variable's shape may not change).
        beam_log_probs = tf.reshape(beam_log_probs, [-1, beam_size, per_beam])
        beam_tokens = tf.reshape(beam_tokens, [-1, beam_size, per_beam])
        extensions = tf.reshape(state.alive_log_probs[:, :, tf.newaxis] + beam_log_probs, [-1, beam_size * per_beam])
        top_log_probs, top_index = tf.math.top_k(extensions, k=2 * beam_size)
        top_beams = top_index // per_beam
        top_tokens = tf.gather(tf.reshape(beam_tokens, [-1, beam_size * per_beam]), top_index, batch_dims=1)
        top_ids = loop.write_column(tf.gather(state.alive_ids, top_beams, batch_dims=1), step, top_tokens)
        ends = tf.equal(top_tokens, config.eos_id)
        live = top_log_probs > NEG_INF / 2

        # Alive: the beam_size best candidates that do not end in EOS, ranked by log-probability.
        alive_candidates = tf.where(ends, NEG_INF, top_log_probs)
        alive_log_probs, picked = tf.math.top_k(alive_candidates, k=beam_size)
        alive_ids = tf.gather(top_ids, picked, batch_dims=1)
        tokens = tf.gather(top_tokens, picked, batch_dims=1)
        rows = tf.reshape(row_offsets + tf.gather(top_beams, picked, batch_dims=1), [-1])
        new_cache = loop.reorder_cache(new_cache, rows)  # follow the parents

        # Finished: EOS candidates within the beam (the first beam_size ranks), merged into the sorted set.
        # Existing entries come first, so a tie keeps them; done sentences take no more hypotheses.
        new_finished = ends & live & (ranks < beam_size) & tf.logical_not(state.done)[:, tf.newaxis]
        new_scores = tf.where(new_finished, top_log_probs / length_penalty(step + 1, alpha), NEG_INF)
        finished_scores, kept = tf.math.top_k(tf.concat([state.finished_scores, new_scores], axis=1), k=beam_size)
        finished_ids = tf.gather(tf.concat([state.finished_ids, top_ids], axis=1), kept, batch_dims=1)
        finished_flags = tf.gather(tf.concat([state.finished_flags, new_finished], axis=1), kept, batch_dims=1)

        # Done: n_best finished and no alive hypothesis can beat the n_best-th, or the length limit reached.
        enough = tf.reduce_sum(tf.cast(finished_flags, tf.int32), axis=1) >= n_best
        best_possible = alive_log_probs[:, 0] / max_penalty
        done = state.done | (enough & (best_possible <= finished_scores[:, n_best - 1])) | (step + 1 >= caps)
        # A 1-tuple: tf.while_loop calls body(*loop_vars) and wants the same structure back.
        return (
            BeamState(
                step=step + 1,
                tokens=tokens,
                cache=loop.keep_shapes(new_cache, state.cache),
                alive_ids=alive_ids,
                alive_log_probs=alive_log_probs,
                finished_ids=finished_ids,
                finished_scores=finished_scores,
                finished_flags=finished_flags,
                done=done,
            ),
        )

    def cond(state: BeamState):
        return (state.step < plan.num_steps) & tf.logical_not(tf.reduce_all(state.done))

    initial = _initial_state(config, batch_size, beam_size, plan.buffer_length, cache)
    (final,) = loop.while_loop(cond, body, (initial,), jit_compile)
    return _best_hypotheses(final, alpha, n_best, config.pad_id)


def _initial_state(config, batch_size, beam_size, buffer_length, cache) -> BeamState:
    """The state before the first step: BOS in every beam, only the first beam live, nothing finished."""
    # Only the first beam is live at the start: the others would duplicate it.
    first_beam_only = tf.where(tf.range(beam_size) == 0, 0.0, NEG_INF)
    empty_ids = tf.zeros([batch_size, beam_size, buffer_length], tf.int32)
    return BeamState(
        step=tf.constant(0),
        tokens=tf.fill([batch_size, beam_size], tf.constant(config.bos_id, tf.int32)),
        cache=cache,
        alive_ids=empty_ids,
        alive_log_probs=tf.tile(first_beam_only[tf.newaxis], [batch_size, 1]),
        finished_ids=empty_ids,
        finished_scores=tf.fill([batch_size, beam_size], tf.constant(NEG_INF, tf.float32)),
        finished_flags=tf.zeros([batch_size, beam_size], tf.bool),
        done=tf.zeros([batch_size], tf.bool),
    )


def _best_hypotheses(final: BeamState, alpha, n_best, pad_id):
    """`(ids [batch, n_best, T], scores [batch, n_best])` of the final state: the finished hypotheses, best
    first; missing ones all `pad_id` with score -inf."""
    alive_ids, alive_log_probs = final.alive_ids, final.alive_log_probs
    finished_ids, finished_scores, finished_flags = final.finished_ids, final.finished_scores, final.finished_flags

    # A sentence that finished nothing returns its alive hypotheses, scored at the length they reached.
    has_finished = tf.reduce_any(finished_flags, axis=1)
    alive_scores = alive_log_probs / length_penalty(output_lengths(alive_ids, pad_id), alpha)
    ids = tf.where(has_finished[:, tf.newaxis, tf.newaxis], finished_ids, alive_ids)
    scores = tf.where(has_finished[:, tf.newaxis], finished_scores, alive_scores)
    valid = tf.where(has_finished[:, tf.newaxis], finished_flags, alive_log_probs > NEG_INF / 2)
    ids = tf.where(valid[:, :, tf.newaxis], ids, pad_id)[:, :n_best]
    scores = tf.where(valid, scores, float("-inf"))[:, :n_best]
    return ids, scores


def length_penalty(length, alpha):
    """Wu et al. (2016): ((5 + length) / 6) ** alpha, float32; `length` counts emitted tokens with EOS."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, float(alpha))


def output_lengths(ids, pad_id=0):
    """Number of emitted tokens (EOS included) of ids `[..., T]` written by the decoders."""
    return tf.reduce_sum(tf.cast(tf.not_equal(ids, pad_id), tf.int32), axis=-1)
