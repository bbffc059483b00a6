#!/usr/bin/env bash
# The server's own cost, one run, every figure a ratio against a floor
# measured in the same run: benchmarks/RESULTS.md, "Overhead".
#
#   benchmarks/run_overhead.sh [--quick] [--no-build] [--steps 1,2,3,4]
#
# Two CPU hosts (one core, one LibTorch thread, one executor each), driven on
# the same machine by ensemble-loadgen (closed loop). The CPU time of the
# router process and of the model hosts is read from /proc over each step
# and divided by the calls the load generator made (warm-up included).
#   1. Router core-µs per request: echo (a copy, no compute), mlp and
#      demo_ensemble at batch 1, concurrency 1 and 16, over gRPC; echo over
#      HTTP. Beside them the floors: bench-grpc-floor (the same gRPC service,
#      answering without decoding, queueing or hosts) and bench-http-floor (an
#      empty Beast server), under the same load; and bench-grpc-floor
#      --answer-from-thread (its answers finished by a thread of its own, as
#      the router's are: the floor with one hand-off between threads), with
#      --async (ModelInfer on gRPC's completion-queue API), with and without
#      the hand-off.
#   2. Cost per extra member: tiny_ensemble_N, N = 1, 2, 4, 8, 16 copies of a
#      one-Linear model spread over the two hosts (make_overhead_models.py),
#      concurrency 1 and 16; the slope of router and host core-µs per request
#      over N, the host's beside the member's own forward in-process.
#   3. Share of the compute limit: demo_ensemble as config/demo.yaml places
#      it (mlp, wide_mlp on cpu0; cnn on cpu1) and demo_ensemble_both (every
#      member on both hosts) at batch 1, 16 and 64, against bench-inprocess's
#      limit of the same placement (the demo's: each host at the speed of a
#      worker alone on its core, the upper bound; every member on both: two
#      workers at once).
#   4. Against the seed way: the light ensemble (three MLPs) and its
#      member-batched twin vs benchmarks/python_baseline/ at concurrency 1,
#      16, 64.
# --steps runs a subset (the floors and in-process figures each step needs
# come with it). Prints the report and writes it to
# build/bench_overhead/report.md, the raw files beside it. Full mode takes
# about 8 minutes on two cores, --quick about 3.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/server.sh
source benchmarks/lib/bench.sh

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'; }
COMMAND="benchmarks/run_overhead.sh${*:+ $*}"
QUICK=0 BUILD=1 STEPS=1,2,3,4
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --no-build) BUILD=0 ;;
    --steps) STEPS=${2:?--steps needs a list, e.g. 1,2}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "benchmarks/run_overhead.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $STEPS =~ ^[1-4](,[1-4])*$ ]] || { echo "benchmarks/run_overhead.sh: --steps takes numbers 1-4, e.g. 1,2" >&2; exit 2; }
want() { [[ ,$STEPS, == *,$1,* ]]; }

BUILD_DIR=build
BIN=$BUILD_DIR/bin
PY=/usr/bin/python3
OUT=$BUILD_DIR/bench_overhead
REPO=$OUT/repo
STARTED=$(date +%s)
if [ "$QUICK" = 1 ]; then DUR=1 WARM=0.5 WIN=3 INPROC_S=0.5; else DUR=2 WARM=1 WIN=4 INPROC_S=1; fi
progress() { printf '[%4ds] %s\n' $(($(date +%s) - STARTED)) "$*" >&2; }

TOOLS=(ensemble-server ensemble-model-host ensemble-make-demo ensemble-loadgen bench-inprocess bench-grpc-floor
       bench-http-floor)
if [ "$BUILD" = 1 ]; then
  progress "building (log $OUT.build.log)"
  mkdir -p "$BUILD_DIR"
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  if ! {
    { [ -f "$BUILD_DIR/build.ninja" ] || cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release; } &&
      cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target "${TOOLS[@]}" es_python_stubs
  } >"$OUT.build.log" 2>&1; then
    tail -n 30 "$OUT.build.log" >&2
    echo "benchmarks/run_overhead.sh: the build failed (log $OUT.build.log)" >&2
    exit 1
  fi
fi
for b in "${TOOLS[@]}"; do
  [ -x "$BIN/$b" ] || { echo "benchmarks/run_overhead.sh: $BIN/$b missing (run without --no-build)" >&2; exit 1; }
done
"$PY" -c 'import torch, grpc' 2>/dev/null || {
  echo "benchmarks/run_overhead.sh: $PY lacks torch or grpc (scripts/install-deps.sh)" >&2
  exit 1
}
rm -rf "$OUT" && mkdir -p "$OUT"

# --- the repository -------------------------------------------------------------
progress "writing the repository $REPO"
"$BIN/ensemble-make-demo" --out "$REPO" --seed 1 >/dev/null  # mlp, wide_mlp, cnn, demo_ensemble, as placed by the demo
"$PY" clients/make_echo_model.py --out "$REPO" >/dev/null
"$PY" benchmarks/make_overhead_models.py "$REPO" 16
for m in mlp wide_mlp cnn; do  # the same members on both hosts
  mkdir -p "$REPO/${m}_both/1"
  cp "$REPO/$m/1/model.pt" "$REPO/${m}_both/1/model.pt"
  sed -e 's/^hosts:.*$/hosts: [cpu0, cpu1]/' "$REPO/$m/config.yaml" >"$REPO/${m}_both/config.yaml"
done
sed -e 's/model: \(mlp\|wide_mlp\|cnn\)\b/model: \1_both/' "$REPO/demo_ensemble/config.yaml" \
  >"$REPO/demo_ensemble_both.yaml.tmp"
