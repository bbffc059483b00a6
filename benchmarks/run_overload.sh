#!/usr/bin/env bash
# Overload: one ensemble served three ways side by side in one run, under
# open-loop Poisson arrivals at 0.5x, 1x, 2x, 4x and 8x the full ensemble's
# measured capacity (closed loop, 8 in flight; or see --capacity-in-flight,
# --capacity-at-target and --capacity below):
#   (a) plain   today's server: requests queue past capacity
#   (b) shed    ensemble.max_in_flight: shedding only
#   (c) ladder  an overload ladder keeping latency_target_ms (docs/overload.md)
# Per step: answered share, p50/p99 of the answers, refusals by code, and
# for (c) the share of answers by rung.
#
#   --trained DIR  the ensemble ensemble-train wrote into DIR
#                  (benchmarks/run_training.sh: build/fmnist, twelve CNNs on
#                  Fashion-MNIST), served with the ladder the trainer wrote
#                  (the ensemble, its cascade at a few thresholds, its best
#                  member); every request is one real test image and every
#                  answer is checked against its label (ensemble-loadgen
#                  --inputs/--labels), each step
#                  whole passes over the 10,000 test images (at least 3 s of
#                  arrivals; ensemble-loadgen --requests), so the accuracy of
#                  the answers compares with the test-set accuracies of the
#                  rungs. Before the steps the rungs the targets name (the
#                  ensemble, its cascade, its best member) each answer every
#                  test image once alone: the report judges a step's
#                  accuracy against theirs on the images it answered. Plus
#                  an SVG plot (p99 latency and accuracy against offered
#                  load, a line per policy).
#   (default)      a synthetic stand-in: four members of fixed work (two per
#                  host), ladder [the ensemble, a two-member pair, one small
#                  model]; no accuracy (the members compute nothing meaningful).
#
#   benchmarks/run_overload.sh [--trained DIR] [--no-build] [--quick] [--target-ms MS] [--iterations N]
#                              [--loads 0.5,1,2,4,8] [--policies plain,shed,ladder] [--capacity-in-flight N]
#                              [--capacity-at-target | --capacity R]
#
# --target-ms: the ladder's target (default: the trained ladder's; synthetic
# 50); --quick: synthetic steps of 3 s instead of 6; --loads and --policies:
# only those steps, in that order (e.g. `--loads 1,2 --policies ladder`: the
# ladder's way into 2x, a minute and a half); --capacity-in-flight: the
# requests in flight of the closed loop that measures the capacity the
# steps multiply (default 8; deeper queues serve more, as the members batch
# what waits: docs/overload.md, "What capacity means here");
# --capacity-at-target: the capacity is instead the highest Poisson rate at
# which the full ensemble alone answers every request with a p99 within the
# target (searched from the closed-loop figure up by half until a rate
# misses, then three halvings of the interval, 6 s of arrivals a probe;
# about two minutes more); --capacity R: take R requests/s as the capacity
# (to repeat a step at the load of an earlier run; the report says so).
# Prints the table and
# writes it to build/bench_overload/report.md (and overload.svg). About 4
# minutes (synthetic --quick: 2; trained: 6).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
source scripts/lib/server.sh
source benchmarks/lib/bench.sh
BUILD=1 STEP=6 TARGET_MS="" ITERATIONS=1000 MAX_IN_FLIGHT=6 TRAINED="" LOADS="0.5 1 2 4 8" POLICIES="plain shed ladder"
CAPACITY_IN_FLIGHT=8 AT_TARGET=0 GIVEN_CAPACITY=""
while [ $# -gt 0 ]; do
  case $1 in
    --no-build) BUILD=0 ;;
    --quick) STEP=3 ;;
    --target-ms) TARGET_MS=$2; shift ;;
    --iterations) ITERATIONS=$2; shift ;;
    --trained) TRAINED=$2; shift ;;
    --loads) LOADS=${2//,/ }; shift ;;
    --policies) POLICIES=${2//,/ }; shift ;;
    --capacity-in-flight) CAPACITY_IN_FLIGHT=$2; shift ;;
    --capacity-at-target) AT_TARGET=1 ;;
    --capacity) GIVEN_CAPACITY=$2; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "benchmarks/run_overload.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for load in $LOADS; do
  case $load in 0.5 | 1 | 2 | 4 | 8) ;; *) echo "benchmarks/run_overload.sh: --loads: '$load' is not one of 0.5,1,2,4,8" >&2; exit 2 ;; esac
