"""The TensorFlow-only fast paths of the layers and models (private): the one module of `tf_transformer.layers`
and `tf_transformer.models` that imports TensorFlow (tests/test_code_shape.py holds the fence).

Everything else there is `keras.ops`, and runs on JAX and PyTorch too. Each function here is taken only when
`ENABLED` (the Keras backend is TensorFlow); its caller holds the `keras.ops` path the other backends take, which
computes the same values. These keep the exact TensorFlow ops the package's speed and pinned outputs were
measured with (benchmarks/NOTES.md), where `keras.ops` would lower differently, and give the graph-only pieces
that the decoders' `tf.while_loop` and the SavedModel need:

- `matmul_rows`: one 2-D MatMul with `transpose_b` and a BiasAdd, which oneDNN fuses (`keras.ops` has no
  transposed product: it would add a Transpose, and its `+` is an AddV2).
- `matmul_keys`: queries times transposed keys as one BatchMatMulV2 with `adj_y`.
- `split`: one SplitV by sizes (`keras.ops.split` takes indices and computes the sizes in the graph).
- `softmax`: `tf.nn.softmax` (`keras.ops.softmax` warns about a size-1 axis, which the first step of a growing
  cache has).
- `gather`: `tf.gather`, a ResourceGather on a variable (`keras.ops.take` reads the whole variable and adds a
  negative-index fix-up at every beam-search step).
- `position_rows`: the rows of a position table, with the length checked when the graph runs.
- `shape_invariant`: a cache tensor's `tf.while_loop` shape invariant.
"""

from __future__ import annotations

import keras

ENABLED = keras.backend.backend() == "tensorflow"
if ENABLED:
    import tensorflow as tf


def matmul_rows(rows, kernel, bias=None, transpose_kernel=False):
    """`rows [n, d_in] @ kernel (+ bias)` -> `[n, units]`; with `transpose_kernel`, `kernel` is `[units, d_in]`."""
    outputs = tf.matmul(rows, kernel, transpose_b=transpose_kernel)
    return outputs if bias is None else tf.nn.bias_add(outputs, bias)


def matmul_keys(queries, keys):
    """`queries [..., q, d] @ keys [..., k, d]^T` -> `[..., q, k]`."""
    return tf.matmul(queries, keys, transpose_b=True)


def split(tensor, sizes, axis=-1):
    return tf.split(tensor, sizes, axis=axis)


def softmax(logits):
    return tf.nn.softmax(logits, axis=-1)


def gather(params, indices, axis=0):
    return tf.gather(params, indices, axis=axis)


def position_rows(table, inputs, start_index, max_length):
    """`table[start_index : start_index + length][None]` for `inputs [batch, length, ...]`, asserting in the graph
    that the rows exist (a dynamic length or `start_index` cannot be checked while tracing)."""
    length = inputs.shape[1]
    dynamic_length = tf.shape(inputs)[1]
    check = tf.debugging.assert_less_equal(
        start_index + dynamic_length,
        max_length,
        message=f"a sequence is longer than max_length={max_length}: truncate it or raise max_length",
    )
    with tf.control_dependencies([check]):
        # A static size where there is one: with a tensor start_index, table[start:start + length] loses it,
        # and XLA then runs the whole decoder step on max_length positions.
        size = length if length is not None else dynamic_length
        return tf.slice(table, [start_index, 0], [size, -1])[tf.newaxis]


def shape_invariant(shape):
    """The `tf.TensorShape` of `shape` (a tuple, None for a size that varies across the loop)."""
    return tf.TensorShape(shape)
