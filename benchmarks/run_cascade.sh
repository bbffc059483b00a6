#!/usr/bin/env bash
# Cascades measured: members of different depths trained by
# ensemble-train on Fashion-MNIST (config/train-fashion-mnist-cascade.yaml:
# an MLP, a small CNN, three convnets), served by ensemble-server as
# ensemble-train published them, and measured through the server on the
# whole Fashion-MNIST test set (benchmarks/cascade/measure.py): accuracy,
# NLL and throughput of (a) the best single member, (b) the full mean
# ensemble, (c) its cascade variant with the threshold ensemble-train chose,
# at the same concurrency.
#
#   benchmarks/run_cascade.sh [--config FILE --out DIR] [--retrain] [--concurrency N] [--rounds N] [--batch N]
#
# Trains only when DIR (default build/fmnist_cascade) holds no trained
# repository (or with --retrain): about 20 minutes on 2 cores. --config
# config/train-fashion-mnist.yaml --out build/fmnist measures the training
# benchmark's ensemble (benchmarks/run_training.sh) the same way. Target:
# the cascade within 0.1 accuracy points of the full ensemble at no less
# than 2x its throughput.
# Prints the table with PASS/MISS and writes it to
# build/benchmarks/cascade-<date>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
source scripts/lib/server.sh
source benchmarks/lib/bench.sh
OUT=build/fmnist_cascade CONFIG=config/train-fashion-mnist-cascade.yaml
RETRAIN=0 CONCURRENCY=4 ROUNDS=3 BATCH=64
while [ $# -gt 0 ]; do
  case $1 in
    --retrain) RETRAIN=1; shift; continue ;;
    --concurrency) CONCURRENCY=$2 ;;
    --rounds) ROUNDS=$2 ;;
    --batch) BATCH=$2 ;;
    --config) CONFIG=$2 ;;
    --out) OUT=$2 ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "benchmarks/run_cascade.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift 2
done
require_tools ensemble-train ensemble-server

if [ "$RETRAIN" = 1 ] || [ ! -f "$OUT/report.json" ]; then
  echo "[run_cascade] training into $OUT ($CONFIG, 2 CPU ranks)"
  rm -rf "$OUT"
  start=$(date +%s)
  "$BIN/ensemble-train" --config "$CONFIG" --devices cpu:2 --out "$OUT"
  echo "[run_cascade] trained in $(( $(date +%s) - start )) s"
fi

read -r ENSEMBLE CASCADE BEST < <(/usr/bin/python3 - "$OUT/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
best = max(r["members"], key=lambda m: r["members"][m]["accuracy"])
name = r["ensemble"]["name"]
print(name, name + "_cascade", best)
PY
)
[ -f "$OUT/$CASCADE/config.yaml" ] || { echo "no cascade variant $OUT/$CASCADE (retrain with this ensemble-train)" >&2; exit 1; }
echo "[run_cascade] best member $BEST, ensemble $ENSEMBLE, cascade $CASCADE:"
sed -n '/ensemble:/,$p' "$OUT/$CASCADE/config.yaml"

start_server "$OUT/server.yaml" "$OUT/server.log" --grpc-port 0 --metrics-port 0 --http-port 0 --log-level warn
trap stop_server EXIT
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
JSON=build/benchmarks/cascade-$(date -u +%Y%m%d-%H%M%S).json
mkdir -p build/benchmarks
PYTHONPATH=build/python /usr/bin/python3 benchmarks/cascade/measure.py --server "$SERVER_ADDR" \
  --models "$BEST" "$ENSEMBLE" "$CASCADE" --batch "$BATCH" --concurrency "$CONCURRENCY" --rounds "$ROUNDS" \
  --json "$JSON"

REPORT=${JSON%.json}.md
/usr/bin/python3 - "$JSON" "$BEST" "$ENSEMBLE" "$CASCADE" "$LOAD_BEFORE" "$OUT/$CASCADE/config.yaml" >"$REPORT" <<'PY'
import json, platform, re, subprocess, sys
s = json.load(open(sys.argv[1]))
best, ens, cas, load, cas_config = sys.argv[2:7]
m = s["models"]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
threshold = re.search(r"exit_threshold:\s*([0-9.]+)", open(cas_config).read())
print(f"Machine: {len(open('/proc/cpuinfo').read().split('processor')) - 1} cores ({cpu}), load average {load} "
      f"before the run; `benchmarks/run_cascade.sh` (requests of {s['batch']} rows, concurrency {s['concurrency']}, "
      f"median of {s['rounds']} passes over the 10,000 test images).\n")
print("| model | accuracy | NLL | rows/s | rows/s vs full ensemble |")
print("| --- | ---: | ---: | ---: | ---: |")
for label, name in (("best single member", best), ("full ensemble (mean)", ens), ("cascade", cas)):
    r = m[name]
    print(f"| {label}: `{name}` | {100 * r['accuracy']:.2f}% | {r['nll']:.4f} | {r['median_rows_per_s']:,.0f} | "
          f"{r['median_rows_per_s'] / m[ens]['median_rows_per_s']:.2f}x |")
gap = 100 * (m[ens]["accuracy"] - m[cas]["accuracy"])
speed = m[cas]["median_rows_per_s"] / m[ens]["median_rows_per_s"]
verdict = lambda ok: "**PASS**" if ok else "**MISS**"
print(f"\n- Cascade threshold {threshold.group(1) if threshold else '?'}; rows leaving at each stage: "
      f"{m[cas].get('exits_per_stage')}.")
print(f"- Cascade accuracy {gap:+.2f} points below the full ensemble (target at most 0.1): {verdict(gap <= 0.1)}; "
      f"throughput {speed:.2f}x the full ensemble's (target at least 2x): {verdict(speed >= 2)}.")
PY
cat "$REPORT"
echo "[run_cascade] report written to $REPORT"
