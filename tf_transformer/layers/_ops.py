"""Small tensor helpers shared by the layers (private)."""

from __future__ import annotations

import tensorflow as tf


def dense(inputs, kernel, bias=None, transpose_kernel=False):
    """`inputs [..., d_in] @ kernel [d_in, units]` (+ bias) -> `[..., units]`, as one 2-D MatMul: on CPU a
    rank-3 `tf.matmul` is a slower BatchMatMulV2, gradient included (benchmarks/NOTES.md, entry 1). With
    `transpose_kernel`, `kernel` is `[units, d_in]`. Static sizes are kept.
    """
    d_in = kernel.shape[1] if transpose_kernel else kernel.shape[0]
    outputs = tf.matmul(tf.reshape(inputs, [-1, d_in]), kernel, transpose_b=transpose_kernel)
    if bias is not None:
        outputs = tf.nn.bias_add(outputs, bias)
    return unflatten_rows(outputs, inputs)


def unflatten_rows(outputs, inputs):
    """`outputs [rows, units]` of `inputs [..., d_in]` viewed as rows, back to `[..., units]`, keeping the static
    sizes of `inputs` (XLA and the decoders' loop shapes need them)."""
    dynamic = tf.shape(inputs)
    shape = [size if size is not None else dynamic[axis] for axis, size in enumerate(inputs.shape[:-1])]
    return tf.reshape(outputs, shape + [outputs.shape[-1]])
