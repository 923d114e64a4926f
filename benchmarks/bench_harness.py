"""The peer harness's `common.py` (../shared/bench), loaded by path: the benchmarks that time its workload share it
so that its sizes and timing protocol do not drift. Imports no TensorFlow (backend_steps.py loads it under JAX and
PyTorch too)."""

import importlib.util
import pathlib
import sys


def load_common(bench_dir):
    """The harness's `common.py` (workload constants, timing, the result writer)."""
    path = pathlib.Path(bench_dir) / "common.py"
    if not path.is_file():
        sys.exit(f"error: {path} not found. Fix: pass --bench_dir, the folder of the peer harness (../shared/bench).")
    spec = importlib.util.spec_from_file_location("bench_common", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
