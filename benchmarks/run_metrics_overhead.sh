#!/usr/bin/env bash
# Throughput with metrics on vs off (target: on must be >= 97% of off).
#
#   benchmarks/run_metrics_overhead.sh [--model mlp] [--batch 1] [--concurrency 8]
#                                      [--seconds 3] [--rounds 10]
#
# Starts two ensemble-servers on config/demo.yaml side by side: one with
# /metrics on (--metrics-port 0, scraped once a second over HTTP as Prometheus
# would) and one with --no-metrics. Only one is driven at a time: each round
# measures both with bench-throughput (closed loop, `concurrency` calls in
# flight), in alternating order, so drift on a shared machine hits both sides
# alike and no start-up differs between them. Prints each window (with the
# router process's CPU time per request, from /proc, which a busy shared
# machine disturbs less than throughput), the medians and their ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
source scripts/lib/server.sh

MODEL=mlp BATCH=1 CONCURRENCY=8 SECONDS_EACH=3 ROUNDS=10
while [ $# -gt 0 ]; do
  case $1 in
    --model) MODEL=$2 ;;
    --batch) BATCH=$2 ;;
    --concurrency) CONCURRENCY=$2 ;;
    --seconds) SECONDS_EACH=$2 ;;
    --rounds) ROUNDS=$2 ;;
    *) echo "usage: $0 [--model M] [--batch B] [--concurrency C] [--seconds S] [--rounds R]" >&2; exit 2 ;;
  esac
  shift 2
done

[ -d build/demo_repo ] || "$BIN/ensemble-make-demo" --out build/demo_repo
WORK=$(mktemp -d)
SERVER_PID="" ON_PID="" OFF_PID="" SCRAPER_PID=""
cleanup() {
  [ -n "$SCRAPER_PID" ] && kill "$SCRAPER_PID" 2>/dev/null || true
  for pid in $ON_PID $OFF_PID; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in $ON_PID $OFF_PID; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# scrape_every_second HOST PORT: GET /metrics once a second (bash /dev/tcp, no curl needed).
scrape_every_second() {
  while sleep 1; do
    exec 3<>"/dev/tcp/$1/$2" || continue
    printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
    cat <&3 >/dev/null
    exec 3<&-
  done
}

start_server config/demo.yaml "$WORK/on.log" --grpc-port 0 --metrics-port 0 --http-port 0 --log-level warn
ON_PID=$SERVER_PID ON_ADDR=$SERVER_ADDR
for _ in $(seq 1 50); do
  METRICS=$(sed -n 's/^metrics listening on //p' "$WORK/on.log")
  [ -n "$METRICS" ] && break
  sleep 0.1
done
[ -n "$METRICS" ] || { echo "no 'metrics listening on' line" >&2; cat "$WORK/on.log" >&2; exit 1; }
scrape_every_second "${METRICS%:*}" "${METRICS##*:}" &
SCRAPER_PID=$!
start_server config/demo.yaml "$WORK/off.log" --grpc-port 0 --no-metrics --http-port 0 --log-level warn
OFF_PID=$SERVER_PID OFF_ADDR=$SERVER_ADDR

# cpu_ticks PID: user + system clock ticks of a process so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# measure ADDR PID: one window; prints "requests/s router-CPU-µs-per-request".
measure() {
  local before after out
  before=$(cpu_ticks "$2")
  out=$("$BIN/bench-throughput" --server "$1" --model "$MODEL" --batch "$BATCH" --concurrency "$CONCURRENCY" \
    --seconds "$SECONDS_EACH" --warmup 1)
  after=$(cpu_ticks "$2")
  awk -v out="$out" -v ticks=$((after - before)) -v hz="$(getconf CLK_TCK)" 'BEGIN {
    n = split(out, f, /[ =]/); for (i = 1; i < n; i += 2) v[f[i]] = f[i + 1]
    printf "%s %.1f\n", v["requests_per_s"], 1e6 * ticks / hz / v["total_ok"] }'
}

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

echo "model=$MODEL batch=$BATCH concurrency=$CONCURRENCY seconds=$SECONDS_EACH rounds=$ROUNDS"
ON=() OFF=() ON_CPU=() OFF_CPU=()
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order=(on off); else order=(off on); fi
  for side in "${order[@]}"; do
    if [ "$side" = on ]; then result=$(measure "$ON_ADDR" "$ON_PID"); else result=$(measure "$OFF_ADDR" "$OFF_PID"); fi
    read -r rps cpu <<<"$result"
    [ -n "$rps" ] || { echo "bench-throughput failed" >&2; exit 1; }
    if [ "$side" = on ]; then ON+=("$rps"); ON_CPU+=("$cpu"); else OFF+=("$rps"); OFF_CPU+=("$cpu"); fi
    echo "round $round metrics $side: $rps requests/s, router CPU $cpu µs/request"
  done
done
on_median=$(median "${ON[@]}") off_median=$(median "${OFF[@]}")
on_cpu=$(median "${ON_CPU[@]}") off_cpu=$(median "${OFF_CPU[@]}")
echo "median metrics on:  $on_median requests/s, router CPU $on_cpu µs/request"
echo "median metrics off: $off_median requests/s, router CPU $off_cpu µs/request"
awk -v a="$on_median" -v b="$off_median" -v c="$on_cpu" -v d="$off_cpu" \
  'BEGIN {printf "on/off: throughput %.1f%%, router CPU per request %.1f%%\n", 100 * a / b, 100 * c / d}'
