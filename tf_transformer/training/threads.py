"""How many threads TensorFlow gives one op while training: one where a second costs more than it shares.

On 2 vCPUs of a KVM virtual machine that computes bf16 (AVX-512 BF16), the README's training ran as fast on one
thread an op as on TensorFlow's default of a thread per core (two runs each, alternated: 0.6% apart), with the
kernel's share of the CPU at 1.4% instead of 6.7% and 12% less CPU in all: the default's second thread mostly waited
to be woken for each small op's share (futex hand-offs; benchmarks/NOTES.md, entries 31 and 51). That is the only
kind of machine it was measured on, so only there (at most 2 cores, no GPU, bf16 on the CPU, one device) does `auto`
choose one thread; elsewhere TensorFlow keeps its default. The pool is made when TensorFlow starts its devices, so
this runs before that; a setting the user made (`TF_NUM_INTRAOP_THREADS`, `tf.config.threading`) is left as it is.
"""

from __future__ import annotations

import os
from typing import Collection, Optional, Sequence

import tensorflow as tf

from tf_transformer.training.precision import AUTO, BFLOAT16, resolve_precision

ENVIRONMENT = "TF_NUM_INTRAOP_THREADS"
MAX_CORES = 2  # measured on 2 cores; with more, an op's share per thread is larger
DEFAULT = "TensorFlow's default (a thread per core)"


def choose_intra_op_threads(
    requested_precision: str,
    num_cpu_devices: int = 0,
    strategy: str = "auto",
    *,
    cpu_count: Optional[int] = None,
    cpu_flags: Optional[Collection[str]] = None,
    gpus: Optional[Sequence] = None,
) -> tuple[Optional[int], str]:
    """(1, why) on the measured kind of machine (the module docstring), else (None, why): TensorFlow's default.

    The first three are `TrainConfig`'s fields (a multi-worker run must not list devices before its strategy
    exists). None for `cpu_count` (cores), `cpu_flags` and `gpus` reads the process's CPU affinity, /proc/cpuinfo
    and TensorFlow's physical devices (listing them does not start them)."""
    if strategy not in ("auto", "one_device") or num_cpu_devices > 1:
        return None, DEFAULT
    cores = cpu_count if cpu_count is not None else _usable_cores()
    if gpus is None:
        gpus = tf.config.list_physical_devices("GPU")
    if gpus or cores > MAX_CORES:
        return None, DEFAULT
    # bf16 asked for ("auto" resolves to it exactly where the CPU computes it) and computed natively.
    native = resolve_precision(AUTO, cpu_flags=cpu_flags, gpus=[])[0] == BFLOAT16
    if requested_precision not in (AUTO, BFLOAT16) or not native:
        return None, "TensorFlow's default (a thread per core; one thread an op was measured only in native bf16)"
    return 1, f"auto: {cores} cores training in bf16, where a second thread an op costs more than it shares"


def configure_intra_op_threads(requested_precision: str, num_cpu_devices: int = 0, strategy: str = "auto",
                               **machine) -> str:
    """Gives TensorFlow `choose_intra_op_threads`' count, unless the user set one; what was done, for the log's
    `Threads:` line. `machine` passes `choose_intra_op_threads`' keyword arguments (tests)."""
    if os.environ.get(ENVIRONMENT):
        return f"{os.environ[ENVIRONMENT]} an op, as the environment sets it ({ENVIRONMENT})"
    already = tf.config.threading.get_intra_op_parallelism_threads()
    if already:
        return f"{already} an op, as tf.config.threading sets it"
    threads, reason = choose_intra_op_threads(requested_precision, num_cpu_devices, strategy, **machine)
    if threads is None:
        return reason
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    except RuntimeError:  # TensorFlow started before `train` (a script that ran an op first)
        return "TensorFlow's default (it had started before training: its threads can no longer change)"
    return f"{threads} an op ({reason})"


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
