#!/usr/bin/env bash
# Tracing's cost: the demo repository served with tracing off, and in each
# trace mode (triton: the trace file; opentelemetry: spans over OTLP/HTTP to
# a sink on this machine that answers at once) at --trace-rate 1000
# (one request in 1000 traced) and at --trace-rate 1 (every request), each a
# server of its own started in turn, under the same closed loop
# (ensemble-loadgen, concurrency 8, random images) on `mlp` and on
# `demo_ensemble` (whose traced requests make a trace per member too).
# Two rounds of the five, so the machine's drift shows; the figures are
# requests/s, and the router's own CPU per request (core-us, tracing's
# writer thread included; the sink's not), each with its ratio to the same
# round's run with tracing off.
#
# Throughput moves by up to 10% between runs on a shared 2-core machine, so
# a cost of 1% cannot be seen in it: a third run of each setting profiles the
# router (perf record with call stacks, PROFILE_SECONDS, default 5, of each
# model) and counts the share of its CPU samples whose stack holds tracing's
# code (benchmarks/perf_share.py), with a 95% upper bound. Needs perf
# (Debian's linux-perf); without it, or with --no-profile, that table is
# left out.
#
#   benchmarks/run_tracing.sh [--no-build] [--no-profile] [--seconds S]
#
# Prints the tables and writes them to build/bench_tracing/report.md. About
# 4 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
source scripts/lib/server.sh
source benchmarks/lib/bench.sh
BUILD=1 SECONDS_PER_STEP=3 PROFILE=1 PROFILE_SECONDS=${PROFILE_SECONDS:-5}
while [ $# -gt 0 ]; do
  case $1 in
    --no-build) BUILD=0 ;;
    --no-profile) PROFILE=0 ;;
    --seconds) SECONDS_PER_STEP=$2; shift ;;
    -h | --help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "benchmarks/run_tracing.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$BUILD" = 0 ] || scripts/build.sh >/dev/null
require_tools ensemble-server ensemble-loadgen ensemble-model-host ensemble-make-demo
OUT=build/bench_tracing
rm -rf "$OUT" && mkdir -p "$OUT"
progress() { echo "[run_tracing $(date +%H:%M:%S)] $*"; }
"$BIN/ensemble-make-demo" --out "$OUT/repo" --seed 1 >/dev/null
write_two_host_config "$OUT/server.yaml"

# The OTLP sink: answers each export at once and counts exports and bytes
# (no decoding: it shares the machine's two cores with the server, and what
# a collector does with the spans is not the server's cost). How many traces
# went out is the server's own ensemble_traces_written_total.
cat >"$OUT/sink.py" <<'SINK'
import http.server, sys
counts = {"exports": 0, "bytes": 0}
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        counts["bytes"] += len(self.rfile.read(int(self.headers["Content-Length"])))
        counts["exports"] += 1
        open(sys.argv[1], "w").write(f"{counts['exports']} {counts['bytes']}\n")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
SINK

# start_mode MODE TAG: a server with tracing MODE (off, 1000, 1, otel_1000,
# otel_1), its files named MODE_TAG; for opentelemetry, its sink first.
start_mode() {
  local mode=$1 tag=$2 flags=() metrics=(--no-metrics)
  case $mode in
    off) ;;
    otel_*)
      rm -f "$OUT/sink_port"
      /usr/bin/python3 "$OUT/sink.py" "$OUT/exports_${mode}_$tag.txt" >"$OUT/sink_port" &
      SINK_PID=$!
      for _ in $(seq 1 100); do [ -s "$OUT/sink_port" ] && break; sleep 0.1; done
      flags=(--trace-mode opentelemetry --trace-url "http://127.0.0.1:$(cat "$OUT/sink_port")/v1/traces"
             --trace-level TIMESTAMPS --trace-rate "${mode#otel_}")
      metrics=(--metrics-port 0) ;;
    *) flags=(--trace-file "$OUT/trace_${mode}_$tag.json" --trace-level TIMESTAMPS --trace-rate "$mode") ;;
  esac
  start_server "$OUT/server.yaml" "$OUT/server_${mode}_$tag.log" --grpc-port 0 --no-http "${metrics[@]}" \
    ${flags[@]+"${flags[@]}"}
}

# stop_mode MODE TAG: the server (and sink) down; for opentelemetry, the
# server's count of exported and dropped traces kept first.
stop_mode() {
  local mode=$1 tag=$2
  if [ "${mode#otel_}" != "$mode" ]; then
    sleep 1  # the last export out
    curl -s "http://$(sed -n 's/^metrics listening on //p' "$OUT/server_${mode}_$tag.log")/metrics" |
      awk '/^ensemble_traces_(written|dropped)_total/ {print $1, $2}' >"$OUT/traced_${mode}_$tag.txt"
  fi
  stop_server
  if [ "${mode#otel_}" != "$mode" ]; then kill "$SINK_PID"; wait "$SINK_PID" 2>/dev/null || true; fi
}

# load MODEL FILE_STEM SECONDS: the closed loop on the running server.
load() {
  "$BIN/ensemble-loadgen" --server "$SERVER_ADDR" --server-pid "$SERVER_PID" --model "$1" --concurrency 8 \
    --duration-s "$3" --warmup-s 1 --max-windows 1 --ceiling-model none --json "$OUT/$2.json" \
    >"$OUT/$2.txt" 2>&1 || { cat "$OUT/$2.txt" >&2; exit 1; }
}

