"""The precision a run trains in: `resolve_precision` turns "auto" into a policy for the hardware at hand.

bfloat16 has float32's exponent range, so `mixed_bfloat16` needs no loss scaling; it is faster than float32 where
the hardware multiplies bf16 natively (GPUs of compute capability 8.0+, TPUs, CPUs with AVX-512 BF16 or AMX) and
slower where bf16 is emulated (benchmarks/NOTES.md, entry 15). "auto" never picks `mixed_float16`: it can overflow
and needs loss scaling, so it stays something to ask for by name.

`train` sets two process-wide numerics settings, the dtype policy and (with `deterministic`) op determinism; the
decorators here give the caller back its own.
"""

from __future__ import annotations

import functools
import pathlib
import sys
from typing import Collection, Optional, Sequence

import keras
import tensorflow as tf

from tf_transformer import _keras_internals

AUTO = "auto"
FLOAT32 = "float32"
BFLOAT16 = "mixed_bfloat16"
CPUINFO = "/proc/cpuinfo"
# /proc/cpuinfo flags of instructions that multiply bf16: AVX-512 BF16 (Cooper Lake, Zen 4 and later) and AMX's
# bf16 tile multiply (Sapphire Rapids and later). TensorFlow's oneDNN kernels, on by default on such CPUs, use them.
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
GPU_BF16_CAPABILITY = (8, 0)  # Ampere: bf16 tensor cores


def read_cpu_flags(path=None) -> Optional[frozenset]:
    """The CPU's feature flags from `path` (default /proc/cpuinfo), or None where they cannot be known (not
    Linux, unreadable)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        text = pathlib.Path(path or CPUINFO).read_text(errors="replace")
    except OSError:
        return None
    flags = set()
    for line in text.splitlines():
        name, separator, value = line.partition(":")
        if separator and name.strip() == "flags":
            flags.update(value.split())
    return frozenset(flags)  # empty where the kernel names none (e.g. ARM, whose line is "Features")


def gpu_compute_capabilities() -> list:
    """(major, minor) of each visible GPU, None where TensorFlow reports none (e.g. not CUDA)."""
    capabilities = []
    for gpu in tf.config.list_physical_devices("GPU"):
        capability = tf.config.experimental.get_device_details(gpu).get("compute_capability")
        capabilities.append(tuple(capability) if capability else None)
    return capabilities


def resolve_precision(
    requested: str,
    *,
    cpu_flags: Optional[Collection[str]] = None,
    gpus: Optional[Sequence[Optional[tuple]]] = None,
    tpu: bool = False,
) -> tuple[str, str]:
    """The Keras dtype policy to train in, and why, for `TrainConfig.mixed_precision`.

    Args:
        requested: "auto", or a policy ("float32", "mixed_bfloat16", "mixed_float16"), which is returned as is.
        cpu_flags: the CPU's feature flags; None reads them from /proc/cpuinfo (`read_cpu_flags`).
        gpus: the compute capability, (major, minor) or None, of each GPU the run uses; None asks TensorFlow.
        tpu: the run uses a TPU strategy.

    Returns:
        (policy, reason), e.g. ("mixed_bfloat16", "auto: the CPU computes bf16 natively (avx512_bf16)").
    """
    if requested != AUTO:
        return requested, "as requested"
    if tpu:
        return BFLOAT16, "auto: TPUs compute bf16 natively"
    if gpus is None:
        gpus = gpu_compute_capabilities()
    if gpus:
        # Training runs on the GPUs; a replica without bf16 would be the slow one, so all must qualify.
        slow = [capability for capability in gpus if capability is None or tuple(capability) < GPU_BF16_CAPABILITY]
        if not slow:
            shown = ", ".join(f"{major}.{minor}" for major, minor in sorted(set(map(tuple, gpus))))
            return BFLOAT16, f"auto: the GPUs compute bf16 natively (compute capability {shown})"
        shown = ", ".join("unknown" if capability is None else "{}.{}".format(*capability) for capability in slow)
        return FLOAT32, (
            f"auto: not every GPU computes bf16 natively (compute capability {shown}; 8.0 or more needed); "
            "mixed_float16 may be faster there, but auto does not choose it: it needs loss scaling and can overflow "
            "(ask for it: --mixed_precision=mixed_float16)"
        )
    if cpu_flags is None:
        cpu_flags = read_cpu_flags()
    if cpu_flags is None:
        return FLOAT32, f"auto: the CPU's features are unknown (not Linux, or {CPUINFO} unreadable)"
    native = [flag for flag in CPU_BF16_FLAGS if flag in cpu_flags]
    if native:
        return BFLOAT16, f"auto: the CPU computes bf16 natively ({', '.join(native)})"
    return FLOAT32, f"auto: the CPU has neither {' nor '.join(CPU_BF16_FLAGS)}, so bf16 would be emulated (slower)"


def restores_dtype_policy(function):
    """Decorator: the global Keras dtype policy is restored when `function` returns or raises.

    `train` sets the policy so that the model it builds computes in it; callers in the same process (a
    notebook, a test suite) keep theirs.
    """

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        previous = keras.config.dtype_policy()
        try:
            return function(*args, **kwargs)
        finally:
            keras.config.set_dtype_policy(previous)

    return wrapper


def restores_op_determinism(function):
    """Decorator: TensorFlow's process-wide op determinism is as the caller had it when `function` returns or raises.

    `train(deterministic=True)` turns it on; left on, it would change the kernels (and so the numerics) of
    everything the caller runs next in the process (a notebook, a test suite's later tests).
    """

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        # TensorFlow exports only the enabling side of op determinism: reading and undoing it are internals.
        was_enabled = _keras_internals.op_determinism_enabled()
        try:
            return function(*args, **kwargs)
        finally:
            if not was_enabled:
                _keras_internals.disable_op_determinism()

    return wrapper
