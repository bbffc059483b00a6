#!/usr/bin/env bash
# The main job: installs what is missing, builds, creates the demo model
# repository (build/demo_repo), serves it on loopback with config/demo.yaml,
# and shows a sample request and its answer. The server keeps running in the
# foreground; Ctrl-C stops it (drains, stops the hosts, exits 0).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/bin/ensemble-make-demo --out build/demo_repo --force
PORT=${GRPC_PORT:-8001}
LOG=$(mktemp)
build/bin/ensemble-server --config config/demo.yaml --grpc-port "$PORT" >"$LOG" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER; rm -f "$LOG"' EXIT
for _ in $(seq 1 600); do
  grep -q "grpc listening on" "$LOG" && break
  kill -0 $SERVER 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.2
done
cat "$LOG"
echo
echo "== sample request: demo_ensemble, 2 random Fashion-MNIST-shaped rows (clients/python/kserve_client.py)"
PYTHONPATH=build/python /usr/bin/python3 clients/python/kserve_client.py --server "127.0.0.1:$PORT" \
  --model demo_ensemble --batch 2 --uncertainty
echo
echo "== serving on 127.0.0.1:$PORT (KServe v2 gRPC); Ctrl-C to stop"
tail -f -n 0 "$LOG" &
wait $SERVER