mkdir -p "$REPO/demo_ensemble_both" && mv "$REPO/demo_ensemble_both.yaml.tmp" "$REPO/demo_ensemble_both/config.yaml"
want 4 && write_light_ensemble "$REPO" "$OUT"
write_two_host_config "$OUT/server.yaml"

# --- one measured step ------------------------------------------------------------
# load NAME ADDR MODEL BATCH CONCURRENCY PID HOST_PIDS [loadgen flags...]: one
# measured step (measure_load, benchmarks/lib/bench.sh).
load() { measure_load "$@"; }

FLOOR_PID=""
SERVER_PID=""
trap 'stop_server; stop_floor' EXIT

# --- ensemble-server ------------------------------------------------------------
progress "starting ensemble-server ($OUT/server.yaml)"
start_server "$OUT/server.yaml" "$OUT/server.log" --grpc-port 0 --metrics-port 0 --http-port 0 --log-level warn
HTTP_ADDR=$(sed -n 's/^http listening on //p' "$OUT/server.log")
HOSTS=$(cat /proc/"$SERVER_PID"/task/*/children)  # the model-host processes
es() { local name=$1; shift; load "$name" "$SERVER_ADDR" "$@" "$SERVER_PID" "$HOSTS"; }  # NAME MODEL BATCH CONC
if want 1; then
  for c in 1 16; do
    es "es_echo_c$c" echo 1 "$c"
    es "es_mlp_c$c" mlp 1 "$c"
    es "es_demo_c$c" demo_ensemble 1 "$c"
    load "http_echo_c$c" "$HTTP_ADDR" echo 1 "$c" "$SERVER_PID" "$HOSTS" --http
  done
fi
if want 2; then
  for n in 1 2 4 8 16; do
    for c in 1 16; do es "tiny${n}_c$c" "tiny_ensemble_$n" 1 "$c"; done
  done
fi
if want 3; then
  for model in demo_ensemble demo_ensemble_both; do
    es "${model}_b1" "$model" 1 32
    es "${model}_b16" "$model" 16 8
    es "${model}_b64" "$model" 64 4
  done
fi
if want 4; then
  for suffix in "" _batched; do
    for c in 1 16 64; do es "light${suffix}_c$c" "light_ensemble$suffix" 1 "$c"; done
  done
fi
stop_server
SERVER_PID=""

# --- the floors and the seed way ---------------------------------------------------
if want 1; then
  start_floor bench-grpc-floor "$OUT/server.yaml" "$OUT/grpc_floor.log"
  for c in 1 16; do
    load "floor_echo_c$c" "$FLOOR_ADDR" echo 1 "$c" "$FLOOR_PID" ""
    load "floor_mlp_c$c" "$FLOOR_ADDR" mlp 1 "$c" "$FLOOR_PID" ""
  done
  stop_floor
  # echo_floor NAME FLAGS...: echo at concurrency 1 and 16 on bench-grpc-floor FLAGS (steps NAME_echo_cC).
  echo_floor() {
    local name=$1 c
    shift
    start_floor bench-grpc-floor "$OUT/server.yaml" "$OUT/grpc_floor_$name.log" "$@"
    for c in 1 16; do load "${name}_echo_c$c" "$FLOOR_ADDR" echo 1 "$c" "$FLOOR_PID" ""; done
    stop_floor
  }
  echo_floor handoff --answer-from-thread
  echo_floor async --async
  echo_floor async_handoff --async --answer-from-thread
  start_floor bench-http-floor "$OUT/server.yaml" "$OUT/http_floor.log"
  for c in 1 16; do load "http_floor_echo_c$c" "$FLOOR_ADDR" echo 1 "$c" "$FLOOR_PID" "" --http; done
  stop_floor
fi
if want 4; then
  progress "starting the Python baseline on light_ensemble"
  start_python_baseline "$OUT/python.log" "$REPO" light_ensemble 64
  for c in 1 16 64; do load "python_c$c" "$SERVER_ADDR" light_ensemble 1 "$c" "$SERVER_PID" ""; done
  stop_server
  SERVER_PID=""
fi
trap - EXIT

# --- in-process ------------------------------------------------------------------------
if want 2; then
  progress "bench-inprocess tiny_1 (one worker, batch 1)"
  "$BIN/bench-inprocess" --repo "$REPO" --model tiny_1 --threads 1 --batches 1 --seconds "$INPROC_S" \
    >"$OUT/inprocess_tiny.txt"
fi
if want 3 || want 4; then
  for m in mlp wide_mlp cnn; do
    progress "bench-inprocess $m (two workers, then one alone)"
    "$BIN/bench-inprocess" --repo "$REPO" --model "$m" --threads 2 --batches 1,16,64 --seconds "$INPROC_S" \
      >"$OUT/inprocess_$m.txt"
    "$BIN/bench-inprocess" --repo "$REPO" --model "$m" --threads 1 --batches 1,16,64 --seconds "$INPROC_S" \
      >"$OUT/inprocess_alone_$m.txt"
  done
fi

CPU=$(sed -n '/^model name/{s/^model name[[:space:]]*: //p;q}' /proc/cpuinfo)
"$PY" benchmarks/overhead_report.py "$OUT" "$STEPS" \
  "Machine: $(nproc) cores ($CPU), load average $(cut -d' ' -f1-3 /proc/loadavg) after the run; $(date -u '+%Y-%m-%d %H:%M UTC'); \`$COMMAND\` (whole run $(($(date +%s) - STARTED)) s)." \
  | tee "$OUT/report.md"
