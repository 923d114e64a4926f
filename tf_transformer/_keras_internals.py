"""The one place that touches Keras and TensorFlow internals (private attributes, `keras.src`, `tensorflow.python`).

Each function below does one thing the public API does not offer, and says why. An upgrade of Keras or
TensorFlow that moves one of them fails tests/test_keras_internals.py first, by name
(`relied_on_problems`), instead of a quantized model or a training run failing somewhere downstream.
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
    """Whether TensorFlow's process-wide op determinism is on.

    Why private: TensorFlow exports only `tf.config.experimental.enable_op_determinism`; reading the setting
    (and turning it off again, below) lives in `tensorflow.python.framework.config` alone.
    """
    from tensorflow.python.framework import config as tf_framework_config

    return tf_framework_config.is_op_determinism_enabled()


def disable_op_determinism() -> None:
    """Turns TensorFlow's process-wide op determinism off (restoring a caller's setting after a run).

    Why private: see `op_determinism_enabled`; TensorFlow exports no public way back.
    """
    from tensorflow.python.framework import config as tf_framework_config

    tf_framework_config.disable_op_determinism()


# --- Keras: the layer tree -----------------------------------------------------------------------------------


def sublayers(layer, include_self: bool = False):
    """Every layer under `layer`, depth first (and `layer` first with `include_self`), each once.

    Why private: Keras 3 has no public recursive listing (`Model.layers` lists only the direct children, and a
    `Layer` has none); `_flatten_layers` is what Keras itself walks for weights and quantization.
    """
    return list(layer._flatten_layers(include_self=include_self))


# --- Keras: replacing a built layer's variables --------------------------------------------------------------


@contextlib.contextmanager
def unlocked_variables(layer):
    """Within the block, `layer.add_weight` may add variables to the built `layer`.

    Why private: Keras locks a layer's variable tracker when `build` ends, and unlocks it only in its own
    wrapper of `quantize`, for the layer that wrapper belongs to; a quantization that replaces a built
    layer's variables from outside that wrapper needs `_tracker.unlock()` / `lock()`.
    """
    tracker = layer._tracker
    was_locked = tracker.locked
    tracker.unlock()
    try:
        yield
    finally:
        if was_locked:
            tracker.lock()


def drop_variable(layer, name: str) -> None:
    """Deletes the variable attribute `layer.<name>` and untracks it, as `del layer.<name>` does, without the
    `gc.collect()` Keras' `Layer.__delattr__` runs for every dropped variable.

    Why private: that collection costs about 0.6 s per variable in a process with TensorFlow loaded (16 s for
    the tiny preset's 27 kernels); the public `del` offers no way around it, and patching `gc.collect` would be
    process-wide. The caller collects once when done (`tf_transformer.layers._quantized`). What is skipped is
    only the collection: the untracking (`_untrack_variable`) and the deletion below the Keras `Layer` class are
    `Layer.__delattr__`'s own steps.
    """
    variable = getattr(layer, name)
    if not isinstance(variable, keras.Variable):
        raise TypeError(f"{layer.name}.{name} is a {type(variable).__name__}, not a variable")
    layer._untrack_variable(variable)
    super(keras.layers.Layer, layer).__delattr__(name)


def dense_kernel_variable(dense):
    """The variable that holds a `keras.layers.Dense` kernel (int8 after `quantize_dense_int8`).

    Why private: the public `Dense.kernel` is a computed property (LoRA's update added, int4 unpacked) that
    may return a tensor; reading the int8 values and matching the variable by identity needs `_kernel`.
    """
    return dense._kernel


def quantize_dense_int8(dense, config) -> None:
    """Keras' `Dense.quantize("int8", config=config)`, the same variables, values and dtype policy, without the
    per-variable `gc.collect()` (see `drop_variable`).

    Why private: `Dense.quantize` drops the float kernel with `del self._kernel`; this runs its int8 branch step
    by step (the weight quantizer, `quantized_build`, the assignments, the `int8_from_<policy>` dtype policy),
    dropping the kernel through `drop_variable`. tests/test_keras_internals.py checks it against Keras' own.
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
    """Marks `layer` as quantized for Keras: its wrapper of `quantize` then refuses a second call, and setting a
    quantized dtype policy does not quantize it again.

    Why private: Keras sets `_is_quantized` only in its own layers' `quantized_build`; a layer that quantizes
    kernels of its own (attention, embeddings, the model) has no public way to say it did.
    """
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
