"""The one place that touches Keras and TensorFlow internals (private attributes, `keras.src`, `tensorflow.python`).

Each function below does one thing the public API does not offer, and says why (in a comment at the private use,
or its docstring). An upgrade of Keras or TensorFlow that moves one of them fails tests/test_keras_internals.py
first, by name (`relied_on_problems`), instead of a quantized model or a training run failing somewhere downstream.
"""

from __future__ import annotations

import contextlib

import keras

# Last checked with these versions (tests/test_keras_internals.py names them when an upgrade breaks something).
CHECKED_KERAS_VERSION = "3.15"
CHECKED_TENSORFLOW_VERSION = "2.21"

INT8 = "int8"


def versions() -> str:
    """The installed "keras X, tensorflow Y", for the upgrade messages."""
    import tensorflow as tf

    return f"keras {keras.__version__}, tensorflow {tf.__version__}"


# --- TensorFlow: op determinism ------------------------------------------------------------------------------


def op_determinism_enabled() -> bool:
    """Whether TensorFlow's process-wide op determinism is on."""
    # Private: TensorFlow exports only `enable_op_determinism`; reading it and turning it off are not public.
    from tensorflow.python.framework import config as tf_framework_config

    return tf_framework_config.is_op_determinism_enabled()


def disable_op_determinism() -> None:
    """Turns TensorFlow's process-wide op determinism off (to restore a caller's setting after a run)."""
    # Private: see `op_determinism_enabled`.
    from tensorflow.python.framework import config as tf_framework_config

    tf_framework_config.disable_op_determinism()


# --- Keras: the layer tree -----------------------------------------------------------------------------------


def sublayers(layer, include_self: bool = False):
    """The list of every layer under `layer`, depth first (`layer` first with `include_self`), each once."""
    # Private: Keras 3 lists only direct children publicly (`Model.layers`); Keras itself walks `_flatten_layers`.
    return list(layer._flatten_layers(include_self=include_self))


# --- Keras: replacing a built layer's variables --------------------------------------------------------------


@contextlib.contextmanager
def unlocked_variables(layer):
    """Within the block, `layer.add_weight` may add variables to the built `layer`."""
    # Private: Keras locks the tracker when `build` ends and unlocks it only inside its own `quantize` wrapper.
    tracker = layer._tracker
    was_locked = tracker.locked
    tracker.unlock()
    try:
        yield
    finally:
        if was_locked:
            tracker.lock()


def drop_variable(layer, name: str) -> None:
    """Deletes and untracks the variable `layer.<name>` as `del layer.<name>` does, but without the full
    `gc.collect()` Keras' `Layer.__delattr__` runs per variable, which dominates quantizing a model with
    TensorFlow loaded; the caller collects once when done. Raises TypeError if `layer.<name>` is no variable.
    """
    variable = getattr(layer, name)
    if not isinstance(variable, keras.Variable):
        raise TypeError(f"{layer.name}.{name} is a {type(variable).__name__}, not a variable")
    # Private: `Layer.__delattr__`'s own steps less its collection; patching `gc.collect` would be process-wide.
    layer._untrack_variable(variable)
    super(keras.layers.Layer, layer).__delattr__(name)


def dense_kernel_variable(dense):
    """The variable that holds a `keras.layers.Dense` kernel (int8 after `quantize_dense_int8`)."""
    # Private: the public `Dense.kernel` is computed (LoRA added, int4 unpacked) and may be a tensor, not the variable.
    return dense._kernel


def quantize_dense_int8(dense, config) -> None:
    """Keras' `Dense.quantize("int8", config=config)`, the same variables, values and dtype policy, without the
    per-variable `gc.collect()` (see `drop_variable`). Raises ValueError if `dense` is already quantized.

    Why private: it replays the int8 branch of `Dense.quantize`, which drops the float kernel with `del`;
    tests/test_keras_internals.py checks the result against Keras' own.
    """
    if getattr(dense, "_is_quantized", False):
        raise ValueError(f"Layer '{dense.name}' is already quantized. Fix: quantize a model once.")
    kernel = dense._kernel
    kernel_shape = tuple(kernel.shape)
    values, scale = config.weight_quantizer(kernel, to_numpy=True)
    scale = keras.ops.squeeze(scale, axis=0)
    dense.quantization_config = config
    with unlocked_variables(dense):
        drop_variable(dense, "_kernel")
        dense.quantized_build(kernel_shape, INT8, config)  # sets `_is_quantized`
    dense._kernel.assign(values)
    dense.kernel_scale.assign(scale)
    if dense.dtype_policy.quantization_mode is None:
        dense.dtype_policy = keras.dtype_policies.get(f"{INT8}_from_{dense.dtype_policy.name}")


def mark_quantized(layer) -> None:
    """Marks `layer` quantized: Keras refuses a second `quantize`, and a quantized dtype policy won't redo it."""
    # Private: Keras sets this only in its own layers' `quantized_build`; layers that quantize their own kernels
    # (attention, embeddings, the model) have no public way to say so.
    layer._is_quantized = True


# --- The check behind tests/test_keras_internals.py ----------------------------------------------------------


def relied_on_problems() -> list:
    """What of the above is missing in the installed Keras and TensorFlow (empty when all is there)."""
    from tensorflow.python.framework import config as tf_framework_config

    problems = []
    for name in ("is_op_determinism_enabled", "disable_op_determinism"):
        if not callable(getattr(tf_framework_config, name, None)):
            problems.append(f"tensorflow.python.framework.config.{name} is gone")
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    for name in ("_flatten_layers", "_untrack_variable", "_tracker", "quantized_build"):
        if not hasattr(layer, name):
            problems.append(f"keras.layers.Layer.{name} is gone")
    tracker = getattr(layer, "_tracker", None)
    if tracker is not None and not all(hasattr(tracker, name) for name in ("locked", "lock", "unlock")):
        problems.append("a layer's _tracker no longer has locked / lock() / unlock()")
    if not isinstance(getattr(layer, "_kernel", None), keras.Variable):
        problems.append("keras.layers.Dense no longer keeps its kernel variable in _kernel")
    if not hasattr(keras.layers.Layer, "_check_quantize_args"):
        problems.append("keras.layers.Layer._check_quantize_args (which reads _is_quantized) is gone")
    return problems
