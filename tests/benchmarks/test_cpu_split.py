"""benchmarks/cpu_split.py: a command's steady-state CPU split, counted from its first step on."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "cpu_split.py"
# Prints a line, logs tft-train's first-step line, then spins for 3 s in user code and sleeps for 1 s.
BUSY_THEN_IDLE = (
    "import sys, time\n"
    "print('the command prints to stdout too')\n"
    "print('First step (step 1) done 0.1 s after the start', file=sys.stderr, flush=True)\n"
    "end = time.monotonic() + 3\n"
    "while time.monotonic() < end: sum(range(1000))\n"
    "time.sleep(1)\n"
)


def split(*arguments):
    result = subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, timeout=60)
    return result, json.loads(result.stdout)


def test_counts_the_window_after_the_first_step_and_passes_the_exit_status_on():
    result, summary = split("--settle_s=0", "--tail_s=0", "--", sys.executable, "-c", BUSY_THEN_IDLE + "sys.exit(3)")
    assert result.returncode == 3 and summary["returncode"] == 3
    start, end = summary["window_s"]
    assert 0 <= start <= 1.5 and end >= 3
    # A busy loop, on a machine the suite's other workers share: user time, little system time, at most one core.
    assert summary["user_s"] > 0.1 and summary["system_share"] < 0.5 and 0 < summary["cores_busy"] <= 1.05
    assert "First step (step 1)" in result.stderr and "the command prints to stdout too" in result.stderr


def test_a_command_too_short_for_its_window_says_so():
    result, summary = split("--settle_s=30", "--", sys.executable, "-c", BUSY_THEN_IDLE)
    assert result.returncode == 0 and "too short for a window" in summary["error"]


def test_a_window_without_cpu_says_so_rather_than_dividing_by_zero():
    sleeper = BUSY_THEN_IDLE.split("end =")[0] + "time.sleep(5)\n"
    result, summary = split("--settle_s=2", "--tail_s=0", "--", sys.executable, "-c", sleeper)
    assert result.returncode == 0 and "used no CPU" in summary["error"], summary