done
case $CAPACITY_IN_FLIGHT in '' | *[!0-9]* | 0) echo "benchmarks/run_overload.sh: --capacity-in-flight: '$CAPACITY_IN_FLIGHT' is not a positive whole number" >&2; exit 2 ;; esac
case $GIVEN_CAPACITY in '') ;; *[!0-9]*) echo "benchmarks/run_overload.sh: --capacity: '$GIVEN_CAPACITY' is not a positive whole number of requests/s" >&2; exit 2 ;; esac
[ -z "$GIVEN_CAPACITY" ] || GIVEN_CAPACITY=$((10#$GIVEN_CAPACITY))  # 0800: 800
[ "${GIVEN_CAPACITY:-1}" != 0 ] || { echo "benchmarks/run_overload.sh: --capacity: '0' is not a positive whole number of requests/s" >&2; exit 2; }
[ -z "$GIVEN_CAPACITY" ] || [ "$AT_TARGET" = 0 ] || { echo "benchmarks/run_overload.sh: --capacity and --capacity-at-target exclude each other" >&2; exit 2; }
for policy in $POLICIES; do
  case $policy in plain | shed | ladder) ;; *) echo "benchmarks/run_overload.sh: --policies: '$policy' is not one of plain,shed,ladder" >&2; exit 2 ;; esac
done
[ "$BUILD" = 0 ] || scripts/build.sh >/dev/null
require_tools ensemble-server ensemble-loadgen ensemble-model-host
OUT=build/bench_overload
rm -rf "$OUT" && mkdir -p "$OUT/repo"
progress() { echo "[run_overload $(date +%H:%M:%S)] $*"; }

