"""Small tensor helpers shared by the layers (private)."""

from __future__ import annotations

import tensorflow as tf


def dense(inputs, kernel, bias=None, transpose_kernel=False):
    """`inputs [..., d_in] @ kernel [d_in, units]` (+ bias) as one 2-D MatMul.

    `tf.matmul` of a rank-3 tensor and a matrix becomes a broadcasting BatchMatMulV2, which on CPU runs
    slower than MatMul on the `[batch * length, d_in]` view (and so does its gradient; benchmarks/NOTES.md,
    entry 1); the reshapes are free. Static sizes are kept (XLA and the decoders' loop shapes need them).
    """
    d_in = kernel.shape[1] if transpose_kernel else kernel.shape[0]
    outputs = tf.matmul(tf.reshape(inputs, [-1, d_in]), kernel, transpose_b=transpose_kernel)
    if bias is not None:
        outputs = tf.nn.bias_add(outputs, bias)
    return unflatten_rows(outputs, inputs)


def unflatten_rows(outputs, inputs):
    """`outputs [rows, units]` computed from `inputs [..., d_in]` viewed as rows, back to `[..., units]`.

    Static sizes of `inputs` are kept (XLA and the decoders' loop shapes need them).
    """
    dynamic = tf.shape(inputs)
    shape = [size if size is not None else dynamic[axis] for axis, size in enumerate(inputs.shape[:-1])]
    return tf.reshape(outputs, shape + [outputs.shape[-1]])
