#!/usr/bin/env bash
# ModelStreamInfer vs ModelInfer (target: streaming at least 1.5x the unary
# throughput at concurrency 64, batch 1).
#
#   benchmarks/run_streaming.sh [--rounds N] [--duration-s S] [--models "mlp demo_ensemble"]
#                               [--concurrency "1 16 64"] [--loadgen-threads N] [--echo] [--batched]
#                               [--out FILE.md]
#
# --loadgen-threads (default 1): ensemble-loadgen's --threads, for every
# mode alike. One completion-queue thread is the cheapest client on a small
# machine the server shares: gRPC's epoll1 poller lets one thread at a time
# wait in epoll, so a second thread mostly adds hand-offs (cv waits and
# context switches) between the two; on the 2-core development VM it cost
# 8.3 µs of client CPU per streamed mlp request against 12 with 2 threads.
#
# --batched serves the demo members with dynamic batching (max_queue_delay_us
# 0: a batch is whatever waits when a host slot frees), the configuration one
# runs for throughput, where a request's share of the models' compute falls
# with the batch and the per-call transport cost is most of what is left.
#
# --echo also measures the echo model (clients/make_echo_model.py, output =
# input, on both hosts): next to no compute, so the per-call transport cost
# is most of a request's cost there. It serves a copy of the demo repository
# with echo added (needs Debian's python3-torch).
#
# One ensemble-server on config/demo.yaml (the demo repository, made if
# missing), driven by ensemble-loadgen (closed loop, batch 1, 4 channels,
# --loadgen-threads threads) in three modes, one after the other at each concurrency, in
# alternating order round by round so that drift on a shared machine hits
# every mode alike:
#   unary    one ModelInfer call per request
#   stream   --streaming: one ModelStreamInfer stream per slot (the default)
#   stream4  --streaming --streams 4: the slots share 4 streams (one per channel)
# Each run also reads, from /proc, the CPU time the router and its host
# processes used per request, and ensemble-loadgen reports its own: where
# the time goes. Prints a markdown table (medians over the rounds; the
# ratio is the median over the rounds of each mode's req/s over unary's at
# the same concurrency in the same round, i.e. seconds apart, with the
# rounds' lowest and highest in brackets) and writes it to --out (default
# build/benchmarks/streaming-<date>.md).
set -euo pipefail
export ES_STREAMING_ARGS="$*"  # for the report's header
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
source scripts/lib/server.sh
source benchmarks/lib/bench.sh

ROUNDS=2 DURATION=1.5 MODELS="mlp demo_ensemble" CONCURRENCY="1 16 64" OUT="" ECHO=0 BATCHED=0 THREADS=1
while [ $# -gt 0 ]; do
  case $1 in
    --echo) ECHO=1; shift; continue ;;
    --batched) BATCHED=1; shift; continue ;;
    --rounds) ROUNDS=$2 ;;
    --duration-s) DURATION=$2 ;;
    --models) MODELS=$2 ;;
    --concurrency) CONCURRENCY=$2 ;;
    --loadgen-threads) THREADS=$2 ;;
    --out) OUT=$2 ;;
    *) echo "usage: $0 [--rounds N] [--duration-s S] [--models \"M ...\"] [--concurrency \"C ...\"] [--loadgen-threads N] [--echo] [--batched] [--out FILE]" >&2
       exit 2 ;;
  esac
  shift 2
done
require_tools ensemble-server ensemble-loadgen ensemble-make-demo
[ -d build/demo_repo ] || "$BIN/ensemble-make-demo" --out build/demo_repo
mkdir -p build/benchmarks
OUT=${OUT:-build/benchmarks/streaming-$(date -u +%Y%m%d-%H%M%S).md}
WORK=$(mktemp -d)
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && stop_server
  rm -rf "$WORK"
}
trap cleanup EXIT

CONFIG=config/demo.yaml
if [ "$ECHO" = 1 ] || [ "$BATCHED" = 1 ]; then
  cp -r build/demo_repo "$WORK/repo"
  sed "s#^repository: .*#repository: $WORK/repo#" config/demo.yaml >"$WORK/server.yaml"
  CONFIG=$WORK/server.yaml
fi
if [ "$ECHO" = 1 ]; then
  /usr/bin/python3 clients/make_echo_model.py --out "$WORK/repo" >/dev/null
  MODELS="$MODELS echo"
fi
if [ "$BATCHED" = 1 ]; then
  for m in mlp wide_mlp cnn; do echo "dynamic_batching: {max_queue_delay_us: 0}" >>"$WORK/repo/$m/config.yaml"; done
fi
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
# Every port picked free (the config names 8001/8002/8000): runs beside other servers.
start_server "$CONFIG" "$WORK/server.log" --grpc-port 0 --metrics-port 0 --http-port 0 --log-level warn

# ticks PID...: user + system clock ticks of the processes so far.
ticks() {
  local sum=0 pid
  for pid in "$@"; do sum=$((sum + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0))); done
  echo "$sum"
}
# The router's direct children: its model hosts.
host_pids() {
  local stat
  for stat in /proc/[0-9]*/stat; do
    awk -v p="$SERVER_PID" '$4 == p {print $1}' "$stat" 2>/dev/null || true
  done
}
HOSTS=$(host_pids | tr '\n' ' ')
echo "server $SERVER_ADDR (pid $SERVER_PID, hosts $HOSTS); load average before: $LOAD_BEFORE"