for round in 1 2; do
  for mode in off 1000 1 otel_1000 otel_1; do
    progress "round $round, tracing $mode"
    start_mode "$mode" "$round"
    for model in mlp demo_ensemble; do load "$model" "${model}_${mode}_$round" "$SECONDS_PER_STEP"; done
    stop_mode "$mode" "$round"
  done
done

# The profile: where the router's CPU goes, by call stack, in a third run
# of each setting (perf record of the router alone, after the warm-up), and
# the share of its samples whose stack holds tracing's code.
TRACING_CODE='es::(Tracer|RequestTrace|Otlp[A-Za-z]*|NewTraceId|NewSpanId|HexId|ParseTraceparent)\b|ensemble_serve::otlp::|ContinueClientTrace'
PROFILED=0
if [ "$PROFILE" = 1 ] && ! command -v perf >/dev/null; then
  progress "no perf on this machine (Debian: apt-get install linux-perf): the profile is left out"
elif [ "$PROFILE" = 1 ]; then
  PROFILED=1
  for mode in off 1000 otel_1000 1 otel_1; do
    progress "profile, tracing $mode"
    start_mode "$mode" profile
    for model in mlp demo_ensemble; do
      load "$model" "${model}_${mode}_profile" "$((PROFILE_SECONDS + 1))" &
      LOAD_PID=$!
      sleep 1.5  # past the warm-up
      perf record -q -F 999 --call-graph dwarf,16384 -p "$SERVER_PID" -o "$OUT/perf.data" -- \
        sleep "$PROFILE_SECONDS" >/dev/null 2>&1
      wait "$LOAD_PID"
      perf script --no-inline -F comm,tid,ip,sym -i "$OUT/perf.data" 2>/dev/null |
        /usr/bin/python3 benchmarks/perf_share.py "$TRACING_CODE" >"$OUT/share_${model}_${mode}.txt"
      rm -f "$OUT/perf.data"
    done
    stop_mode "$mode" profile
  done
fi

/usr/bin/python3 - "$OUT" "$PROFILED" "$PROFILE_SECONDS" <<'EOF' | tee "$OUT/report.md"
import json, os, sys
out = sys.argv[1]
def rps(model, mode, r):
    return json.load(open(f"{out}/{model}_{mode}_{r}.json"))["steps"][0]["throughput_rps"]
def cpu(model, mode, r):
    return json.load(open(f"{out}/{model}_{mode}_{r}.json"))["steps"][0]["server_cpu_us_per_request"]
def traces(mode, r):
    path = f"{out}/trace_{mode}_{r}.json"
    return len(json.load(open(path))) // 2 if os.path.exists(path) else 0
def exported(mode, r):
    figures = dict(line.split() for line in open(f"{out}/traced_{mode}_{r}.txt"))
    sent = open(f"{out}/exports_{mode}_{r}.txt").read().split() if os.path.exists(f"{out}/exports_{mode}_{r}.txt") else ["0", "0"]
    return (f"{float(figures.get('ensemble_traces_written_total', 0)):.0f} traces exported "
            f"({float(figures.get('ensemble_traces_dropped_total', 0)):.0f} dropped) in {sent[0]} exports of "
            f"{int(sent[1]) / 1e6:.1f} MB")
def table(figure, unit, digits):
    """One row per model and round: `figure` off, then in each mode with its ratio to off."""
    print(f"| model | round | off {unit} | triton, rate 1000 (ratio) | triton, rate 1 (ratio) | "
          "opentelemetry, rate 1000 (ratio) | opentelemetry, rate 1 (ratio) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for model in ("mlp", "demo_ensemble"):
        for r in (1, 2):
            off = figure(model, "off", r)
            cells = [f"{x:.{digits}f} ({x / off:.3f})"
                     for x in (figure(model, m, r) for m in ("1000", "1", "otel_1000", "otel_1"))]
            print(f"| {model} | {r} | {off:.{digits}f} | " + " | ".join(cells) + " |")
table(rps, "req/s", 0)
print("\nThe router's CPU per request (ratio to off):\n")
table(cpu, "core-us", 1)
print("\nTraces written (both models of a round, members included): " +
      ", ".join(f"round {r}: rate 1000 {traces('1000', r)}, rate 1 {traces('1', r)}" for r in (1, 2)))
print("OpenTelemetry: " + "; ".join(f"round {r}: rate 1000 {exported('otel_1000', r)}, rate 1 {exported('otel_1', r)}"
                                   for r in (1, 2)))
if sys.argv[2] == "1":
    print(f"\nTracing's share of the router's CPU (samples of {sys.argv[3]} s whose stack holds tracing's code; "
          "95% upper bound):\n")
    modes = ("off", "1000", "otel_1000", "1", "otel_1")
    print("| model | off | triton, rate 1000 | opentelemetry, rate 1000 | triton, rate 1 | opentelemetry, rate 1 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for model in ("mlp", "demo_ensemble"):
        cells = []
        for m in modes:
            words = open(f"{out}/share_{model}_{m}.txt").read().split()
            # "MATCHED of TOTAL samples (P%), 95% upper bound U%"
            cells.append(f"{words[4].strip('(),')} ({words[0]} of {words[2]}; <= {words[-1]})")
        print(f"| {model} | " + " | ".join(cells) + " |")
EOF
