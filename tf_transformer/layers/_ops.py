"""Small tensor helpers shared by the layers (private), in `keras.ops`, with the TensorFlow fast paths of
`_tf_fast` taken under that backend."""

from __future__ import annotations

from keras import ops

from tf_transformer.layers import _tf_fast


def dense(inputs, kernel, bias=None, transpose_kernel=False):
    """`inputs [..., d_in] @ kernel [d_in, units]` (+ bias) -> `[..., units]`, as one 2-D MatMul: on CPU a
    rank-3 matmul is a slower BatchMatMulV2, gradient included (benchmarks/NOTES.md, entry 1). With
    `transpose_kernel`, `kernel` is `[units, d_in]`. Static sizes are kept.
    """
    d_in = kernel.shape[1] if transpose_kernel else kernel.shape[0]
    rows = ops.reshape(inputs, (-1, d_in))
    if _tf_fast.ENABLED:
        outputs = _tf_fast.matmul_rows(rows, kernel, bias, transpose_kernel)
    else:
        outputs = ops.matmul(rows, ops.transpose(kernel) if transpose_kernel else kernel)
        outputs = outputs if bias is None else outputs + bias
    return unflatten_rows(outputs, inputs)


def unflatten_rows(outputs, inputs):
    """`outputs [rows, units]` of `inputs [..., d_in]` viewed as rows, back to `[..., units]`, keeping the static
    sizes of `inputs` (XLA and the decoders' loop shapes need them)."""
    sizes = ops.shape(inputs)[:-1]  # static where known, else (TensorFlow) a scalar tensor
    return ops.reshape(outputs, (*sizes, outputs.shape[-1]))


def matmul_keys(queries, keys):
    """`queries [..., q, d] @ keys [..., k, d]^T` -> `[..., q, k]`."""
    if _tf_fast.ENABLED:
        return _tf_fast.matmul_keys(queries, keys)
    return ops.matmul(queries, ops.swapaxes(keys, -1, -2))


def split(tensor, sizes, axis=-1):
    """`tensor` cut along `axis` into pieces of `sizes` (ints)."""
    if _tf_fast.ENABLED:
        return _tf_fast.split(tensor, sizes, axis)
    return ops.split(tensor, [sum(sizes[: index + 1]) for index in range(len(sizes) - 1)], axis=axis)


def gather(params, indices, axis=0):
    """`params` at `indices` (non-negative) along `axis`."""
    if _tf_fast.ENABLED:
        return _tf_fast.gather(params, indices, axis)
    return ops.take(params, indices, axis=axis)


def softmax(logits):
    """Softmax over the last axis, also of size 1 (the keys of a growing cache's first step), without
    `keras.ops.softmax`'s warning about that size."""
    if _tf_fast.ENABLED:
        return _tf_fast.softmax(logits)
    exponentials = ops.exp(logits - ops.max(logits, axis=-1, keepdims=True))
    return exponentials / ops.sum(exponentials, axis=-1, keepdims=True)
