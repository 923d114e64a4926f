"""benchmarks/peer_workload.py: the model built under the precision asked for, and the variant named after it."""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "peer_workload.py"


def run(bench_dir, *args):
    # One sentence a call (BENCH_BATCH=1) and one timed call keep the harness's workload quick.
    environment = dict(os.environ, BENCH_BATCH="1", TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, str(SCRIPT), "--bench_dir", str(bench_dir), *args]
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)


def test_mixed_bfloat16_decodes_in_bf16_under_its_own_variant_name(bench_dir, tmp_path):
    out = tmp_path / "result.json"
    result = run(bench_dir, "--phases", "greedy", "--greedy_reps", "1", "--mixed_precision", "mixed_bfloat16",
                 "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    written = json.loads(out.read_text())
    assert written["variant"] == "graph-bf16"
    assert written["meta"]["mixed_precision"] == "mixed_bfloat16"
    assert written["meta"]["compute_dtype"] == "bfloat16"
    assert written["phases"]["greedy"]["tokens_per_s"] > 0
    assert set(written["phases"]) == {"greedy"}


def test_int8_with_bf16_is_refused_with_its_fix(bench_dir):
    result = run(bench_dir, "--quantize", "int8", "--mixed_precision", "mixed_bfloat16")
    assert result.returncode == 2
    assert "--quantize=int8 decodes in float32" in result.stderr and "Fix:" in result.stderr


def test_intra_op_threads_are_set_and_name_the_variant(bench_dir, tmp_path):
    out = tmp_path / "result.json"
    result = run(bench_dir, "--phases", "greedy", "--greedy_reps", "1", "--intra_op_threads", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    written = json.loads(out.read_text())
    assert written["variant"] == "graph-t1"
    assert written["meta"]["intra_op_threads"] == 1


def test_negative_intra_op_threads_are_refused(bench_dir):
    result = run(bench_dir, "--intra_op_threads", "-1")
    assert result.returncode == 2
    assert "--intra_op_threads must be 0 or more" in result.stderr
