#!/usr/bin/env bash
# Dynamic batching, measured: one server, one run, batching on vs
# off, against the in-process limit and the gRPC floor of the same machine.
#
#   benchmarks/run_batching.sh [--quick]
#
# The repository is the demo's plus variants of the same model files:
#   mlp / mlp_batched   the light member (784-256-10), per-call cost dominates
#   cnn / cnn_batched   the compute-heavy member (small CNN)
#   light_ensemble[_batched]  three mlp members, as an ensemble serves them
#   echo                a trivial model, for the server's own overhead
# `*_batched` add `dynamic_batching: {max_queue_delay_us: 200}`. All run on
# both hosts (cpu0, cpu1; one executor and one LibTorch thread each).
#
# Steps, each with ensemble-loadgen (closed loop) on the same machine:
#   1. each model at concurrency 32 with batch-1 requests;
#   2. the server at its best: clients sending mlp batch-64 and cnn batch-32
#      requests at concurrency 4;
#   3. echo at concurrency 1 (end to end minus the host's compute);
#   4. the gRPC floor: bench-grpc-floor (the same gRPC service answering
#      zeros, no router, no host) at concurrency 32 and 1;
#   5. bench-inprocess: each model's LibTorch throughput by batch size, two
#      threads of one intra-op thread each (as the two hosts).
# For steps 1, 2 and 4 the CPU time of the router (or floor) process and of
# the hosts over the whole step is read from /proc and divided by the calls
# the load generator made (warm-up included); the load generator's own CPU
# per call is its figure for the measured windows. Where each request's time
# goes. Needs only bash, coreutils and awk besides the project's binaries.
#
# Prints the report and writes it to build/bench_batching/report.md, with the
# raw JSON of every step beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
source scripts/lib/server.sh
source benchmarks/lib/bench.sh
OUT=build/bench_batching
REPO=$OUT/repo
DUR=3; WIN=4; WARM=1
[ "${1:-}" = "--quick" ] && { DUR=1; WIN=3; }
rm -rf "$OUT" && mkdir -p "$OUT"

"$BIN/ensemble-make-demo" --out "$REPO" >/dev/null
/usr/bin/python3 clients/make_echo_model.py --out "$REPO" >/dev/null
variant() {  # variant NAME FROM BATCHING_YAML
  mkdir -p "$REPO/$1/1"
  cp "$REPO/$2/1/model.pt" "$REPO/$1/1/model.pt"
  sed -e 's/^hosts:.*$/hosts: [cpu0, cpu1]/' "$REPO/$2/config.yaml" > "$REPO/$1/config.yaml"
  [ -n "$3" ] && echo "$3" >> "$REPO/$1/config.yaml"
  return 0
}
for m in mlp cnn; do
  sed -i -e 's/^hosts:.*$/hosts: [cpu0, cpu1]/' "$REPO/$m/config.yaml"
  variant "${m}_batched" "$m" "dynamic_batching: {max_queue_delay_us: 200}"
done
# The light members as an ensemble serves them: three copies of the mlp
# (same weights: the compute is what matters here), with and without batching.
for i in 1 2 3; do
  variant "light_mlp$i" mlp ""
  variant "light_mlp${i}_batched" mlp "dynamic_batching: {max_queue_delay_us: 200}"
done
for suffix in "" _batched; do
  mkdir -p "$REPO/light_ensemble$suffix"
  printf 'platform: ensemble\nmax_batch_size: 64\nensemble:\n  combine: mean\n  members:\n%s' \
    "$(for i in 1 2 3; do printf '    - {model: light_mlp%s%s}\n' "$i" "$suffix"; done)" \
    > "$REPO/light_ensemble$suffix/config.yaml"
done
write_two_host_config "$OUT/server.yaml"

# load NAME ADDR MODEL CONCURRENCY BATCH PID HOST_PIDS: one measured step
# (measure_load, benchmarks/lib/bench.sh).
load() { measure_load "$1" "$2" "$3" "$5" "$4" "$6" "$7"; }

LOG=$OUT/server.log
FLOOR_PID=""
trap 'stop_server; stop_floor' EXIT
start_server "$OUT/server.yaml" "$LOG" --grpc-port 0 --metrics-port 0 --http-port 0 --log-level warn
HOSTS=$(cat /proc/"$SERVER_PID"/task/*/children)  # the model-host processes
run_server_step() { load "$1" "$SERVER_ADDR" "$2" "$3" "$4" "$SERVER_PID" "$HOSTS"; }  # NAME MODEL CONCURRENCY BATCH
for m in mlp mlp_batched cnn cnn_batched light_ensemble light_ensemble_batched; do
  run_server_step "${m}_c32_b1" "$m" 32 1
done
run_server_step mlp_c4_b64 mlp 4 64
run_server_step cnn_c4_b32 cnn 4 32
run_server_step echo_c1_b1 echo 1 1
stop_server
trap stop_floor EXIT
start_floor bench-grpc-floor "$OUT/server.yaml" "$OUT/floor.log"
load floor_c32_b1 "$FLOOR_ADDR" mlp 32 1 "$FLOOR_PID" ""
load floor_c1_b1 "$FLOOR_ADDR" mlp 1 1 "$FLOOR_PID" ""
stop_floor
trap - EXIT

for m in mlp cnn; do
  "$BIN/bench-inprocess" --repo "$REPO" --model "$m" --threads 2 --batches 1,8,16,32,64 --seconds "$DUR" \
    > "$OUT/${m}_inprocess.txt" 2>&1
done

{
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average $(cut -d' ' -f1-3 /proc/loadavg) after the run; $(date -u '+%Y-%m-%d %H:%M UTC'); \`benchmarks/run_batching.sh${1:+ $1}\`."
  echo
  /usr/bin/python3 benchmarks/batching_report.py "$OUT"
} | tee "$OUT/report.md"
