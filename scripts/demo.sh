#!/usr/bin/env bash
# The main job: installs what is missing, builds, creates the demo model
# repository (build/demo_repo: three small members trained for a few seconds
# on Fashion-MNIST), serves it on loopback with config/demo.yaml, and sends
# four real test images: each one's predicted class beside its true one,
# every member's vote and the ensemble's uncertainty. The server keeps running in the
# foreground; Ctrl-C stops it (drains, stops the hosts, exits 0).
# GRPC_PORT=N picks the port (default 8001, as in config/demo.yaml);
# FIRST_IMAGE=N which test images are sent (N .. N+3, default 0).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
BIN=build/bin
source scripts/lib/server.sh
"$BIN/ensemble-make-demo" --out build/demo_repo --force
LOG=$(mktemp)
TAIL_PID=
trap '[ -n "$TAIL_PID" ] && kill "$TAIL_PID" 2>/dev/null; stop_server; rm -f "$LOG"' EXIT
trap 'exit 0' INT TERM  # Ctrl-C: the EXIT trap drains the server and cleans up
start_server config/demo.yaml "$LOG" --grpc-port "${GRPC_PORT:-8001}"
cat "$LOG"
echo
echo "== sample request: demo_ensemble on 4 Fashion-MNIST test images (clients/python/kserve_client.py)"
PYTHONPATH=build/python /usr/bin/python3 clients/python/kserve_client.py --server "$SERVER_ADDR" \
  --model demo_ensemble --batch 4 --data /usr/share/datasets/fashion-mnist --first "${FIRST_IMAGE:-0}"
echo
echo "== serving on $SERVER_ADDR (KServe v2 gRPC); Ctrl-C to stop"
tail -f -n 0 "$LOG" &
TAIL_PID=$!
wait "$SERVER_PID"
