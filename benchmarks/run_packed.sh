#!/usr/bin/env bash
# Packed members measured: a twelve-convnet ensemble served as twelve
# members (<ensemble>) and as one packed model (<ensemble>_packed, the same
# answers: docs/training.md, "The packed variant"), through ensemble-server
# (the trained repository's server.yaml: two CPU hosts, one core and one
# LibTorch thread each) by ensemble-loadgen in closed loop, at batch 1 and
# 64, concurrency 1 and 16: throughput, p50 and p99, and the CPU per request
# of the router and of the model hosts (core-µs, from /proc).
#
#   benchmarks/run_packed.sh [--repo DIR] [--quick]
#
# --repo DIR: a repository ensemble-train wrote with a packed variant (e.g.
# build/fmnist after benchmarks/run_training.sh), served from a copy whose
# ensemble has no overload ladder (both sides answer in full). Without it the script
# trains config/train-fashion-mnist.yaml's twelve convnets for one epoch on
# 2048 synthetic rows (about a minute): what is measured is speed, which
# does not depend on the weights. Targets: at batch 64 at least 3x the
# unpacked throughput, at batch 1 at most half its p50. Prints the table
# with PASS/MISS and writes it to build/bench_packed/report.md (the raw
# loadgen files beside it). About 3 minutes on two cores, --quick about 1.5.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/server.sh
source benchmarks/lib/bench.sh
COMMAND="benchmarks/run_packed.sh${*:+ $*}"
BIN=${BIN:-build/bin}
OUT=build/bench_packed
REPO="" QUICK=0
while [ $# -gt 0 ]; do
  case $1 in
    --repo) REPO=${2:?--repo needs a folder}; shift ;;
    --quick) QUICK=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "benchmarks/run_packed.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
require_tools ensemble-train ensemble-server ensemble-loadgen
if [ "$QUICK" = 1 ]; then DUR=1 WARM=0.5 WIN=3; else DUR=3 WARM=1 WIN=3; fi
STARTED=$(date +%s)
progress() { printf '[%4ds] %s\n' $(($(date +%s) - STARTED)) "$*" >&2; }
rm -rf "$OUT" && mkdir -p "$OUT"

if [ -z "$REPO" ]; then
  REPO=$OUT/repo
  progress "training twelve convnets on synthetic rows into $REPO (speed does not depend on the weights)"
  {
    echo "run: bench-packed"
    echo "data: {dataset: synthetic, synthetic_train_rows: 2048, synthetic_test_rows: 512}"
    echo "training: {epochs: 1, batch_size: 128, seed: 7}"
    sed -n '/^members:/,/^$/p' config/train-fashion-mnist.yaml
    echo "ensemble: {name: fmnist_ensemble, max_batch_size: 64, latency_target_ms: 0}"
  } >"$OUT/train.yaml"
  "$BIN/ensemble-train" --config "$OUT/train.yaml" --devices cpu:2 --out "$REPO" >"$OUT/train.log" 2>&1 || {
    tail -n 30 "$OUT/train.log" >&2
    echo "benchmarks/run_packed.sh: ensemble-train failed (log $OUT/train.log)" >&2
    exit 1
  }
fi
if [ "$REPO" != "$OUT/repo" ]; then
  # A copy, so that the ensemble's overload ladder (ensemble-train writes one)
  # can go: past capacity it would answer from cheaper rungs, and the
  # comparison is of full answers.
  cp -r "$REPO" "$OUT/repo"
  REPO=$OUT/repo
fi
ENSEMBLE=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["ensemble"]["name"])' \
  "$REPO/report.json")
PACKED=${ENSEMBLE}_packed
[ -f "$REPO/$PACKED/config.yaml" ] || {
  echo "benchmarks/run_packed.sh: $REPO has no packed variant $PACKED (train again with this ensemble-train)" >&2
  exit 1
}

