#!/usr/bin/env bash
# Dynamic batching, measured: one server, one run, batching on vs off.
#
#   benchmarks/run_batching.sh [--quick]
#
# The repository is the demo's plus variants of the same model files:
#   mlp / mlp_batched   the light member (784-256-10), per-call cost dominates
#   cnn / cnn_batched   the compute-heavy member (small CNN)
#   echo                a trivial model, for the server's own overhead
# All on both hosts (cpu0, cpu1; one executor, one thread each). For each
# pair, ensemble-loadgen at concurrency 32 with batch-1 requests; then the
# in-process LibTorch limit of each model at its best batch size (two
# threads, as two hosts) and the overhead at concurrency 1 on `echo`.
# Prints a table and writes build/bench_batching/*.json.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
source scripts/lib/server.sh
OUT=build/bench_batching
REPO=$OUT/repo
DUR=2; WIN=4
[ "${1:-}" = "--quick" ] && { DUR=0.5; WIN=3; }
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
cat > "$OUT/server.yaml" <<YAML
repository: repo
hosts:
  - {name: cpu0, device: cpu, cpu_affinity: [0], threads: 1, executors: 1}
  - {name: cpu1, device: cpu, cpu_affinity: [1], threads: 1, executors: 1}
YAML

LOG=$OUT/server.log
trap 'stop_server' EXIT
start_server "$OUT/server.yaml" "$LOG" --grpc-port 0 --metrics-port 0 --log-level warn
load() {  # load MODEL CONCURRENCY [BATCH]
  local batch=${3:-1}
  "$BIN/ensemble-loadgen" --server "$SERVER_ADDR" --model "$1" --batch "$batch" --concurrency "$2" \
    --duration-s "$DUR" --warmup-s 1 --max-windows "$WIN" --channels 4 --threads 2 \
    --json "$OUT/$1_c$2_b$batch.json" >"$OUT/$1_c$2_b$batch.txt" 2>&1
}
for m in mlp mlp_batched cnn cnn_batched; do load "$m" 32; done
# The server at its best: clients sending the model's best batch size.
load mlp 4 64
load cnn 4 8
load echo 1
stop_server
trap - EXIT

for m in mlp cnn; do
  "$BIN/bench-inprocess" --repo "$REPO" --model "$m" --threads 2 --seconds "$DUR" > "$OUT/${m}_inprocess.txt"
done

/usr/bin/python3 - "$OUT" <<'PY'
import json, re, sys
out = sys.argv[1]
def step(name):
    return json.load(open(f"{out}/{name}.json"))["steps"][0]
best_client_batch = {"mlp": 64, "cnn": 8}
def inproc(m):
    text = open(f"{out}/{m}_inprocess.txt").read()
    best = re.search(r"best: (\d+) rows/s at batch (\d+)", text)
    return float(best.group(1)), int(best.group(2))
print("concurrency 32, batch-1 requests, two hosts (one core each)")
print(f"{'model':<14}{'req/s':>10}{'p50 us':>10}{'p99 us':>10}{'avg batch':>11}")
rows = {}
for m in ["mlp", "mlp_batched", "cnn", "cnn_batched"]:
    s = step(f"{m}_c32_b1"); rows[m] = s
    print(f"{m:<14}{s['throughput_rps']:>10.0f}{s['latency_us']['p50']:>10.0f}{s['latency_us']['p99']:>10.0f}"
          f"{(s['server'].get('avg_batch') or 0):>11.1f}")
for m in ["mlp", "cnn"]:
    on, off = rows[f"{m}_batched"], rows[m]
    limit, best_batch = inproc(m)
    big = step(f"{m}_c4_b{best_client_batch[m]}")
    print(f"{m}: batching on/off throughput {on['throughput_rps']/off['throughput_rps']:.2f}x, "
          f"p99 on/off {on['latency_us']['p99']/off['latency_us']['p99']:.2f}x; "
          f"in-process limit {limit:.0f} rows/s at batch {best_batch}; server: {on['rows_per_s']:.0f} rows/s "
          f"from batch-1 requests ({100*on['rows_per_s']/limit:.0f}%), {big['rows_per_s']:.0f} rows/s from "
          f"batch-{best_client_batch[m]} requests at concurrency 4 ({100*big['rows_per_s']/limit:.0f}%)")
e = step("echo_c1_b1")
srv = e["server"]
print(f"echo at concurrency 1: p50 {e['latency_us']['p50']:.0f} us end to end, host compute "
      f"{srv['compute_infer_us']:.0f} us avg, server time {srv['success_us']:.0f} us avg: "
      f"overhead (p50 - compute) {e['latency_us']['p50'] - srv['compute_infer_us']:.0f} us")
PY