DATA=()  # --trained: ensemble-loadgen's --inputs/--labels
if [ -n "$TRAINED" ]; then
  [ -d "$TRAINED" ] || { echo "--trained $TRAINED: no such folder (benchmarks/run_training.sh writes build/fmnist)" >&2; exit 1; }
  if [ -z "$TARGET_MS" ]; then
    TARGET_MS=$(sed -n 's/^  latency_target_ms: //p' "$TRAINED"/*/config.yaml | head -1)
    [ -n "$TARGET_MS" ] || { echo "--trained $TRAINED: no ensemble with an overload ladder" >&2; exit 1; }
  fi
  progress "models: the trained ensemble of $TRAINED, target $TARGET_MS ms, max_in_flight $MAX_IN_FLIGHT"
  /usr/bin/python3 benchmarks/overload/trained_repo.py "$TRAINED" "$OUT" "$TARGET_MS" "$MAX_IN_FLIGHT"
  DATA=(--inputs "$OUT/x.npy" --labels "$OUT/y.npy")
  ROWS=$(/usr/bin/python3 -c "import numpy; print(len(numpy.load('$OUT/y.npy')))")
else
  TARGET_MS=${TARGET_MS:-50}
  progress "models: 4 members of $ITERATIONS sines each, target $TARGET_MS ms, max_in_flight $MAX_IN_FLIGHT"
  /usr/bin/python3 benchmarks/overload/make_models.py "$OUT/repo" "$ITERATIONS" "$TARGET_MS" "$MAX_IN_FLIGHT"
fi
write_two_host_config "$OUT/server.yaml"
start_server "$OUT/server.yaml" "$OUT/server.log" --grpc-port 0 --http-port 0 --metrics-port 0
trap stop_server EXIT
for _ in $(seq 1 100); do grep -q "metrics listening on" "$OUT/server.log" && break; sleep 0.1; done
METRICS=$(sed -n 's/^metrics listening on //p' "$OUT/server.log")

loadgen() {  # loadgen NAME MODEL [flags...]
  local name=$1 model=$2
  shift 2
  "$BIN/ensemble-loadgen" --server "$SERVER_ADDR" --model "$model" --ceiling-model none --channels 4 --threads 2 \
    --json "$OUT/$name.json" ${DATA[@]+"${DATA[@]}"} "$@" >"$OUT/$name.txt" 2>&1 || { cat "$OUT/$name.txt" >&2; exit 1; }
}
# Open-loop Poisson arrivals, as every step and every capacity probe sends them.
OPEN_LOOP=(--poisson --warmup-s 1 --timeout-ms 2000 --hung-ms 4000 --max-inflight 100000)
rungs() { curl -s "http://$METRICS/metrics" | grep '^ensemble_overload_' >"$OUT/$1.rungs" || true; }

progress "idle latency and capacity of the full ensemble (ens_plain)"
loadgen idle ens_plain --concurrency 1 --duration-s 2 --warmup-s 1 --max-windows 3
loadgen capacity ens_plain --concurrency "$CAPACITY_IN_FLIGHT" --duration-s 2 --warmup-s 1 --max-windows 3
CAPACITY=$(/usr/bin/python3 -c "import json; print(json.load(open('$OUT/capacity.json'))['steps'][0]['throughput_rps'])")
# The steps are multiples of that figure. Deeper queues serve more (the
# members batch what waits for a busy host): the report prints what 128 in
# flight served beside it, so a reader sees how far past the ensemble's
# deepest throughput each step is.
if [ "$CAPACITY_IN_FLIGHT" = 128 ]; then
  cp "$OUT/capacity.json" "$OUT/capacity_deep.json"  # measured just now
else
  progress "the full ensemble at 128 in flight (ens_plain)"
  loadgen capacity_deep ens_plain --concurrency 128 --duration-s 2 --warmup-s 1 --max-windows 3
fi
if [ "$AT_TARGET" = 1 ]; then
  # Each probe: ens_plain at RATE for 6 s of Poisson arrivals (3 s let a rate
  # just past the capacity through: its queue grew too slowly), after a pause
  # for the last probe's queue to drain (longer after a miss, whose calls
  # the hosts may still be computing after the clients gave up on them); it
  # meets the target when every request is answered and the p99 is within it.
  drain=2
  meets_target() {
    local rate=$1
    sleep "$drain"
    drain=5
    loadgen "at_target_$rate" ens_plain --rate "$rate" --soak-s 6 --duration-s 6 "${OPEN_LOOP[@]}"
    /usr/bin/python3 benchmarks/overload/at_target.py probe "$OUT/at_target_$rate.json" "$TARGET_MS" \
      | tee -a "$OUT/at_target.txt" | sed "s/^/[run_overload] /"
    [ "${PIPESTATUS[0]}" = 0 ] && drain=2
  }
  progress "capacity at the target: the highest Poisson rate ens_plain answers within $TARGET_MS ms (p99)"
  : >"$OUT/at_target.txt"
  lo=0 hi=$(/usr/bin/python3 -c "print(max(1, round($CAPACITY)))") missed=0
  for _ in 1 2 3 4 5 6; do
    if ! meets_target "$hi"; then missed=1 && break; fi
    lo=$hi
    hi=$(/usr/bin/python3 -c "print(round($hi * 1.5))")
  done
  # Six rates up to 7.6x the closed-loop figure met the target: the capacity
  # is at least the last of them (the report's probes say so).
  [ "$missed" = 1 ] || hi=$lo
  for _ in 1 2 3; do
    mid=$(((lo + hi) / 2))
    [ "$mid" -gt "$lo" ] || break
    if meets_target "$mid"; then lo=$mid; else hi=$mid; fi
  done
  [ "$lo" -gt 0 ] || { echo "the full ensemble misses the target at every rate probed (down to $hi requests/s)" >&2; exit 1; }
  CAPACITY=$lo
  echo "$CAPACITY" >"$OUT/at_target_capacity.txt"
fi
if [ -n "$GIVEN_CAPACITY" ]; then
  CAPACITY=$GIVEN_CAPACITY
  echo "$CAPACITY" >"$OUT/given_capacity.txt"
fi
# The cheapest rung's own capacity bounds what the ladder can answer at all:
# past it even the cheapest rung queues, and shedding is what is left.
CHEAPEST=$(tail -1 "$OUT/repo/ens_ladder/config.yaml" | sed -E 's/.*\{model: ([^,}]+).*/\1/; s/.*ladder: \[.*, ([^],]+)\]$/\1/')
[ -d "$OUT/repo/$CHEAPEST" ] || { echo "cannot tell the ladder's cheapest rung (read '$CHEAPEST')" >&2; exit 1; }
progress "capacity of the cheapest rung alone ($CHEAPEST)"
loadgen capacity_cheapest "$CHEAPEST" --concurrency 32 --duration-s 2 --warmup-s 1 --max-windows 3
if [ -n "$TRAINED" ]; then
  # The rungs the verdicts compare with, each alone over every test image
  # once: a step's accuracy is judged against its reference rung's on the
  # images the step answered (benchmarks/overload/report.py, verdicts).
  REFERENCES=$(/usr/bin/python3 benchmarks/overload/report.py --reference-models "$OUT")
  [ -n "$REFERENCES" ] || { echo "--trained $TRAINED: the ladder names no rung of the targets' table" >&2; exit 1; }
  for model in $REFERENCES; do
    progress "reference: $model alone over the $ROWS test images"
    loadgen "reference_$model" "$model" --concurrency 8 --requests "$ROWS" --duration-s 1 --warmup-s 1
  done
