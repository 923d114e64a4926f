"""The peer harness (../shared/bench) for the benchmarks that time its workload."""

import os
import pathlib

import pytest

BENCH_DIR = pathlib.Path(__file__).resolve().parents[3] / "shared" / "bench"


@pytest.fixture(scope="module")
def bench_dir():
    if not (BENCH_DIR / "common.py").is_file():
        message = f"the peer harness is not at {BENCH_DIR}"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI always has ../shared beside the clone
        pytest.skip(message)
    return BENCH_DIR
