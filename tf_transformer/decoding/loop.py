"""The decoders' `tf.while_loop` and its state: the model's cache (init, tile, reorder, shape invariants) and
fixed-shape writes.

Every decoder is a `tf.while_loop` whose loop variables keep one shape from the first step to the last
(except the length axis of a growing self-attention cache, relaxed in the loop's shape invariants), so the
same code runs eagerly, in a `tf.function` (also with an unknown batch and source length) and under XLA
(`tf.function(jit_compile=True)`, with the decoder's own `jit_compile=True`), and saves in a SavedModel.
"""

from __future__ import annotations

import tensorflow as tf

from tf_transformer.layers import KeyValueCache


def write_column(buffer, column, values):
    """`buffer` `[..., T]` with `values` `[...]` at position `column`: a select, so shapes never change."""
    positions = tf.range(tf.shape(buffer)[-1])
    return tf.where(tf.equal(positions, column), values[..., tf.newaxis], buffer)


def keep_shapes(new, old):
    """`new` with the static shapes of `old` (its shape invariants): a layer may lose a static size, and a
    loop variable may not."""

    def restore(new_tensor, shape):
        if new_tensor.shape == shape:
            return new_tensor
        return tf.ensure_shape(new_tensor, shape)

    return tf.nest.map_structure(restore, new, shape_invariants(old))


def check_jit_compile(jit_compile):
    """A ValueError unless `jit_compile` is a bool (a truthy tensor or string would silently pick a mode)."""
    if not isinstance(jit_compile, bool):
        raise ValueError(
            f"jit_compile: must be True or False, got {jit_compile!r}. Fix: pass True when the decoder runs in a "
            "`tf.function(jit_compile=True)`, else False."
        )


def init_decoding_cache(model, memory, plan, jit_compile=False):
    """The model's decoder cache: growing self-attention caches, or fixed buffers for XLA (`jit_compile`).

    A fixed buffer is rewritten whole at every step (a select over `[batch, heads, buffer_length, d]`, and in
    beam search a gather of it); a growing cache copies only the filled part (benchmarks/NOTES.md, entry 7
    has the figures). XLA needs the fixed shapes.
    """
    return model.init_cache(memory, plan.buffer_length if jit_compile else None)


def while_loop(cond, body, initial, jit_compile):
    """`tf.while_loop` over the decoder state, the length axis of growing caches relaxed.

    TensorFlow has no public way to ask whether a trace is for XLA, so the caller says it (`jit_compile`).
    A growing cache compiled by XLA fails with "Input and output shapes of loop body do not match" at this
    loop: its name, which XLA's message quotes, says the fix.
    """
    name = "decoder_loop" if jit_compile else "growing_cache_loop_Fix_under_XLA_pass_jit_compile_True"
    return tf.while_loop(cond, body, initial, shape_invariants=shape_invariants(initial), name=name)


def decoding_constants(model):
    """Extra `decode` arguments computed once per decoding call (`Transformer.decoding_constants`), or {}
    for a model without them."""
    constants = getattr(model, "decoding_constants", None)
    return constants() if constants is not None else {}


def shape_invariants(loop_vars):
    """`tf.while_loop` shape invariants: each tensor's shape, each `KeyValueCache`'s own (a growing cache's
    length axis None)."""
    return map_cache(lambda cache: cache.shape_invariants(), lambda tensor: tf.TensorShape(tensor.shape), loop_vars)


def tile_cache(cache, beam_size):
    """The model's cache with a row per hypothesis (`[batch, ...]` -> `[batch * beam_size, ...]`): every
    `KeyValueCache` tiles itself (a cross-attention cache stays one row per sentence); any other tensor
    (a stand-in model's state) is per-hypothesis state, repeated."""
    return map_cache(lambda kv: kv.tile(beam_size), lambda tensor: tf.repeat(tensor, beam_size, axis=0), cache)


def reorder_cache(cache, rows):
    """The model's cache following beam search's parents: row i takes row `rows[i]` (int32 `[batch *
    beam_size]`), in every `KeyValueCache` that `reorder`s and in every other tensor."""
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
