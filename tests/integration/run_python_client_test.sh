#!/usr/bin/env bash
# ctest `python_client`: the Python example client against a real server.
#
#   run_python_client_test.sh SERVER_BIN MAKE_DEMO_BIN PYTHON_STUBS_DIR CLIENT_PY
#
# Writes the demo repository and a server config into a mktemp dir, starts
# ensemble-server on a free port (--grpc-port 0), runs the client with
# Debian's /usr/bin/python3, checks its output, then SIGTERMs the server and
# checks it exits 0. Everything it writes is removed at the end.
set -euo pipefail

if [[ $# -ne 4 ]]; then
  echo "usage: $0 SERVER_BIN MAKE_DEMO_BIN PYTHON_STUBS_DIR CLIENT_PY" >&2
  exit 2
fi
server_bin=$1 make_demo=$2 stubs=$3 client=$4
batch=5

work=$(mktemp -d "${TMPDIR:-/tmp}/es_python_client.XXXXXX")
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL -- "-$server_pid" 2>/dev/null || kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  if [[ -f "$work/server.log" ]]; then
    echo "---- server log (tail) ----" >&2
    tail -n 40 "$work/server.log" >&2
  fi
  exit 1
}

"$make_demo" --out "$work/repo" --seed 1 >"$work/make_demo.log" 2>&1 || fail "ensemble-make-demo: $(cat "$work/make_demo.log")"
# A model that is not a classifier (its output is an image): printed plainly.
/usr/bin/python3 "$(dirname "$client")/../make_echo_model.py" --out "$work/repo" --hosts cpu0 \
  >>"$work/make_demo.log" 2>&1 || fail "make_echo_model.py: $(cat "$work/make_demo.log")"

cat >"$work/server.yaml" <<EOF
repository: $work/repo
listen_address: 127.0.0.1
hosts:
  - {name: cpu0, device: cpu, cpu_affinity: [0], threads: 1, executors: 1}
  - {name: cpu1, device: cpu, cpu_affinity: [1], threads: 1, executors: 1}
limits: {max_request_bytes: 1048576, heartbeat_timeout_ms: 5000, drain_timeout_ms: 5000}
EOF

# The server in its own process group (set -m), stdout to a FIFO we read the
# listening line from.
mkfifo "$work/stdout"
set -m
"$server_bin" --config "$work/server.yaml" --grpc-port 0 --metrics-port 0 --http-port 0 >"$work/stdout" 2>"$work/server.log" &
server_pid=$!
set +m
exec 3<"$work/stdout"
line=""
if ! IFS= read -r -t 120 line <&3; then
  fail "no 'grpc listening on' line from ensemble-server within 120 s"
fi
[[ "$line" =~ ^grpc\ listening\ on\ (127\.0\.0\.1:[0-9]+)$ ]] || fail "unexpected first stdout line: '$line'"
address=${BASH_REMATCH[1]}
echo "server at $address (pid $server_pid)"

output=$(PYTHONPATH="$stubs" timeout 120 /usr/bin/python3 "$client" --server "$address" --model demo_ensemble \
  --batch "$batch" 2>&1) || fail "client failed: $output"
echo "$output"

grep -q '^server live: True$' <<<"$output" || fail "no 'server live: True'"
grep -q '^model demo_ensemble (platform ensemble' <<<"$output" || fail "no metadata line"
grep -q 'input input FP32 \[-1, 1, 28, 28\]' <<<"$output" || fail "metadata input shape"
grep -q '^response: model demo_ensemble version 1 id kserve_client-1$' <<<"$output" || fail "no response line"
rows=$(grep -cE '^row [0-9]+: top class [0-9] [A-Za-z/ -]+ \(p=[01]\.[0-9]{4}\) entropy=[0-9.]+ disagreement=[01]\.[0-9]{2}$' \
  <<<"$output" || true)
[[ "$rows" == "$batch" ]] || fail "expected $batch 'row N: top class' lines, got $rows"

# Real test images (Debian's dataset-fashion-mnist): the true class beside
# the predicted one, and each member's vote.
output=$(PYTHONPATH="$stubs" timeout 120 /usr/bin/python3 "$client" --server "$address" --model demo_ensemble \
  --batch 3 --data /usr/share/datasets/fashion-mnist --first 10 2>&1) || fail "client failed with --data: $output"
echo "$output"
rows=$(grep -cE '^row [0-9]+: top class .* \| true class [0-9] [A-Za-z/ -]+ \((right|wrong)\)$' <<<"$output" || true)
[[ "$rows" == 3 ]] || fail "expected 3 rows with their true class, got $rows"
votes=$(grep -cE '^    votes: mlp [A-Za-z/ -]+, wide_mlp [A-Za-z/ -]+, cnn [A-Za-z/ -]+$' <<<"$output" || true)
[[ "$votes" == 3 ]] || fail "expected 3 'votes:' lines, got $votes"

output=$(PYTHONPATH="$stubs" timeout 120 /usr/bin/python3 "$client" --server "$address" --model echo --batch 2 2>&1) ||
  fail "client failed on the echo model: $output"
echo "$output"
rows=$(grep -cE '^row [0-9]+: output \[1, 28, 28\] min=[-0-9.e]+ max=[-0-9.e]+ values \[' <<<"$output" || true)
[[ "$rows" == 2 ]] || fail "expected 2 plain 'row N: output [1, 28, 28] ...' lines for the echo model, got $rows"

# A usage error exits 2 (argparse) without touching the server.
set +e
PYTHONPATH="$stubs" /usr/bin/python3 "$client" --batch 0 >/dev/null 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "--batch 0 exited $rc, expected 2"

# SIGTERM: the server drains and exits 0 within 10 s (a zombie counts as exited).
kill -TERM "$server_pid"
state() { awk '{print $3}' "/proc/$server_pid/stat" 2>/dev/null || true; }
for _ in $(seq 100); do
  s=$(state)
  [[ -z "$s" || "$s" == Z ]] && break
  sleep 0.1
done
s=$(state)
[[ -z "$s" || "$s" == Z ]] || fail "ensemble-server still running 10 s after SIGTERM"
set +e
wait "$server_pid"
rc=$?
set -e
server_pid=""
[[ $rc -eq 0 ]] || fail "ensemble-server exited $rc after SIGTERM, expected 0"
exec 3<&-
echo "PASS: python client against ensemble-server"
