"""benchmarks/decoding_paths.py: graph mode and XLA timed on a file and per call, as one JSON object."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "decoding_paths.py"
MODEL_DIR = ROOT / "tests" / "fixtures" / "release_0_1_model"  # a tiny trained model directory


def run(*arguments):
    return subprocess.run([sys.executable, str(SCRIPT), f"--model_dir={MODEL_DIR}", *arguments], capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def test_times_each_path_on_the_file_and_per_call(tmp_path):
    sources = tmp_path / "sources.txt"
    sources.write_text("a man rides a horse .\ntwo dogs play in the snow .\na woman reads a book in the park .\n")
    out = tmp_path / "paths.json"
    result = run(f"--sources={sources}", "--methods=greedy", "--rows=2", "--calls=2", f"--out={out}")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report == json.loads(out.read_text()) and report["sentences"] == 3
    assert [(r["precision"], r["method"], r["path"]) for r in report["results"]] == [
        ("float32", "greedy", "graph"), ("float32", "greedy", "xla")]  # fmt: skip
    graph, xla = report["results"]
    for measured in (graph, xla):
        assert 0 < measured["file"]["second_pass_s"] <= measured["file"]["first_pass_s"] + 1
        assert measured["file"]["sentences_per_s"] > 0 and measured["calls"]["2"]["median_ms"] > 0
    # XLA compiled one program per bucketed shape; graph mode compiles none.
    assert graph["file"]["shapes"] == 0 and xla["file"]["shapes"] >= 1 and xla["calls"]["2"]["shapes"] >= 1


def test_bad_arguments_are_one_error_line_before_tensorflow_starts(tmp_path):
    result = run(f"--sources={tmp_path}/none.txt", "--precisions=float16")
    assert result.returncode != 0
    assert result.stderr.strip() == ("error: --precisions=float16: use one or more of float32, mixed_bfloat16, "
                                     "comma-separated")  # fmt: skip
    result = run(f"--sources={tmp_path}/none.txt")
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        f"error: {tmp_path}/none.txt: no such file. Fix: set --sources to an existing text or gzip file.")
    result = subprocess.run([sys.executable, str(SCRIPT), f"--model_dir={tmp_path}", f"--sources={SCRIPT}"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2 and result.stderr.strip().endswith(
        f"error: model_dir: {tmp_path}/config.json does not exist, so {tmp_path} is not a trained model directory. "
        "Fix: pass the --model_dir that tft-train wrote.")
