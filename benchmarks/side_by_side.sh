#!/usr/bin/env bash
# Runs the peer harness (../shared/bench) and benchmarks/peer_workload.py in one run on this machine and
# prints the harness's table with tf-transformer beside the peers. Only ratios from one run count: the
# machine is noisy (see ../shared/bench/README.md).
#
#   bash benchmarks/side_by_side.sh [RESULTS_DIR]      # RUNS=2 rounds by default (~20 min on 2 cores)
#
# Knobs: RUNS (2), PEERS (the harness's default set), BENCH_DIR (../shared/bench), PYTHON (this venv's
# python, with tf-transformer installed), SKIP_PEERS=1 to time only tf-transformer.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
BENCH_DIR="${BENCH_DIR:-$ROOT/../shared/bench}"
RESULTS="$(mkdir -p "${1:-$ROOT/runs/bench}" && cd "${1:-$ROOT/runs/bench}" && pwd)"
RUNS="${RUNS:-2}"
PYTHON="${PYTHON:-python}"
[ -f "$BENCH_DIR/run_peers.sh" ] || { echo "error: no peer harness at $BENCH_DIR; set BENCH_DIR" >&2; exit 1; }

if [ "${SKIP_PEERS:-0}" != 1 ]; then
    # The harness clears RESULTS/*.json when it starts, so it runs first; it also times the matmul ceiling.
    RESULTS="$RESULTS" RUNS="$RUNS" bash "$BENCH_DIR/run_peers.sh" >&2
fi
mkdir -p "$RESULTS/logs"
for run in $(seq 1 "$RUNS"); do
    for variant in graph xla; do
        log="$RESULTS/logs/tft_${variant}_run${run}.log"
        echo "[side_by_side] run $run: tf-transformer $variant" >&2
        "$PYTHON" "$HERE/peer_workload.py" --bench_dir "$BENCH_DIR" --variant "$variant" --run_id "$run" \
            --out "$RESULTS/tft_${variant}_run${run}.json" --export >"$log" 2>&1 ||
            echo "[side_by_side] tf-transformer $variant failed (log: $log)" >&2
        grep -E '^\[|^NOTE|^RESULT' "$log" | sed 's/^/    /' >&2 || true
    done
done
python3 "$BENCH_DIR/make_table.py" "$RESULTS" | tee "$RESULTS/table.md"
