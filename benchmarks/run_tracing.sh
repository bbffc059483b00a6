#!/usr/bin/env bash
# Tracing's cost: the demo repository served with tracing off, and in each
# trace mode (triton: the trace file; opentelemetry: spans over OTLP/HTTP to
# a sink on this machine that decodes and counts them) at --trace-rate 1000
# (one request in 1000 traced) and at --trace-rate 1 (every request), each a
# server of its own started in turn, under the same closed loop
# (ensemble-loadgen, concurrency 8, random images) on `mlp` and on
# `demo_ensemble` (whose traced requests make a trace per member too).
# Two rounds of the five, so the machine's drift shows; each figure is
# requests/s and its ratio to the same round's run with tracing off.
#
#   benchmarks/run_tracing.sh [--no-build] [--seconds S]
#
# Prints the tables and writes them to build/bench_tracing/report.md. About
# 5 minutes.
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
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

# The OTLP sink: decodes each export (our generated Python stubs of
# proto/otlp_trace.proto) and keeps the export and span counts in a file.
cat >"$OUT/sink.py" <<'SINK'
import http.server, sys
sys.path.insert(0, sys.argv[2])
from proto import otlp_trace_pb2
counts = {"exports": 0, "spans": 0}
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = otlp_trace_pb2.ExportTraceServiceRequest.FromString(body)
        counts["exports"] += 1
        counts["spans"] += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        open(sys.argv[1], "w").write(f"{counts['exports']} {counts['spans']}\n")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
SINK

for round in 1 2; do
  for mode in off 1000 1 otel_1000 otel_1; do
    flags=()
    case $mode in
      off) ;;
      otel_*)
        rm -f "$OUT/sink_port"
        /usr/bin/python3 "$OUT/sink.py" "$OUT/spans_${mode}_$round.txt" build/python >"$OUT/sink_port" &
        SINK_PID=$!
        for _ in $(seq 1 100); do [ -s "$OUT/sink_port" ] && break; sleep 0.1; done
        flags=(--trace-mode opentelemetry --trace-url "http://127.0.0.1:$(cat "$OUT/sink_port")/v1/traces"
               --trace-level TIMESTAMPS --trace-rate "${mode#otel_}") ;;
      *) flags=(--trace-file "$OUT/trace_${mode}_$round.json" --trace-level TIMESTAMPS --trace-rate "$mode") ;;
    esac
    progress "round $round, tracing $mode"
    start_server "$OUT/server.yaml" "$OUT/server_${mode}_$round.log" --grpc-port 0 --no-http --no-metrics ${flags[@]+"${flags[@]}"}
    for model in mlp demo_ensemble; do
      "$BIN/ensemble-loadgen" --server "$SERVER_ADDR" --model "$model" --concurrency 8 --duration-s "$SECONDS_PER_STEP" \
        --warmup-s 1 --max-windows 1 --ceiling-model none --json "$OUT/${model}_${mode}_$round.json" \
        >"$OUT/${model}_${mode}_$round.txt" 2>&1 || { cat "$OUT/${model}_${mode}_$round.txt" >&2; exit 1; }
    done
    stop_server
    if [ "${mode#otel_}" != "$mode" ]; then kill "$SINK_PID"; wait "$SINK_PID" 2>/dev/null || true; fi
  done
done

/usr/bin/python3 - "$OUT" <<'EOF' | tee "$OUT/report.md"
import json, os, sys
out = sys.argv[1]
def rps(model, mode, r):
    return json.load(open(f"{out}/{model}_{mode}_{r}.json"))["steps"][0]["throughput_rps"]
def traces(mode, r):
    path = f"{out}/trace_{mode}_{r}.json"
    return len(json.load(open(path))) // 2 if os.path.exists(path) else 0
def spans(mode, r):
    path = f"{out}/spans_{mode}_{r}.txt"
    return int(open(path).read().split()[1]) if os.path.exists(path) else 0
print("| model | round | off req/s | triton, rate 1000 (ratio) | triton, rate 1 (ratio) | opentelemetry, rate 1000 (ratio) | opentelemetry, rate 1 (ratio) |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for model in ("mlp", "demo_ensemble"):
    for r in (1, 2):
        off = rps(model, "off", r)
        cells = [f"{x:.0f} ({x / off:.3f})" for x in (rps(model, m, r) for m in ("1000", "1", "otel_1000", "otel_1"))]
        print(f"| {model} | {r} | {off:.0f} | " + " | ".join(cells) + " |")
print("\nTraces written (both models of a round, members included): " +
      ", ".join(f"round {r}: rate 1000 {traces('1000', r)}, rate 1 {traces('1', r)}" for r in (1, 2)))
print("Spans the OTLP sink decoded: " +
      ", ".join(f"round {r}: rate 1000 {spans('otel_1000', r)}, rate 1 {spans('otel_1', r)}" for r in (1, 2)))
EOF