fi
# The ladder learns each rung's service time from its answers: a few
# requests one at a time measure rung 0 (as traffic before a peak would);
# the cheaper rungs are measured when first used.
progress "warm-up: ens_ladder one request at a time"
loadgen warmup ens_ladder --concurrency 1 --duration-s 2 --warmup-s 1 --max-windows 1
progress "capacity $CAPACITY requests/s"
for mult in $LOADS; do
  rate=$(/usr/bin/python3 -c "print(max(1, round($CAPACITY * $mult)))")
  # Trained: whole passes over the test images per step, at least 3 s of
  # arrivals, counted in requests (--requests), so that every image is
  # answered equally often and the step's accuracy compares with the rungs'
  # test-set figures (a step ended by time cut its last pass short: at 8x
  # the images it reached counted once more than the rest, and moved the
  # accuracy by a few hundredths of a point).
  LENGTH=(--soak-s "$STEP" --duration-s "$STEP")
  AMOUNT="$STEP s"
  if [ -n "$TRAINED" ]; then
    REQUESTS=$(/usr/bin/python3 -c "import math; print(max(1, math.ceil(3.0 * $rate / $ROWS)) * $ROWS)")
    LENGTH=(--requests "$REQUESTS" --duration-s 1)
    AMOUNT="$REQUESTS requests"
  fi
  for policy in $POLICIES; do
    progress "$policy at ${mult}x ($rate requests/s, Poisson, $AMOUNT)"
    rungs "${policy}_${mult}_before"
    loadgen "${policy}_${mult}" "ens_$policy" --rate "$rate" "${LENGTH[@]}" "${OPEN_LOOP[@]}"
    rungs "${policy}_${mult}_after"
    sleep 2  # the queue drains and the ladder's dwell passes before the next step
  done
done
stop_server
trap - EXIT
/usr/bin/python3 benchmarks/overload/report.py "$OUT" "$TARGET_MS" "$CAPACITY" "${TRAINED:-synthetic}" | tee "$OUT/report.md"
