#!/usr/bin/env bash
# Response cache: the demo's mlp served by one server as `mlp` (no cache)
# and as copies with response_cache: {enable: true} (the server's cache 64
# MB; each copy its own keys, so each starts empty), under the same
# closed-loop load (ensemble-loadgen,
# concurrency 8, one image a request, --inputs: the rows of a file in turn):
#   repeating  half the requests one of 100 hot images, half an image seen
#              once: the cache's gain
#   unique     every request an image seen once: every lookup a miss, the
#              cache's cost (a digest of the inputs and a copy of the answer)
# Three rounds per stream, each an uncached step and a cached step (a fresh
# copy: the unique images are new to it) one after the other; each figure
# is requests/s, the ratio the cached step's over its round's uncached one,
# and the median of the rounds' ratios is the result (the machine's drift
# between rounds shows in the uncached column). Beside throughput, which
# the shared machine makes noisy, the router's own CPU per request (core-us,
# /proc of its process: where the cache's work is done) and the hosts'. The hit ratio is the cache's
# own count (ensemble_cache_hits_total over hits and misses) in the cached
# step, its warm-up included.
#
#   benchmarks/run_cache.sh [--no-build] [--seconds S]
#
# Prints the table and writes it to build/bench_cache/report.md. About 2
# minutes (the input files are 250 MB each).
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
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "benchmarks/run_cache.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$BUILD" = 0 ] || scripts/build.sh >/dev/null
require_tools ensemble-server ensemble-loadgen ensemble-model-host ensemble-make-demo
OUT=build/bench_cache
rm -rf "$OUT" && mkdir -p "$OUT"
progress() { echo "[run_cache $(date +%H:%M:%S)] $*"; }

progress "models: the demo's mlp, uncached and cached"
"$BIN/ensemble-make-demo" --out "$OUT/demo" --seed 1 >/dev/null
mkdir -p "$OUT/repo"
cp -r "$OUT/demo/mlp" "$OUT/repo/mlp"
for inputs in repeating unique; do
  for round in 1 2 3; do
    copy="$OUT/repo/mlp_${inputs}_$round"
    cp -r "$OUT/demo/mlp" "$copy"
    sed -i "s/^name: mlp\$/name: mlp_${inputs}_$round/" "$copy/config.yaml"
    printf 'response_cache: {enable: true}\n' >>"$copy/config.yaml"
  done
done
write_two_host_config "$OUT/server.yaml"
printf 'response_cache: {size_bytes: 67108864}\n' >>"$OUT/server.yaml"

# Enough rows that no step comes round to its first row again (the report
# says when one did): the unique images stay unique. 20,000 requests/s is
# above what the cached model answers here.
ROWS=$(( (SECONDS_PER_STEP + 1) * 20000 ))
progress "inputs: $ROWS rows each (repeating: half of them 100 hot images; unique)"
/usr/bin/python3 - "$OUT" "$ROWS" <<'EOF'
import sys
import numpy as np
out, rows = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(1)
unique = rng.random((rows, 1, 28, 28), dtype=np.float32)
np.save(f"{out}/unique.npy", unique)
hot = rng.random((100, 1, 28, 28), dtype=np.float32)
repeating = rng.random((rows, 1, 28, 28), dtype=np.float32)
pick = rng.random(rows) < 0.5
repeating[pick] = hot[rng.integers(0, 100, pick.sum())]
np.save(f"{out}/repeating.npy", repeating)
EOF

start_server "$OUT/server.yaml" "$OUT/server.log" --grpc-port 0 --no-http --metrics-port 0
trap stop_server EXIT
for _ in $(seq 1 100); do grep -q "metrics listening on" "$OUT/server.log" && break; sleep 0.1; done
METRICS=$(sed -n 's/^metrics listening on //p' "$OUT/server.log")
hits() { curl -s "http://$METRICS/metrics" | sed -n 's/^ensemble_cache_hits_total \(.*\)/\1/p'; }
lookups() { curl -s "http://$METRICS/metrics" | awk '/^ensemble_cache_(hits|misses)_total /{s+=$2} END{print s+0}'; }

step() {  # step NAME MODEL INPUTS
  progress "$1"
  "$BIN/ensemble-loadgen" --server "$SERVER_ADDR" --server-pid "$SERVER_PID" --model "$2" --inputs "$OUT/$3.npy" --concurrency 8 \
    --duration-s "$SECONDS_PER_STEP" --warmup-s 1 --max-windows 1 --ceiling-model none --json "$OUT/$1.json" \
    >"$OUT/$1.txt" 2>&1 || { cat "$OUT/$1.txt" >&2; exit 1; }
}
for inputs in repeating unique; do
  for round in 1 2 3; do
    step "${inputs}_plain_$round" mlp "$inputs"
    before_hits=$(hits) before_lookups=$(lookups)
    step "${inputs}_cached_$round" "mlp_${inputs}_$round" "$inputs"
    echo "$(( $(hits) - before_hits )) $(( $(lookups) - before_lookups ))" >"$OUT/${inputs}_$round.hits"
  done
done
stop_server
trap - EXIT

/usr/bin/python3 - "$OUT" "$ROWS" <<'EOF' | tee "$OUT/report.md"
import json, sys
out, rows = sys.argv[1], int(sys.argv[2])
def rps(name):
    return json.load(open(f"{out}/{name}.json"))["steps"][0]["throughput_rps"]
def cpu(name):
    s = json.load(open(f"{out}/{name}.json"))["steps"][0]
    return s["server_cpu_us_per_request"], s["hosts_cpu_us_per_request"]
print("| stream | round | uncached req/s | cached req/s | cached / uncached | router core-us per request "
      "(uncached, cached) | hosts core-us per request (uncached, cached) | hits / lookups |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
medians, router = {}, {}
for inputs in ("repeating", "unique"):
    ratios, extra = [], []
    for r in (1, 2, 3):
        plain, cached = rps(f"{inputs}_plain_{r}"), rps(f"{inputs}_cached_{r}")
        (rp, hp), (rc, hc) = cpu(f"{inputs}_plain_{r}"), cpu(f"{inputs}_cached_{r}")
        hits, lookups = (int(x) for x in open(f"{out}/{inputs}_{r}.hits").read().split())
        ratios.append(cached / plain)
        extra.append(rc - rp)
        wrapped = " (came round to its first rows)" if lookups > rows else ""
        print(f"| {inputs} | {r} | {plain:.0f} | {cached:.0f} | {cached / plain:.3f} | {rp:.1f}, {rc:.1f} | "
              f"{hp:.1f}, {hc:.1f} | {hits} / {lookups} ({100 * hits / max(lookups, 1):.1f}%){wrapped} |")
    medians[inputs] = sorted(ratios)[1]
    router[inputs] = sorted(extra)[1]
print(f"\nMedian cached / uncached throughput: repeating {medians['repeating']:.3f}, unique (every lookup a "
      f"miss) {medians['unique']:.3f}. Median extra router CPU per request with the cache: repeating "
      f"{router['repeating']:+.1f} core-us, unique {router['unique']:+.1f} core-us (a miss's cost).")
EOF
