"""benchmarks/step_floor.py: a decoding step's matrix products timed per kernel and rows, as one JSON object."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "step_floor.py"


def run(bench_dir, *args):
    command = [sys.executable, str(SCRIPT), "--bench_dir", str(bench_dir), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))  # fmt: skip


def test_times_every_product_of_a_step_for_each_kernel_and_row_count(bench_dir, tmp_path):
    out = tmp_path / "floor.json"
    result = run(bench_dir, "--rows", "1,3", "--kernels", "float32,bfloat16", "--steps", "3", "--calls", "1",
                 "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report == json.loads(out.read_text())
    # The harness's model: 6 matrices a decoder layer, 3 layers, and the output projection.
    assert report["matrices_per_step"] == 19
    assert report["weight_bytes_float32"] == 4 * (3 * (256 * 768 + 3 * 256 * 256 + 2 * 256 * 1024) + 256 * 8000)
    assert [(r["kernel"], r["rows"]) for r in report["results"]] == [
        ("float32", 1), ("float32", 3), ("bfloat16", 1), ("bfloat16", 3)]  # fmt: skip
    for measured in report["results"]:
        assert measured["step_ms"] > 0 and measured["steps_per_s"] == pytest.approx(1e3 / measured["step_ms"], 0.01)


def test_an_unknown_kernel_is_refused_with_the_choices(bench_dir):
    result = run(bench_dir, "--kernels", "float32,int4")
    assert result.returncode == 2
    assert "unknown int4" in result.stderr and "float32_xla" in result.stderr
