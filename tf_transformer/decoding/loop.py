"""The decoders' loop: what they need of a model (`DecodableModel`), its cache in a `tf.while_loop`, and the loop
of greedy search and sampling (`decode_one_hypothesis`).

Every decoder is a `tf.while_loop` whose loop variables keep one shape from the first step to the last
(except the length axis of a growing self-attention cache, relaxed in the loop's shape invariants), so the
same code runs eagerly, in a `tf.function` (also with an unknown batch and source length) and under XLA
(`tf.function(jit_compile=True)`, with the decoder's own `jit_compile=True`), and saves in a SavedModel.
`DecodableModel` is a `typing.Protocol` (structural: a `Transformer` satisfies it without naming it, and so
does a test's stand-in).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

import tensorflow as tf

from tf_transformer.decoding.constraints import (
    allowed_tokens,
    as_source_ids,
    best_allowed_tokens,
    constraint_mask,
    output_rules,
)
from tf_transformer.layers import KeyValueCache


class DecodingConfig(Protocol):
    """The configuration fields the decoders read (`TransformerConfig` has them)."""

    bos_id: int
    eos_id: int
    pad_id: int
    max_length: int  # the most target positions; every output is capped at it
    output_vocab_size: int


@runtime_checkable
@runtime_checkable
class DecodableModel(Protocol):
    """The incremental decoder that greedy search, beam search and sampling run.

    - `encode(source_ids, training=False)` -> `(memory, memory_mask)`: the encoder, run once per batch.
      `memory_mask` is what `decode` takes back; the decoders only pass it on.
    - `init_cache(memory, max_length)` -> the decoder's cache: any nest (dicts, lists, tuples) of tensors
      and `tf_transformer.layers.KeyValueCache`s (tf_transformer/layers/_cache.py). `max_length=None` asks
      for growing self-attention caches, an int (or int scalar tensor) for fixed buffers of that length (XLA). Each
      `KeyValueCache` says how beam search tiles and reorders it and how a `tf.while_loop` carries it; any
      other tensor is per-row state (beam search repeats it per hypothesis and reorders it by parent).
    - `decode(target_ids, memory, memory_mask, training=False, cache=cache, decode_index=step, **constants)`
      -> `(logits [rows, new_len, vocab], new_cache)`: the target tokens `[rows, new_len]` at positions
      `decode_index ...`, earlier positions read from `cache`; `new_cache` has the structure and types of
      `cache` (shapes too, except a growing cache's length). `memory` is None (the cache holds its keys). In
      beam search `rows` is `batch * beam_size` while `memory_mask` keeps `batch` rows.
    - `config`: a `DecodingConfig`.
    - Optional: `decoding_constants()` -> a dict of extra `decode` keyword arguments, computed once per
      decoding call (`Transformer.decoding_constants`).
    """

    config: DecodingConfig

    def encode(self, source_ids: Any, training: bool | None = None) -> tuple[Any, Any]: ...

    def init_cache(self, memory: Any, max_length: Any) -> Any: ...

    def decode(
        self,
        target_ids: Any,
        memory: Any,
        memory_mask: Any,
        training: bool | None = None,
        cache: Any = None,
        decode_index: Any = None,
    ) -> tuple[Any, Any]: ...


def check_jit_compile(jit_compile):
    """A ValueError unless `jit_compile` is a bool (a truthy tensor or string would silently pick a mode)."""
    if not isinstance(jit_compile, bool):
        raise ValueError(
            f"jit_compile: must be True or False, got {jit_compile!r}. Fix: pass True when the decoder runs in a "
            "`tf.function(jit_compile=True)`, else False."
        )


def decode_one_hypothesis(model, source_ids, settings, select=None, *, jit_compile=False, target_prefix_ids=None):
    """The loop shared by greedy search and sampling: one hypothesis per sentence, cached, early stop.

    Args:
        settings: a `DecodingSettings`; its max_decode_length, min_decode_length and no_repeat_ngram_size apply.
        select: `(log_probs [batch, vocab] float32, allowed [batch, vocab] bool, step) -> int32 [batch]`, or
            None for greedy search (the most probable allowed token, ties to the lower id).
        jit_compile: the loop will be compiled by XLA: fixed-size caches (see `init_decoding_cache`).
        target_prefix_ids: forced prefixes (see `constraints.target_prefix`) or None.

    Returns:
        ids int32 `[batch, buffer_length]`, scores float32 `[batch]` (sum of the model's log-probabilities
        of the emitted tokens, EOS included).
    """
    config = model.config
    source_ids = as_source_ids(source_ids)
    rules = output_rules(config, source_ids, settings, target_prefix_ids)
    plan = rules.plan
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
        constraints = constraint_mask(rules, state.step, state.ids)
        if select is None:  # greedy: the best allowed token, without a log-softmax over the vocabulary
            best_log_probs, best_tokens = best_allowed_tokens(logits, 1, rules, state.step, constraints, jit_compile)
            chosen, chosen_log_prob = best_tokens[:, 0], best_log_probs[:, 0]
        else:
            log_probs = tf.nn.log_softmax(logits, axis=-1)
            allowed = allowed_tokens(rules, state.step)
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


def init_decoding_cache(model, memory, plan, jit_compile=False):
    """Growing self-attention caches (a step copies only what is filled), or for XLA the fixed shapes it needs."""
    return model.init_cache(memory, plan.buffer_length if jit_compile else None)


def decoding_constants(model):
    """Extra `decode` arguments computed once per decoding call (`Transformer.decoding_constants`), or {}
    for a model without them."""
    constants = getattr(model, "decoding_constants", None)
    return constants() if constants is not None else {}


def keep_shapes(new, old):
    """`new` with the static shapes of `old` (its shape invariants): a layer may lose a static size, and a
    loop variable may not."""

    def restore(new_tensor, shape):
        if new_tensor.shape == shape:
            return new_tensor
        return tf.ensure_shape(new_tensor, shape)

    return tf.nest.map_structure(restore, new, shape_invariants(old))


def write_column(buffer, column, values):
    """`buffer` `[..., T]` with `values` `[...]` at position `column`: a select, so shapes never change."""
    positions = tf.range(tf.shape(buffer)[-1])
    return tf.where(tf.equal(positions, column), values[..., tf.newaxis], buffer)


def while_loop(cond, body, initial, jit_compile):
    """`tf.while_loop` over the decoder state, growing caches' length axis relaxed; the caller says whether XLA
    compiles it (`jit_compile`), which TensorFlow cannot tell."""
    # XLA's error for a growing cache ("Input and output shapes of loop body do not match") quotes this name.
    name = "decoder_loop" if jit_compile else "growing_cache_loop_Fix_under_XLA_pass_jit_compile_True"
    return tf.while_loop(cond, body, initial, shape_invariants=shape_invariants(initial), name=name)


def shape_invariants(loop_vars):
    """`tf.while_loop` shape invariants: each tensor's shape, each `KeyValueCache`'s own (growing: length None)."""
    return map_cache(lambda cache: cache.shape_invariants(), lambda tensor: tf.TensorShape(tensor.shape), loop_vars)


def tile_cache(cache, beam_size):
    """The cache with a row per hypothesis: each `KeyValueCache` tiles itself, any other tensor is repeated."""
    return map_cache(lambda kv: kv.tile(beam_size), lambda tensor: tf.repeat(tensor, beam_size, axis=0), cache)


def reorder_cache(cache, rows):
    """The cache following beam search's parents: row i takes row `rows[i]` (int32 `[batch * beam_size]`)."""
    return map_cache(lambda kv: kv.reorder(rows), lambda tensor: tf.gather(tensor, rows, axis=0), cache)


def map_cache(on_cache, on_tensor, structure):
    """`structure` (nested dicts, lists, tuples and namedtuples) with `on_cache` applied to each
    `KeyValueCache`, which knows how it is used, and `on_tensor` to every other leaf."""
    if isinstance(structure, KeyValueCache):
        return on_cache(structure)
    if isinstance(structure, dict):
        return type(structure)((key, map_cache(on_cache, on_tensor, value)) for key, value in structure.items())
    if isinstance(structure, tuple) and hasattr(structure, "_fields"):  # a namedtuple
        return type(structure)(*(map_cache(on_cache, on_tensor, value) for value in structure))
    if isinstance(structure, (list, tuple)):
        return type(structure)(map_cache(on_cache, on_tensor, value) for value in structure)
    return on_tensor(structure)
