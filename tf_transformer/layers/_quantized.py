"""Weight-only int8 kernels (private): how a layer stores, reads and quantizes them.

A quantized kernel keeps its attribute and variable name but holds int8 values, beside a float32
`<name>_scale` with one scale per output channel: Keras' own int8 scheme (`keras.quantizers.abs_max_quantize`,
scale = 127 / max|w|, values = round(w * scale), w ~ values / scale), the layout `keras.layers.Dense.quantize`
writes. Activations stay float: TensorFlow's CPU kernels multiply int8 by int8 several times slower than
float32 by float32 on an AVX2 CPU (benchmarks/NOTES.md, entry 24), so the kernels are dequantized where they
are read, and a decoding loop dequantizes its decoder's kernels once per call (`dequantized_kernels`, passed
back in through `substitute`) instead of once per step.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc

import keras
from keras import ops

from tf_transformer import _keras_internals

INT8 = "int8"
MODES = ("none", INT8)
# The int8 kernels of a decoding call, dequantized before its loop: variable path -> float tensor.
_SUBSTITUTES = contextvars.ContextVar("tf_transformer_dequantized_kernels", default=None)


def check_mode(mode) -> str:
    """`mode` if it is one of MODES, else a ValueError naming them."""
    if mode not in MODES:
        raise ValueError(f"quantize: expected one of {', '.join(MODES)}, got {mode!r}. Fix: pass int8 or none.")
    return mode


def quantize_values(kernel, axis):
    """`(int8 values, float32 scale)` of a float kernel, one scale per slice along the axes other than `axis`
    (the reduced axis: 0 for a `[d_in, units]` kernel, 1 for `[vocab, d_model]` embeddings), squeezed."""
    values, scale = keras.quantizers.abs_max_quantize(kernel, axis=axis, to_numpy=True)
    return values, ops.squeeze(scale, axis=axis)


def quantize_variable(layer, name, axis):
    """Replaces `layer.<name>` (a float variable) with int8 values and adds `layer.<name>_scale`, reducing `axis`.
    Raises ValueError if it is int8 already."""
    kernel = getattr(layer, name)
    if is_quantized(layer, name):
        raise ValueError(f"{layer.name}: {name} is already int8. Fix: quantize a model once.")
    values, scale = quantize_values(kernel, axis)
    shape = tuple(kernel.shape)
    with _keras_internals.unlocked_variables(layer):
        _keras_internals.drop_variable(layer, name)  # collected once by one_garbage_collection
        setattr(layer, name, layer.add_weight(name=name, shape=shape, initializer="zeros", dtype=INT8, trainable=False))
        setattr(
            layer,
            name + "_scale",
            layer.add_weight(name=name + "_scale", shape=tuple(scale.shape), initializer="ones", trainable=False),
        )
    getattr(layer, name).assign(values)
    getattr(layer, name + "_scale").assign(scale)


@contextlib.contextmanager
def one_garbage_collection():
    """One `gc.collect()` when the block ends, returning the memory of the float kernels that `quantize_variable`
    and `quantize_dense` dropped without Keras' collection per variable (`_keras_internals.drop_variable`)."""
    try:
        yield
    finally:
        gc.collect()


def is_quantized(layer, name) -> bool:
    return getattr(layer, name).dtype == INT8


def dequantize(values, scale, axis):
    """float32 `values / scale`, the scale broadcast along `axis` (the axis that was reduced)."""
    return ops.cast(values, "float32") / ops.expand_dims(ops.convert_to_tensor(scale), axis)


def read(layer, name, dtype, axis=0):
    """`layer.<name>` as a float kernel in `dtype`: the variable itself, or its int8 values dequantized (by
    the decoding loop before its first step, when it passed them to `substitute`)."""
    variable = getattr(layer, name)
    if variable.dtype != INT8:
        return ops.cast(variable, dtype)
    substitutes = _SUBSTITUTES.get()
    if substitutes is not None and variable.path in substitutes:
        return ops.cast(substitutes[variable.path], dtype)
    return ops.cast(dequantize(variable, getattr(layer, name + "_scale"), axis), dtype)


def quantize_dense(dense):
    """Keras' own int8 `Dense.quantize`, weight-only (no activation quantizer): int8 `kernel`, `kernel_scale`."""
    config = keras.quantizers.Int8QuantizationConfig(
        weight_quantizer=keras.quantizers.AbsMaxQuantizer(axis=0), activation_quantizer=None
    )
    _keras_internals.quantize_dense_int8(dense, config)


def is_int8_dense(dense) -> bool:
    """Whether `quantize_dense` quantized `dense` (Keras' int8 with an activation quantizer is not ours)."""
    return getattr(dense, "quantization_mode", None) == INT8 and getattr(dense, "inputs_quantizer", None) is None


def read_dense(dense, dtype):
    """The float kernel of a `Dense` that `quantize_dense` quantized (Keras keeps it as an int8 variable)."""
    variable = _keras_internals.dense_kernel_variable(dense)
    substitutes = _SUBSTITUTES.get()
    if substitutes is not None and variable.path in substitutes:
        return ops.cast(substitutes[variable.path], dtype)
    return ops.cast(dequantize(variable, dense.kernel_scale, 0), dtype)


def dequantized_kernels(layer) -> dict:
    """Every int8 kernel under `layer`, dequantized now: `{variable path: float32 tensor}` for `substitute`."""
    kernels = {}
    for sublayer in _keras_internals.sublayers(layer, include_self=True):
        for variable in sublayer.weights:
            if variable.dtype != INT8 or variable.path in kernels:
                continue
            owner_scale = _scale_of(sublayer, variable)
            if owner_scale is not None:
                kernels[variable.path] = dequantize(variable, *owner_scale)
    return kernels


def _scale_of(layer, variable):
    """`(scale, axis)` of an int8 variable that `layer` owns directly, else None."""
    if is_int8_dense(layer) and variable is _keras_internals.dense_kernel_variable(layer):
        return layer.kernel_scale, 0
    for name, axis in getattr(layer, "INT8_KERNELS", {}).items():
        if getattr(layer, name, None) is variable:
            return getattr(layer, name + "_scale"), axis
    return None


@contextlib.contextmanager
def substitute(kernels):
    """Within the block, `read` and `read_dense` take the kernels from `kernels` (from `dequantized_kernels`)."""
    if not kernels:
        yield
        return
    token = _SUBSTITUTES.set(kernels)
    try:
        yield
    finally:
        _SUBSTITUTES.reset(token)
