"""Prints in-process against SavedModel decoding speed from `peer_workload.py --export` results.

    python benchmarks/saved_model_table.py runs/bench/saved_model

Reads every `*.json` in the folder (the harness's schema, with `greedy_saved_model` and `beam4_saved_model`
phases beside `greedy` and `beam4`) and prints one markdown row per variant: the means over runs and the
SavedModel's change against in-process decoding (the issue's target: within 10%).
"""

from __future__ import annotations

import json
import pathlib
import statistics
import sys
from collections import defaultdict


def main(folder):
    runs = defaultdict(list)
    for path in sorted(pathlib.Path(folder).glob("*.json")):
        result = json.loads(path.read_text())
        runs[result["variant"]].append(result["phases"])
    if not runs:
        sys.exit(
            f"error: no result JSON in {folder}. Fix: run peer_workload.py --export --out {folder}/NAME.json first."
        )
    print("| variant | runs | greedy tok/s | greedy SavedModel | change | beam4 tok/s | beam4 SavedModel | change |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for variant, phases in sorted(runs.items()):
        cells = [variant, str(len(phases))]
        for phase in ("greedy", "beam4"):
            in_process = _mean(phases, phase)
            exported = _mean(phases, f"{phase}_saved_model")
            change = "n/a" if not (in_process and exported) else f"{100 * (exported / in_process - 1):+.1f}%"
            cells += [_format(in_process), _format(exported), change]
        print("| " + " | ".join(cells) + " |")


def _mean(phases, name):
    values = [p[name]["tokens_per_s"] for p in phases if p.get(name, {}).get("tokens_per_s")]
    return statistics.mean(values) if values else None


def _format(value):
    return "n/a" if value is None else f"{value:,.0f}"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
