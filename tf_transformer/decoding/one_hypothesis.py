"""The loop of greedy search and sampling: one hypothesis per sentence, cached, stopping when all have EOS."""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from tf_transformer.decoding.candidates import best_allowed_tokens
from tf_transformer.decoding.constraints import allowed_tokens, constraint_mask, target_prefix
from tf_transformer.decoding.lengths import as_source_ids, plan_lengths
from tf_transformer.decoding.loop import decoding_constants, init_decoding_cache, keep_shapes, while_loop, write_column


class HypothesisState(NamedTuple):
    """The loop state of greedy search and sampling (one hypothesis per sentence); `tf.nest` treats a
    namedtuple as a structure, so `tf.while_loop` carries it.

    step: int32 scalar, the position being decoded.
    tokens: int32 `[batch]`, each sentence's last token (BOS at step 0, padding once finished).
    cache: the model's decoder cache.
    ids: int32 `[batch, buffer_length]`, the tokens emitted so far (0 after EOS and beyond `step`).
    scores: float32 `[batch]`, the sums of the model's log-probabilities of the emitted tokens.
    finished: bool `[batch]`, the sentences that have emitted EOS.
    """

    step: tf.Tensor
    tokens: tf.Tensor
    cache: object
    ids: tf.Tensor
    scores: tf.Tensor
    finished: tf.Tensor


def decode_one_hypothesis(
    model,
    source_ids,
    select,
    max_decode_length,
    extra_decode_length,
    min_decode_length=0,
    jit_compile=False,
    no_repeat_ngram_size=0,
    max_decode_length_ratio=1.0,
    target_prefix_ids=None,
):
    """The loop shared by greedy search and sampling: one hypothesis per sentence, cached, early stop.

    Args:
        select: `(log_probs [batch, vocab] float32, allowed [batch, vocab] bool, step) -> int32 [batch]`, or
            None for greedy search (the most probable allowed token, ties to the lower id).
        jit_compile: the loop will be compiled by XLA: fixed-size caches (see `init_decoding_cache`).
        no_repeat_ngram_size, target_prefix_ids: the constraints of `constraint_mask` (0, None: none).
        max_decode_length_ratio: see `plan_lengths`.

    Returns:
        ids int32 `[batch, buffer_length]`, scores float32 `[batch]` (sum of the model's log-probabilities
        of the emitted tokens, EOS included).
    """
    config = model.config
    source_ids = as_source_ids(source_ids)
    prefix = target_prefix(target_prefix_ids, source_ids)
    plan = plan_lengths(
        config, source_ids, max_decode_length, extra_decode_length, min_decode_length, max_decode_length_ratio, prefix
    )
    batch_size = tf.shape(source_ids)[0]

    memory, memory_mask = model.encode(source_ids, training=False)
    cache = init_decoding_cache(model, memory, plan, jit_compile)
    constants = decoding_constants(model)

    def body(state: HypothesisState) -> tuple[HypothesisState]:
        logits, new_cache = model.decode(
            state.tokens[:, tf.newaxis],
            None,
            memory_mask,
            training=False,
            cache=state.cache,
            decode_index=state.step,
            **constants,
        )
        logits = tf.cast(logits[:, -1], tf.float32)  # [batch, vocab]
        constraints = constraint_mask(config, state.step, state.ids, no_repeat_ngram_size, prefix)
        if select is None:  # greedy: the best allowed token, without a log-softmax over the vocabulary
            best_log_probs, best_tokens = best_allowed_tokens(
                logits, 1, config, state.step, plan.caps, plan.min_length, jit_compile, constraints
            )
            chosen, chosen_log_prob = best_tokens[:, 0], best_log_probs[:, 0]
        else:
            log_probs = tf.nn.log_softmax(logits, axis=-1)
            allowed = allowed_tokens(config, state.step, plan)
            if constraints is not None:
                # At the cap only EOS, whatever the constraints (every output ends with EOS).
                at_cap = (state.step >= plan.caps - 1)[:, tf.newaxis]
                allowed = tf.where(at_cap, allowed, allowed & constraints)
            chosen = select(log_probs, allowed, state.step)
            chosen_log_prob = tf.gather(log_probs, chosen, batch_dims=1)
        chosen = tf.where(state.finished, config.pad_id, chosen)
        # A 1-tuple: tf.while_loop calls body(*loop_vars) and wants the same structure back.
        return (
            HypothesisState(
                step=state.step + 1,
                tokens=chosen,
                cache=keep_shapes(new_cache, state.cache),
                ids=write_column(state.ids, state.step, chosen),
                scores=state.scores + tf.where(state.finished, 0.0, chosen_log_prob),
                finished=state.finished | tf.equal(chosen, config.eos_id),
            ),
        )

    def cond(state: HypothesisState):
        return (state.step < plan.num_steps) & tf.logical_not(tf.reduce_all(state.finished))

    initial = HypothesisState(
        step=tf.constant(0),
        tokens=tf.fill([batch_size], tf.constant(config.bos_id, tf.int32)),
        cache=cache,
        ids=tf.zeros([batch_size, plan.buffer_length], tf.int32),
        scores=tf.zeros([batch_size], tf.float32),
        finished=tf.zeros([batch_size], tf.bool),
    )
    (final,) = while_loop(cond, body, (initial,), jit_compile)
    return final.ids, final.scores
