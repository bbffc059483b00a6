#!/usr/bin/env bash
# Shared-memory tensors: a 16 MiB tensor through a registered
# system shared-memory region vs inside the gRPC message, in one run. Starts
# ensemble-server (one host, pinned to CPU 0) on a repository of two models
# (benchmarks/make_shm_models.py):
#   sum16m   FP32 [1, 4194304] -> [1, 1]: only the input is large
#   echo16m  FP32 [1, 4194304] -> same:   the tensor crosses both ways
# runs bench-shm-latency (benchmarks/shm_latency.cc) on each, and stops the
# server.
#
#   benchmarks/run_shm_latency.sh [bench-shm-latency flags, e.g. --iterations 50]
#
# Builds nothing: needs build/bin (scripts/build.sh) and Debian's
# python3-torch for the models. Writes nothing outside a temp folder.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
source scripts/lib/server.sh
OUT=$(mktemp -d)
trap 'stop_server; rm -rf "$OUT"' EXIT
/usr/bin/python3 benchmarks/make_shm_models.py "$OUT/repo"
cat > "$OUT/server.yaml" <<YAML
repository: repo
hosts:
  - {name: cpu0, device: cpu, cpu_affinity: [0], threads: 1, executors: 1}
YAML
start_server "$OUT/server.yaml" "$OUT/server.log" --grpc-port 0 --metrics-port 0 --no-http --log-level warn
echo "machine: $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p')), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
for model in sum16m echo16m; do
  "$BIN/bench-shm-latency" --server "$SERVER_ADDR" --model "$model" --elements 4194304 "$@"
done
