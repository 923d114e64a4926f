#!/usr/bin/env bash
# Runs the peer harness (../shared/bench) and benchmarks/peer_workload.py in one run on this machine and
# prints the harness's table with tf-transformer beside the peers. Only ratios from one run count: the
# machine is noisy (see ../shared/bench/README.md).
#
#   bash benchmarks/side_by_side.sh [RESULTS_DIR]      # RUNS=2 rounds by default (~30 min on 2 cores)
#
# Knobs: RUNS (2), PEERS (the harness's default set), BENCH_DIR (../shared/bench), PYTHON (this venv's
# python, with tf-transformer installed), SKIP_PEERS=1 to time only tf-transformer, INT8=0 to skip the int8
# decoders (variants graph-int8 and xla-int8, against CTranslate2's int8), BF16 (auto: 1 where the CPU computes
# bf16 natively, the commands' precision there) to also time the model in mixed_bfloat16 (graph-bf16, xla-bf16),
# THREADS ("0": TensorFlow's default, a thread per core) the intra-op thread counts to time tf-transformer at; each
# N > 0 also runs CTranslate2 at `intra_threads` N beside it (variants `-tN`; the harness's own runs use every core).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
BENCH_DIR="${BENCH_DIR:-$ROOT/../shared/bench}"
RESULTS="$(mkdir -p "${1:-$ROOT/runs/bench}" && cd "${1:-$ROOT/runs/bench}" && pwd)"
RUNS="${RUNS:-2}"
PYTHON="${PYTHON:-python}"
[ -f "$BENCH_DIR/run_peers.sh" ] || { echo "error: no peer harness at $BENCH_DIR; set BENCH_DIR" >&2; exit 1; }

mkdir -p "$RESULTS/logs" "$RESULTS/saved_model"
rm -f "$RESULTS"/saved_model/*.json
tft() {  # tft NAME OUT ARGS...: one peer_workload.py process, its log under logs/
    local name="$1" out="$2"
    shift 2
    echo "[side_by_side] $name" >&2
    "$PYTHON" "$HERE/peer_workload.py" --bench_dir "$BENCH_DIR" --out "$out" "$@" >"$RESULTS/logs/$name.log" 2>&1 ||
        echo "[side_by_side] $name failed (log: $RESULTS/logs/$name.log)" >&2
    grep -E '^\[|^NOTE|^RESULT' "$RESULTS/logs/$name.log" | sed 's/^/    /' >&2 || true
}
peers() {  # peers RUN: one round of the harness (it clears its folder first), its results copied as round RUN
    local dir="$RESULTS/peers/run$1"
    RESULTS="$dir" RUNS=1 bash "$BENCH_DIR/run_peers.sh" >&2
    python3 - "$dir" "$RESULTS" "$1" <<'PY'
import json, pathlib, sys
source, target, run = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
for path in source.glob("*_run1.json"):
    result = json.loads(path.read_text())
    result["run_id"] = run
    (target / path.name.replace("_run1.json", f"_run{run}.json")).write_text(json.dumps(result))
PY
}
ct2_threads() {  # ct2_threads RUN N: CTranslate2 float32 and int8 at N intra-op threads, variants <type>-tN
    case " ${PEERS:-ct2} " in *" ct2 "*) ;; *) return 0 ;; esac
    local python="${VENV_CT2:-/tmp/peer-ct2}/bin/python" type log
    for type in float32 int8; do
        echo "[side_by_side] ctranslate2 $type, $2 threads" >&2
        log="$RESULTS/logs/ct2_${type}_t$2_run$1.log"
        "$python" "$BENCH_DIR/bench_ct2.py" --compute-type "$type" --threads "$2" --run-id "$1" \
            --out "$RESULTS/ct2_${type}_t$2_run$1.json" >"$log" 2>&1 ||
            { echo "[side_by_side] ctranslate2 $type failed (log: $log)" >&2; continue; }
        python3 - "$RESULTS/ct2_${type}_t$2_run$1.json" "-t$2" <<'PY'
import json, pathlib, sys
path = pathlib.Path(sys.argv[1])
result = json.loads(path.read_text())
result["variant"] += sys.argv[2]
path.write_text(json.dumps(result))
PY
    done
}
if [ "${BF16:-auto}" = auto ]; then
    BF16="$("$PYTHON" -c 'from tf_transformer.training.precision import resolve_precision
print(int(resolve_precision("auto", gpus=[])[0] == "mixed_bfloat16"))' 2>/dev/null || echo 0)"
fi
PRECISIONS="float32"
if [ "$BF16" = 1 ]; then PRECISIONS="float32 mixed_bfloat16"; fi
rm -f "$RESULTS"/*.json
# Rounds interleave the peers and tf-transformer, so that a slow spell of the machine falls on both.
THREADS="${THREADS:-0}"
for run in $(seq 1 "$RUNS"); do
    [ "${SKIP_PEERS:-0}" = 1 ] || peers "$run"
    for threads in $THREADS; do
        suffix=""
        [ "$threads" = 0 ] || suffix="_t$threads"
        [ "$threads" = 0 ] || [ "${SKIP_PEERS:-0}" = 1 ] || ct2_threads "$run" "$threads"
        for variant in graph xla; do
            for precision in $PRECISIONS; do
                name="$variant"
                [ "$precision" = float32 ] || name="${variant}_bf16"
                name="$name$suffix"
                # The table's process does what the peers do, so its peak memory compares with theirs; exporting
                # and reloading the decoders runs in a process of its own.
                tft "tft_${name}_run${run}" "$RESULTS/tft_${name}_run${run}.json" --intra_op_threads "$threads" \
                    --variant "$variant" --run_id "$run" --mixed_precision "$precision"
                tft "tft_${name}_export_run${run}" "$RESULTS/saved_model/tft_${name}_run${run}.json" \
                    --intra_op_threads "$threads" --variant "$variant" --run_id "$run" --mixed_precision "$precision" \
                    --phases greedy,beam4 --export
            done
            [ "${INT8:-1}" = 0 ] || tft "tft_${variant}_int8${suffix}_run${run}" \
                "$RESULTS/tft_${variant}_int8${suffix}_run${run}.json" --intra_op_threads "$threads" \
                --variant "$variant" --run_id "$run" --phases greedy,beam4 --quantize int8
        done
    done
done
python3 "$BENCH_DIR/make_table.py" "$RESULTS" | tee "$RESULTS/table.md"
echo
"$PYTHON" "$HERE/saved_model_table.py" "$RESULTS/saved_model" | tee "$RESULTS/saved_model.md"
