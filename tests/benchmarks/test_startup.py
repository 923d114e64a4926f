"""benchmarks/startup.py: a module's import time in fresh interpreters, and the modules that take it."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "startup.py"


def test_times_each_module_in_every_round_and_names_its_slowest_imports():
    # Small standard-library modules: the figures without TensorFlow's seconds.
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--modules=json,xml.dom.minidom", "--rounds=2", "--top=3"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["rounds"] == 2 and set(summary["versions"]) >= {"tensorflow", "ml-dtypes", "numpy"}
    for module in ("json", "xml.dom.minidom"):
        timings = summary[module]
        assert len(timings["wall_s"]) == len(timings["cpu_s"]) == 2 and timings["median_wall_s"] > 0
        own_ms = list(timings["slowest_modules"].values())
        assert 0 < len(own_ms) <= 3 and own_ms == sorted(own_ms, reverse=True)  # the slowest first


def test_a_module_that_does_not_import_is_a_clear_error():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--modules=no_such_module_here", "--rounds=1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0 and result.stdout == ""
    assert "error: `import no_such_module_here` failed" in result.stderr and "Fix: install it" in result.stderr
