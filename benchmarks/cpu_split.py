"""Where a command's CPU goes once it runs steadily: user and system time, cores busy and page faults, as JSON.

    python benchmarks/cpu_split.py --settle_s=10 -- tft-train --config=configs/multi30k.json ... --train_steps=400

Runs the command after `--`, samples `/proc/PID/stat` (the whole process, every thread) once a second and counts
from `--settle_s` seconds after the command logs its first step (tft-train's "First step ... done N s after the
start"; without that line, after `--start_s`) to its last sample but `--tail_s`: the steady state, without the
start's import, data checks and tracing, which an hour-long run amortizes. Linux only. benchmarks/NOTES.md
entry 31 has its figures for the README's command.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

FIRST_STEP = re.compile(r"First step \(step \d+\) done ([\d.]+) s after the start")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settle_s", type=float, default=10.0, help="seconds after the first step left out")
    parser.add_argument("--start_s", type=float, default=40.0, help="the start when no first-step line is logged")
    parser.add_argument("--tail_s", type=float, default=3.0, help="seconds before the end left out (its save)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command and its arguments")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: put it after --")
    samples, log, returncode = run_sampled(command)
    first_step = FIRST_STEP.search(log)
    start = float(first_step.group(1)) + args.settle_s if first_step else args.start_s
    print(json.dumps({"command": command, "returncode": returncode, **steady_split(samples, start, args.tail_s)},
                     indent=2))  # fmt: skip
    return returncode


def run_sampled(command):
    """Runs `command` with its stdout and its stderr on this script's stderr as they come (stdout holds only the
    JSON); returns the samples (seconds since the start, user s, system s, minor faults), its stderr and its exit
    status."""
    ticks = os.sysconf("SC_CLK_TCK")
    samples, log = [], []
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    echo = threading.Thread(target=echo_lines, args=(process.stderr, log), daemon=True)
    echo.start()
    while process.poll() is None:
        try:
            with open(f"/proc/{process.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            break
        # After the name: state is field 3 of stat(5), so minflt (10), utime (14), stime (15) sit at 7, 11, 12.
        user, system, faults = int(fields[11]) / ticks, int(fields[12]) / ticks, int(fields[7])
        samples.append((time.monotonic() - started, user, system, faults))
        time.sleep(1.0)
    returncode = process.wait()
    echo.join()
    return samples, "".join(log), returncode


def echo_lines(stream, log):
    """Copies `stream` to this script's stderr line by line, keeping each line in `log`."""
    for line in stream:
        sys.stderr.write(line)
        log.append(line)


def steady_split(samples, start, tail):
    window = [sample for sample in samples if start <= sample[0] <= samples[-1][0] - tail] if samples else []
    if len(window) < 2:
        ran = samples[-1][0] if samples else 0.0
        return {"error": f"the command ran {ran:.0f} s: too short for a window from {start:.0f} s on"}
    (t0, user0, system0, faults0), (t1, user1, system1, faults1) = window[0], window[-1]
    user, system, wall = user1 - user0, system1 - system0, t1 - t0
    if user + system == 0:
        return {"error": f"the command used no CPU from {t0:.0f} s to {t1:.0f} s: nothing to split (was it waiting?)"}
    return {
        "window_s": [round(t0, 1), round(t1, 1)],
        "user_s": round(user, 1),
        "system_s": round(system, 1),
        "system_share": round(system / (user + system), 4),
        "cores_busy": round((user + system) / wall, 2),
        "minor_faults_per_s": round((faults1 - faults0) / wall),
    }


if __name__ == "__main__":
    sys.exit(main())
