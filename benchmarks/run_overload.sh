#!/usr/bin/env bash
# Overload, synthetic stand-in: one four-member ensemble (two members per
# host, each a fixed amount of work) served three ways side by side in one
# run, under open-loop Poisson arrivals at 0.5x, 1x, 2x, 4x and 8x the
# full ensemble's measured capacity:
#   (a) plain   today's server: requests queue past capacity
#   (b) shed    ensemble.max_in_flight: shedding only
#   (c) ladder  an overload ladder [the ensemble, a two-member pair, one
#               small model] keeping latency_target_ms (docs/overload.md)
# Per step: answered share, p50/p99 of the answers, refusals by code, and
# for (c) the share of answers by rung (the server's
# ensemble_overload_answers_total). The members compute nothing meaningful,
# so there is no accuracy here: the trained-ensemble version (answers
# checked against labels) is not written yet.
#
#   benchmarks/run_overload.sh [--no-build] [--quick] [--target-ms MS] [--iterations N]
#
# --quick: 3 s steps instead of 6. Prints the table and writes it to
# build/bench_overload/report.md. About 4 minutes (--quick: 2).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
source scripts/lib/server.sh
source benchmarks/lib/bench.sh
BUILD=1 STEP=6 TARGET_MS=50 ITERATIONS=1000 MAX_IN_FLIGHT=6
while [ $# -gt 0 ]; do
  case $1 in
    --no-build) BUILD=0 ;;
    --quick) STEP=3 ;;
    --target-ms) TARGET_MS=$2; shift ;;
    --iterations) ITERATIONS=$2; shift ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "benchmarks/run_overload.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$BUILD" = 0 ] || scripts/build.sh >/dev/null
for tool in ensemble-server ensemble-loadgen ensemble-model-host; do
  [ -x "$BIN/$tool" ] || { echo "$BIN/$tool not built (scripts/build.sh)" >&2; exit 1; }
done
OUT=build/bench_overload
rm -rf "$OUT" && mkdir -p "$OUT/repo"
progress() { echo "[run_overload $(date +%H:%M:%S)] $*"; }

progress "models: 4 members of $ITERATIONS sines each, target $TARGET_MS ms, max_in_flight $MAX_IN_FLIGHT"
/usr/bin/python3 benchmarks/overload/make_models.py "$OUT/repo" "$ITERATIONS" "$TARGET_MS" "$MAX_IN_FLIGHT"
write_two_host_config "$OUT/server.yaml"
start_server "$OUT/server.yaml" "$OUT/server.log" --grpc-port 0 --http-port 0 --metrics-port 0
trap stop_server EXIT
for _ in $(seq 1 100); do grep -q "metrics listening on" "$OUT/server.log" && break; sleep 0.1; done
METRICS=$(sed -n 's/^metrics listening on //p' "$OUT/server.log")

loadgen() {  # loadgen NAME MODEL [flags...]
  local name=$1 model=$2
  shift 2
  "$BIN/ensemble-loadgen" --server "$SERVER_ADDR" --model "$model" --ceiling-model none --channels 4 --threads 2 \
    --json "$OUT/$name.json" "$@" >"$OUT/$name.txt" 2>&1 || { cat "$OUT/$name.txt" >&2; exit 1; }
}
rungs() { curl -s "http://$METRICS/metrics" | grep '^ensemble_overload_answers_total' >"$OUT/$1.rungs" || true; }

progress "idle latency and capacity of the full ensemble (ens_plain)"
loadgen idle ens_plain --concurrency 1 --duration-s 2 --warmup-s 1 --max-windows 3
loadgen capacity ens_plain --concurrency 8 --duration-s 2 --warmup-s 1 --max-windows 3
CAPACITY=$(/usr/bin/python3 -c "import json; print(json.load(open('$OUT/capacity.json'))['steps'][0]['throughput_rps'])")
# The ladder learns each rung's service time from its answers: a few
# requests one at a time measure rung 0 (as traffic before a peak would);
# the cheaper rungs are measured when first used.
progress "warm-up: ens_ladder one request at a time"
loadgen warmup ens_ladder --concurrency 1 --duration-s 2 --warmup-s 1 --max-windows 1
progress "capacity $CAPACITY requests/s"
for mult in 0.5 1 2 4 8; do
  rate=$(/usr/bin/python3 -c "print(max(1, round($CAPACITY * $mult)))")
  for policy in plain shed ladder; do
    progress "$policy at ${mult}x ($rate requests/s, Poisson, $STEP s)"
    rungs "${policy}_${mult}_before"
    loadgen "${policy}_${mult}" "ens_$policy" --rate "$rate" --poisson --soak-s "$STEP" --duration-s "$STEP" \
      --warmup-s 1 --timeout-ms 2000 --hung-ms 4000 --max-inflight 100000
    rungs "${policy}_${mult}_after"
    sleep 2  # the queue drains and the ladder's dwell passes before the next step
  done
done
stop_server
trap - EXIT
/usr/bin/python3 benchmarks/overload/report.py "$OUT" "$TARGET_MS" "$CAPACITY" | tee "$OUT/report.md"
