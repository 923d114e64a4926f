"""What a process pays to start: the time to import TensorFlow (or any module), and the modules that take it.

Every command, test worker and child process imports TensorFlow before its first op, so its import time is paid
once per `tft-*` command and about 70 times per test suite. For each module of `--modules`, in interleaved rounds,
a fresh `python -X importtime -c "import <module>"`:

- `wall_s`, `cpu_s`: the import's wall time and CPU (user + system, from the child's resource usage);
- `slowest_modules`: the modules with the most import time of their own (not counting what they import),
  milliseconds, median over the rounds: what to look at first (benchmarks/NOTES.md entry 41 found ml_dtypes 0.7.0
  there, 1.3 s).

Prints one JSON object with the versions of the packages that decide it.

    python benchmarks/startup.py --rounds=3
    python benchmarks/startup.py --modules=tensorflow,keras,jax --rounds=3
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

PACKAGES = ("tensorflow", "keras", "numpy", "ml-dtypes", "jax", "matplotlib")


def main(argv=None):
    args = parse_args(argv)
    modules = args.modules.split(",")
    runs = {module: [] for module in modules}
    for round_index in range(args.rounds):
        for module in modules if round_index % 2 == 0 else modules[::-1]:  # neither always first
            runs[module].append(timed_import(module))
    print(json.dumps({
        "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "rounds": args.rounds,
        "versions": {name: installed_version(name) for name in PACKAGES},
        **{module: summary(module_runs, args.top) for module, module_runs in runs.items()},
    }))  # fmt: skip


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modules", default="tensorflow", help="comma-separated modules, each imported alone")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=8, help="how many of the slowest modules to list")
    return parser.parse_args(argv)


def timed_import(module: str) -> dict:
    """One fresh interpreter importing `module`: its wall time, CPU and each module's own import time (ms)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"error: `import {module}` failed:\n{result.stderr[-2000:]}\nFix: install it, or leave it out of --modules.")
    own_ms = {}
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            own_us, _, name = line[len("import time:") :].split("|")
            own_ms[name.strip()] = int(own_us) / 1000
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "own_ms": own_ms}


def summary(runs: list, top: int) -> dict:
    names = set().union(*(run["own_ms"] for run in runs))
    median_ms = {name: statistics.median(run["own_ms"].get(name, 0.0) for run in runs) for name in names}
    slowest = sorted(median_ms.items(), key=lambda item: -item[1])[:top]
    return {
        "wall_s": [round(run["wall_s"], 2) for run in runs],
        "cpu_s": [round(run["cpu_s"], 2) for run in runs],
        "median_wall_s": round(statistics.median(run["wall_s"] for run in runs), 2),
        "median_cpu_s": round(statistics.median(run["cpu_s"] for run in runs), 2),
        "slowest_modules": {name: round(ms) for name, ms in slowest},
    }


def installed_version(name: str):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
