"""benchmarks/trainer_steps.py on a tiny model: its three figures, and a clear error without the data."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "trainer_steps.py"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
TINY = ["d_model=16", "d_ff=32", "num_heads=2", "num_encoder_layers=1", "num_decoder_layers=1", "vocab_size=1000"]


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    """A folder the first benchmark run builds its vocabulary in and the next reads it from (13 s less)."""
    return tmp_path_factory.mktemp("trainer_steps") / "vocab"


def test_prints_the_three_step_times_of_a_tiny_model(tmp_path, multi30k_dir, vocab_dir):
    out = tmp_path / "result.json"
    command = [
        sys.executable, str(SCRIPT), f"--data_dir={multi30k_dir}", "--mixed_precision=float32",
        f"--vocab_dir={vocab_dir}", "--batch_tokens=512", "--batches=3", "--fixed_steps=2", "--fit_steps=2",
        "--fit_epochs=2", f"--out={out}",
        *(f"--override={override}" for override in TINY),
    ]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300, env=ENV)
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout)
    assert result == json.loads(out.read_text())
    assert result["vocab_size"] == 1000 and result["precision"] == "float32"
    assert result["vocabulary"] in (f"built ({vocab_dir})", f"read ({vocab_dir})")
    phases = result["phases"]
    assert 1 <= phases["real_batches"]["shapes"] <= 3
    assert phases["real_batches"]["first_pass_ms"] > 0 and phases["real_batches"]["second_pass_ms"] > 0
    assert phases["fixed_batch"]["median_ms"] > 0 and len(phases["fixed_batch"]["shape"]) == 2
    assert len(phases["fit_live"]["epoch_ms"]) == 2 and min(phases["fit_live"]["epoch_ms"]) > 0
    assert 0 < result["mean_target_tokens"] <= 512
    assert result["jit_compile"] is False


def test_jit_compile_times_one_shape_under_xla(tmp_path, multi30k_dir, vocab_dir):
    built = vocab_dir.exists()
    command = [
        sys.executable, str(SCRIPT), f"--data_dir={multi30k_dir}", "--mixed_precision=float32", "--jit_compile",
        f"--vocab_dir={vocab_dir}",
        "--batch_tokens=512", "--batches=1", "--fixed_steps=2", "--fit_steps=0",
        *(f"--override={override}" for override in TINY),
    ]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300, env=ENV)
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout)
    assert result["jit_compile"] is True and result["vocab_size"] == 1000
    # A folder with a vocabulary is read as it is; one without gets one built in it.
    assert result["vocabulary"] == f"{'read' if built else 'built'} ({vocab_dir})"
    assert result["phases"]["real_batches"]["shapes"] == 1 and result["phases"]["fixed_batch"]["median_ms"] > 0
    assert "fit_live" not in result["phases"]


def test_missing_data_is_a_clear_error(tmp_path):
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), f"--data_dir={tmp_path}"], capture_output=True, text=True, timeout=60, env=ENV
    )
    assert completed.returncode != 0
    assert f"no Multi30k in {tmp_path}" in completed.stderr and "Fix: pass --data_dir" in completed.stderr
