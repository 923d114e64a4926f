"""tools/demo.py runs as the README shows and prints its result as JSON."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_demo_tool_trains_and_prints_json(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "demo.py"), "--task=copy", "--steps=8", f"--model_dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout[result.stdout.index("{") :])
    assert summary["task"] == "copy" and summary["steps"] == 8
    assert 0.0 <= summary["held_out_token_accuracy"] <= 1.0
    assert (tmp_path / "model.keras").is_file() and (tmp_path / "config.json").is_file()


def test_demo_tool_rejects_an_unknown_task():
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "demo.py"), "--task=sort"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "task" in result.stderr and "copy" in result.stderr
