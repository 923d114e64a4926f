"""tf_transformer/allocator.py: with `keep_freed_memory`, a freed buffer is reused without new page faults."""

import os
import platform
import subprocess
import sys

import pytest

# Takes, fills and frees a 64 MiB buffer with malloc four times, as TensorFlow's CPU kernels take their outputs, and
# prints the minor page faults of the last three rounds. By default glibc maps such a buffer afresh each round: 16,384
# faults of 4 KiB pages a round.
_ROUNDS = """
import ctypes, resource, sys
from tf_transformer.allocator import keep_freed_memory
print(keep_freed_memory(), file=sys.stderr)
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
faults = []
for _ in range(4):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buffer = libc.malloc(64 << 20)
    ctypes.memset(buffer, 1, 64 << 20)
    libc.free(buffer)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sum(faults[1:]))
"""


def _faults_after_the_first_round(**environment) -> tuple:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}, **environment}
    done = subprocess.run([sys.executable, "-c", _ROUNDS], capture_output=True, text=True, env=env, check=True)
    return int(done.stdout), done.stderr.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="it sets glibc's malloc, no other")
def test_a_freed_buffer_is_reused_without_page_faults_unless_the_environment_sets_malloc():
    faults, said = _faults_after_the_first_round()
    assert said.startswith("glibc malloc keeps freed memory") and faults < 3 * 16384 // 20, (faults, said)
    # The user's own glibc setting is left as it is: glibc's default maps the buffer afresh each round.
    faults, said = _faults_after_the_first_round(MALLOC_ARENA_MAX="4")
    assert said.startswith("glibc malloc as the environment sets it") and faults > 3 * 16384 * 0.9, (faults, said)


# A stand-in for tcmalloc or jemalloc preloaded by the user: a library whose malloc serves the process (it forwards
# to glibc's, so the process runs as before).
_INTERPOSER = (
    "#include <stddef.h>\nextern void *__libc_malloc(size_t);\nvoid *malloc(size_t n) { return __libc_malloc(n); }\n"
)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="it sets glibc's malloc, no other")
def test_a_preloaded_allocator_is_named_and_left_alone(tmp_path):
    (tmp_path / "interposer.c").write_text(_INTERPOSER)
    library = tmp_path / "libinterposer.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(tmp_path / "interposer.c")], check=True)
    probe = (
        "from tf_transformer.allocator import keep_freed_memory, malloc_provider\n"
        "print(malloc_provider())\nprint(keep_freed_memory())"
    )
    plain = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert os.path.basename(plain.splitlines()[0]).startswith("libc.") and "glibc malloc keeps" in plain, plain
    preloaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                               env={**os.environ, "LD_PRELOAD": str(library)}).stdout  # fmt: skip
    provider, said = preloaded.splitlines()
    assert provider == str(library), preloaded
    assert said == "malloc is libinterposer.so's (preloaded), not glibc's: left as it is", said
