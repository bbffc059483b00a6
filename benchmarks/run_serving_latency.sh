#!/usr/bin/env bash
# Starts ensemble-server on the demo repository (free port), measures the
# end-to-end latency of demo_ensemble at concurrency 1 next to the
# in-process LibTorch floor, and stops the server.
# Usage: benchmarks/run_serving_latency.sh [bench-serving-latency flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
source scripts/lib/server.sh
[ -d build/demo_repo ] || "$BIN/ensemble-make-demo" --out build/demo_repo
LOG=$(mktemp)
trap 'stop_server; rm -f "$LOG"' EXIT
start_server config/demo.yaml "$LOG" --grpc-port 0 --metrics-port 0 --http-port 0 --log-level warn
"$BIN/bench-serving-latency" --server "$SERVER_ADDR" --repo build/demo_repo "$@"
