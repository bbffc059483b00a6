# Shell helpers for scripts that run ensemble-server in the background.
# Source it; needs BIN (default build/bin).

# start_server CONFIG LOG [extra server flags...]: starts the server on a free
# gRPC port, waits until it prints its address, and sets SERVER_PID and
# SERVER_ADDR. Exits (printing the log) if the server dies while starting.
start_server() {
  local config=$1 log=$2
  shift 2
  "${BIN:-build/bin}/ensemble-server" --config "$config" "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 1200); do
    if grep -q "grpc listening on" "$log"; then
      SERVER_ADDR=$(sed -n 's/^grpc listening on //p' "$log")
      return 0
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
  done
  echo "ensemble-server did not start within 120 s" >&2
  cat "$log"
  exit 1
}

# stop_server: SIGTERM (drain) and wait for the exit.
stop_server() {
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
}
