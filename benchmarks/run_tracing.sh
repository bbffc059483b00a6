#!/usr/bin/env bash
# Tracing's cost: the demo repository served with tracing off, at
# --trace-rate 1000 (one request in 1000 traced) and at --trace-rate 1 (every
# request), each a server of its own started in turn, under the same closed
# loop (ensemble-loadgen, concurrency 8, random images) on `mlp` and on
# `demo_ensemble` (whose traced requests write a trace per member too).
# Two rounds of the three, so the machine's drift shows; each figure is
# requests/s and its ratio to the same round's run with tracing off.
#
#   benchmarks/run_tracing.sh [--no-build] [--seconds S]
#
# Prints the table and writes it to build/bench_tracing/report.md. About 3
# minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
source scripts/lib/server.sh
source benchmarks/lib/bench.sh
BUILD=1 SECONDS_PER_STEP=3
while [ $# -gt 0 ]; do
  case $1 in
    --no-build) BUILD=0 ;;
    --seconds) SECONDS_PER_STEP=$2; shift ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "benchmarks/run_tracing.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$BUILD" = 0 ] || scripts/build.sh >/dev/null
require_tools ensemble-server ensemble-loadgen ensemble-model-host ensemble-make-demo
OUT=build/bench_tracing
rm -rf "$OUT" && mkdir -p "$OUT"
progress() { echo "[run_tracing $(date +%H:%M:%S)] $*"; }
"$BIN/ensemble-make-demo" --out "$OUT/repo" --seed 1 >/dev/null
write_two_host_config "$OUT/server.yaml"

for round in 1 2; do
  for mode in off 1000 1; do
    flags=()
    [ "$mode" = off ] || flags=(--trace-file "$OUT/trace_${mode}_$round.json" --trace-level TIMESTAMPS --trace-rate "$mode")
    progress "round $round, tracing $mode"
    start_server "$OUT/server.yaml" "$OUT/server_${mode}_$round.log" --grpc-port 0 --no-http --no-metrics ${flags[@]+"${flags[@]}"}
    for model in mlp demo_ensemble; do
      "$BIN/ensemble-loadgen" --server "$SERVER_ADDR" --model "$model" --concurrency 8 --duration-s "$SECONDS_PER_STEP" \
        --warmup-s 1 --max-windows 1 --ceiling-model none --json "$OUT/${model}_${mode}_$round.json" \
        >"$OUT/${model}_${mode}_$round.txt" 2>&1 || { cat "$OUT/${model}_${mode}_$round.txt" >&2; exit 1; }
    done
    stop_server
  done
done

/usr/bin/python3 - "$OUT" <<'EOF' | tee "$OUT/report.md"
import json, os, sys
out = sys.argv[1]
def rps(model, mode, r):
    return json.load(open(f"{out}/{model}_{mode}_{r}.json"))["steps"][0]["throughput_rps"]
def traces(mode, r):
    path = f"{out}/trace_{mode}_{r}.json"
    return len(json.load(open(path))) // 2 if os.path.exists(path) else 0
print("| model | round | off req/s | rate 1000 req/s (ratio) | rate 1 req/s (ratio) |")
print("| --- | --- | --- | --- | --- |")
for model in ("mlp", "demo_ensemble"):
    for r in (1, 2):
        off, k, one = (rps(model, m, r) for m in ("off", "1000", "1"))
        print(f"| {model} | {r} | {off:.0f} | {k:.0f} ({k / off:.3f}) | {one:.0f} ({one / off:.3f}) |")
print("\nTraces written (both models of a round, members included): " +
      ", ".join(f"round {r}: rate 1000 {traces('1000', r)}, rate 1 {traces('1', r)}" for r in (1, 2)))
EOF
