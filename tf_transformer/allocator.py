"""How the commands' process allocates memory: glibc's malloc keeps what TensorFlow frees, for the next step.

Buffers that TensorFlow's CPU kernels take from malloc directly (outside TensorFlow's own allocator: Eigen's
temporaries, oneDNN's) are freed and taken again on every training step. `tf.distribute`'s input iterator sets
glibc's trim threshold, which turns its adaptive mmap threshold off, so each of those over 128 KiB, and each too big
for a thread's 64 MiB arena, is a fresh `mmap`, given back by `munmap` when freed: every step writes to fresh pages,
one minor page fault for each 4 KiB. 200 steps of the README's command on 2 AVX-512 BF16 cores took 4.7 million
faults and 21 s of system time, 18% of the CPU (benchmarks/NOTES.md, entry 28). `keep_freed_memory` has malloc
serve every thread from its main heap, never by `mmap`, and keep the heap's freed top: the buffers are reused, and
the same 200 steps took 0.4 million faults and 10 s, with a lower peak RSS than glibc's one arena per thread.

The price is that the process keeps its peak heap until it exits, as TensorFlow's own GPU allocator does; the
commands reach that peak on their first steps anyway. Library users who want the same in their own scripts call
`keep_freed_memory()` before importing TensorFlow, or set glibc's `MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0
MALLOC_TRIM_THRESHOLD_=1073741824` in the environment.

An allocator the user preloads (tcmalloc, jemalloc, mimalloc by `LD_PRELOAD`) is left alone. On an AVX2-only CPU
none trained faster beyond the machine's spread, malloc being 1.6% of the step's CPU there; mimalloc held half the
peak memory (benchmarks/NOTES.md, entry 36).
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Optional

# mallopt's parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
_SETTINGS = {_M_ARENA_MAX: 1, _M_MMAP_MAX: 0, _M_TRIM_THRESHOLD: 1 << 30}
_USER_SETTINGS = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")


def keep_freed_memory() -> Optional[str]:
    """Has glibc's malloc keep freed memory for reuse (the module docstring says why); one line for the log.

    Call it before TensorFlow starts its threads (before `import tensorflow`): a thread that already has an arena of
    its own keeps it. Changes nothing where the C library is not glibc, or where the environment sets glibc's
    malloc settings (`MALLOC_*`, `GLIBC_TUNABLES` with `glibc.malloc`): the user chose.

    Returns:
        What was done, for the command's log line ("glibc malloc keeps freed memory for reuse (one arena, no
        mmap, no trim)"), or None where nothing was done. Where another allocator serves malloc (`LD_PRELOAD` of
        tcmalloc, jemalloc or mimalloc: benchmarks/NOTES.md entry 36), nothing is set and the line names it.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    provider = malloc_provider()
    if provider is not None and not os.path.basename(provider).startswith("libc."):
        return f"malloc is {os.path.basename(provider)}'s (preloaded), not glibc's: left as it is"
    if any(name in os.environ for name in _USER_SETTINGS) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return "glibc malloc as the environment sets it (MALLOC_* or GLIBC_TUNABLES)"
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    if all(mallopt(parameter, value) == 1 for parameter, value in _SETTINGS.items()):
        return "glibc malloc keeps freed memory for reuse (one arena, no mmap, no trim)"
    return "glibc malloc's defaults (mallopt refused a setting)"


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p), ("dli_sname", ctypes.c_char_p),
                ("dli_saddr", ctypes.c_void_p)]  # fmt: skip


def malloc_provider() -> Optional[str]:
    """The file of the shared library whose `malloc` this process calls (glibc's libc.so.6, or a preloaded
    allocator's), or None where the dynamic linker cannot say."""
    try:
        process = ctypes.CDLL(None)
        info = _DlInfo()
        found = process.dladdr(ctypes.cast(process.malloc, ctypes.c_void_p), ctypes.byref(info))
    except (OSError, AttributeError):
        return None
    return info.dli_fname.decode() if found and info.dli_fname else None