sed -i '/^overload:/,$d' "$REPO/$ENSEMBLE/config.yaml"
progress "starting ensemble-server ($REPO/server.yaml)"
start_server "$REPO/server.yaml" "$OUT/server.log" --grpc-port 0 --metrics-port 0 --http-port 0 --log-level warn
trap stop_server EXIT
HOSTS=$(cat /proc/"$SERVER_PID"/task/*/children)  # the model-host processes
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for point in "1 1" "1 16" "64 1" "64 16"; do
  read -r batch conc <<<"$point"
  for model in "$ENSEMBLE" "$PACKED"; do
    measure_load "${model}_b${batch}_c${conc}" "$SERVER_ADDR" "$model" "$batch" "$conc" "$SERVER_PID" "$HOSTS"
  done
done

/usr/bin/python3 - "$OUT" "$ENSEMBLE" "$PACKED" "$LOAD_BEFORE" "$COMMAND" "$REPO" >"$OUT/report.md" <<'PY'
import json, os, sys, time
out, ens, packed, load, command, repo = sys.argv[1:7]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")

def step(name):
    run = json.load(open(f"{out}/{name}.json"))
    ticks = json.load(open(f"{out}/{name}.cpu"))
    s = run["steps"][0]
    calls = max(1, run["totals"]["client_ok"])  # every call of the step, warm-up included, as the ticks
    return {"rps": s["throughput_rps"], "rows": s["rows_per_s"], "p50": s["latency_us"]["p50"],
            "p99": s["latency_us"]["p99"],
            "router": 1e6 * ticks["server_ticks"] / ticks["tick_hz"] / calls,
            "hosts": 1e6 * ticks["host_ticks"] / ticks["tick_hz"] / calls}

members = sum(1 for line in open(f"{repo}/{ens}/config.yaml") if line.strip().startswith("- {model:"))
print(f"Machine: {os.cpu_count()} cores ({cpu}), load average {load} before the run; "
      f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; `{command}`.\n")
print(f"`{ens}` ({members} members, each its own member call) against `{packed}` (the same members packed "
      "into one model per serving host and architecture), served by ensemble-server from the trained repository's server.yaml "
      "(two CPU hosts, one core and one LibTorch thread each), closed loop. Core-µs per request: CPU time "
      "(user + system) of the router and of the model hosts over the step, per call.\n")
print("| batch | concurrency | model | requests/s | rows/s | p50 ms | p99 ms | router core-µs/req | hosts core-µs/req |")
print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
verdicts = []
for batch, conc in ((1, 1), (1, 16), (64, 1), (64, 16)):
    pair = {m: step(f"{m}_b{batch}_c{conc}") for m in (ens, packed)}
    for m, s in pair.items():
        print(f"| {batch} | {conc} | `{m}` | {s['rps']:.1f} | {s['rows']:.0f} | {s['p50'] / 1e3:.2f} | "
              f"{s['p99'] / 1e3:.2f} | {s['router']:.0f} | {s['hosts']:.0f} |")
    a, b = pair[ens], pair[packed]
    speed, p50 = b["rps"] / a["rps"], b["p50"] / a["p50"]
    core = (b["router"] + b["hosts"]) / (a["router"] + a["hosts"])
    if batch == 64:
        verdicts.append(f"batch 64, concurrency {conc}: packed throughput {speed:.2f}x the unpacked "
                        f"(target >= 3x: {'PASS' if speed >= 3 else 'MISS'}); core-µs per request {core:.2f}x")
    else:
        verdicts.append(f"batch 1, concurrency {conc}: packed p50 {p50:.2f}x the unpacked "
                        f"(target <= 0.5x: {'PASS' if p50 <= 0.5 else 'MISS'}); throughput {speed:.2f}x; "
                        f"core-µs per request {core:.2f}x")
print()
for v in verdicts:
    print(f"- {v}")
PY
cat "$OUT/report.md"
progress "done; report in $OUT/report.md"