# run MODEL CONCURRENCY MODE ROUND: one ensemble-loadgen run; writes
# $WORK/MODEL-C-MODE-ROUND.json and .cpu (router ticks, host ticks, requests).
run() {
  local model=$1 c=$2 mode=$3 round=$4 flags=()
  case $mode in
    stream) flags=(--streaming) ;;
    stream4) flags=(--streaming --streams 4) ;;
  esac
  local base="$WORK/$model-$c-$mode-$round" r0 h0 r1 h1
  r0=$(ticks "$SERVER_PID") h0=$(ticks $HOSTS)
  "$BIN/ensemble-loadgen" --server "$SERVER_ADDR" --model "$model" --batch 1 --concurrency "$c" \
    --channels 4 --threads "$THREADS" --warmup-s 0.5 --duration-s "$DURATION" --max-windows 4 --ceiling-model none \
    "${flags[@]}" --json "$base.json" >"$base.out" 2>&1 || { cat "$base.out" >&2; exit 1; }
  r1=$(ticks "$SERVER_PID") h1=$(ticks $HOSTS)
  # Requests of the whole invocation (warm-up included), as the CPU times are.
  local requests
  requests=$(sed -n 's/^requests: \([0-9]*\) ok.*/\1/p' "$base.out")
  echo "$((r1 - r0)) $((h1 - h0)) ${requests:-0}" >"$base.cpu"
  python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['steps'][0]; print('%-13s c=%-3s %-8s %9.0f req/s  p50 %7.0f us' % (sys.argv[2], sys.argv[3], sys.argv[4], s['throughput_rps'], s['latency_us']['p50']))" \
    "$base.json" "$model" "$c" "$mode"
}

for round in $(seq 1 "$ROUNDS"); do
  for model in $MODELS; do
    for c in $CONCURRENCY; do
      modes=(unary stream)
      [ "$c" -gt 4 ] && modes+=(stream4)
      if [ $((round % 2)) -eq 0 ]; then  # reversed every other round
        reversed=()
        for ((i = ${#modes[@]} - 1; i >= 0; i--)); do reversed+=("${modes[$i]}"); done
        modes=("${reversed[@]}")
      fi
      for mode in "${modes[@]}"; do run "$model" "$c" "$mode" "$round"; done
    done
  done
done

CPU_MODEL=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
python3 - "$WORK" "$ROUNDS" "$(getconf CLK_TCK)" "$CPU_MODEL" "$(nproc)" "$LOAD_BEFORE" "$MODELS" "$CONCURRENCY" \
  "$DURATION" "$THREADS" >"$OUT" <<'EOF'
import json, os, statistics, sys
work, rounds, hz, cpu, cores, load, models, concs, duration, threads = sys.argv[1:]
rounds, hz = int(rounds), int(hz)
def med(xs):
    return statistics.median(xs) if xs else float('nan')
print(f"Machine: {cores} cores ({cpu}), load average {load} before the run; `benchmarks/run_streaming.sh {os.environ.get('ES_STREAMING_ARGS', '')}` (models: {models}).")
print()
print(f"ensemble-loadgen closed loop, batch 1, 4 channels, {threads} thread(s); medians over the rounds. req/s and latencies")
print("client-side (µs); ratio = median over the rounds of req/s over unary's at the same concurrency in the same")
print("round [lowest - highest]; CPU per request from /proc (router process, its host processes; warm-ups")
print("included) and ensemble-loadgen's own (cores).")
print()
print("| model | concurrency | mode | req/s | ratio to unary | p50 | p99 | router µs/req | hosts µs/req | loadgen cores |")
print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for model in models.split():
    for c in concs.split():
        unary = {}  # round -> unary req/s
        for mode in ("unary", "stream", "stream4"):
            rps, p50, p99, router, hosts, tool, ratios = [], [], [], [], [], [], []
            for r in range(1, rounds + 1):
                base = os.path.join(work, f"{model}-{c}-{mode}-{r}")
                if not os.path.exists(base + ".json"):
                    continue
                s = json.load(open(base + ".json"))["steps"][0]
                rps.append(s["throughput_rps"]); p50.append(s["latency_us"]["p50"]); p99.append(s["latency_us"]["p99"])
                if mode == "unary":
                    unary[r] = s["throughput_rps"]
                elif unary.get(r):
                    ratios.append(s["throughput_rps"] / unary[r])
                tool.append(s.get("client_cpu_cores") or 0)
                rt, ht, n = (int(x) for x in open(base + ".cpu").read().split())
                if n > 0:
                    router.append(1e6 * rt / hz / n); hosts.append(1e6 * ht / hz / n)
            if not rps:
                continue
            m = med(rps)
            if mode == "unary":
                ratio = "1"
            elif ratios:
                ratio = f"**{med(ratios):.2f}x** [{min(ratios):.2f} - {max(ratios):.2f}]"
            else:
                ratio = "-"
            print(f"| {model} | {c} | {mode} | {m:,.0f} | {ratio} | {med(p50):,.0f} | {med(p99):,.0f} | "
                  f"{med(router):.1f} | {med(hosts):.1f} | {med(tool):.2f} |")
EOF
echo
cat "$OUT"
echo "(written to $OUT)"
