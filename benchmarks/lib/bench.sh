# Shell helpers shared by the benchmark scripts. Source it after
# scripts/lib/server.sh; needs BIN (default build/bin).

# cpu_ticks PID...: user + system clock ticks of the processes so far, summed
# (getconf CLK_TCK of them per second).
cpu_ticks() {
  local total=0 pid
  for pid in "$@"; do total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat"))); done
  echo "$total"
}

# thread_counters PID: one line per thread of the process: its id, its name
# (characters other than letters, digits and ._:- as _), user + system
# ticks, voluntary and involuntary context switches. A thread that ends
# while it is read is left out.
thread_counters() {
  local t name ticks switches
  for t in /proc/"$1"/task/*; do
    name=$(tr -d '\n' <"$t/comm" 2>/dev/null | tr -c 'A-Za-z0-9._:-' '_') || continue
    # utime and stime: fields 14 and 15, counted after the ")" that ends the name.
    ticks=$(sed 's/.*) //' "$t/stat" 2>/dev/null | awk '{print $12 + $13}') || continue
    switches=$(awk '/^voluntary_ctxt/ {v = $2} /^nonvoluntary_ctxt/ {n = $2}
                    END {if (v != "" && n != "") print v, n}' "$t/status" 2>/dev/null) || continue
    [ -n "$name" ] && [ -n "$ticks" ] && [ -n "$switches" ] || continue
    printf '%s %s %s %s\n' "${t##*/}" "$name" "$ticks" "$switches"
  done
}

# thread_deltas BEFORE AFTER: JSON list of what each thread name (its
# threads summed) used between two thread_counters snapshots: ticks,
# voluntary and involuntary context switches. A thread that started between
# them counts from 0; one that ended is not in the list (the process's own
# ticks still hold its time).
thread_deltas() {
  awk 'FILENAME == ARGV[1] {t[$1] = $3; v[$1] = $4; n[$1] = $5; next}
       NF == 5 {name[$2] += $3 - t[$1]; vol[$2] += $4 - v[$1]; inv[$2] += $5 - n[$1]}
       END {sep = ""; printf "["; for (k in name) {printf "%s{\"name\": \"%s\", \"ticks\": %d, \"voluntary\": %d, \"involuntary\": %d}", sep, k, name[k], vol[k], inv[k]; sep = ", "}; printf "]"}' "$1" "$2"
}

# start_floor BINARY CONFIG LOG [FLAGS...]: starts a floor server
# (bench-grpc-floor, bench-http-floor) on a free port, with FLAGS; sets
# FLOOR_PID and FLOOR_ADDR. Exits, printing the log, if it does not say where
# it listens within 10 s.
start_floor() {
  "${BIN:-build/bin}/$1" --config "$2" "${@:4}" >"$3" 2>&1 &
  FLOOR_PID=$!
  for _ in $(seq 1 100); do grep -q "listening on" "$3" && break; sleep 0.1; done
  FLOOR_ADDR=$(sed -n 's/^.* listening on //p' "$3")
  [ -n "$FLOOR_ADDR" ] || { echo "$1 did not start:" >&2; cat "$3" >&2; exit 1; }
}

# stop_floor: stops the floor server start_floor started, if any.
stop_floor() {
  [ -z "${FLOOR_PID:-}" ] || { kill "$FLOOR_PID" 2>/dev/null; wait "$FLOOR_PID" 2>/dev/null || true; }
  FLOOR_PID=""
}

# write_two_host_config FILE: the benchmarks' server config, beside FILE's
# folder's repo/: two CPU hosts, one core, one LibTorch thread and one
# executor each (config/demo.yaml's hosts).
write_two_host_config() {
  cat >"$1" <<'YAML'
# Two CPU hosts, one core, one LibTorch thread and one executor each (config/demo.yaml's).
repository: repo
log_level: warn
hosts:
  - {name: cpu0, device: cpu, cpu_affinity: [0], threads: 1, executors: 1}
  - {name: cpu1, device: cpu, cpu_affinity: [1], threads: 1, executors: 1}
YAML
}

# write_light_ensemble REPO SCRATCH: the light ensemble of three MLPs (the
# demo's mlp architecture, 784-256-10, with the weights of ensemble-make-demo
# seeds 1, 2 and 3; REPO must hold make-demo's seed-1 repository), twice:
# light_ensemble (light_mlp1..3) and light_ensemble_batched, whose members
# add the router's dynamic batching with max_queue_delay_us 0 (a batch leaves
# as soon as a host is free, so a lone request never waits). Every member on
# every host. SCRATCH is a folder it may use and removes.
write_light_ensemble() {
  local repo=$1 scratch=$2 i seed from model suffix
  for seed in 2 3; do "${BIN:-build/bin}/ensemble-make-demo" --out "$scratch/seed$seed" --seed "$seed" >/dev/null; done
  for i in 1 2 3; do
    from=$repo; [ "$i" = 1 ] || from=$scratch/seed$i
    for model in "light_mlp$i" "light_mlp${i}_batched"; do
      mkdir -p "$repo/$model/1"
      cp "$from/mlp/1/model.pt" "$repo/$model/1/model.pt"
      sed '/^hosts:/d' "$repo/mlp/config.yaml" >"$repo/$model/config.yaml"
    done
    echo "dynamic_batching: {max_queue_delay_us: 0}" >>"$repo/light_mlp${i}_batched/config.yaml"
  done
  rm -rf "$scratch/seed2" "$scratch/seed3"
  for suffix in "" _batched; do
    mkdir -p "$repo/light_ensemble$suffix"
    cat >"$repo/light_ensemble$suffix/config.yaml" <<YAML
# Three light members (the mlp architecture, 784-256-10, different weights).
platform: ensemble
max_batch_size: 64
ensemble:
  combine: mean
  members:
    - {model: light_mlp1$suffix}
    - {model: light_mlp2$suffix}
    - {model: light_mlp3$suffix}
YAML
  done
}

# start_python_baseline LOG REPO ENSEMBLE THREADS: starts
# benchmarks/python_baseline/server.py (its stubs from build/python) on a free
# port, waits for its "listening on" line, sets SERVER_PID and SERVER_ADDR
# (stop_server stops it). Exits, printing the log, if it does not start.
start_python_baseline() {
  local log=$1
  PYTHONPATH="${BUILD_DIR:-build}/python" /usr/bin/python3 benchmarks/python_baseline/server.py --repository "$2" \
    --ensemble "$3" --port 0 --threads "$4" >"$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 1200); do
    if grep -q "^listening on" "$log"; then
      SERVER_ADDR=$(sed -n 's/^listening on //p' "$log")
      return 0
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  echo "the Python baseline did not start within 120 s" >&2
  cat "$log" >&2
  exit 1
}

# measure_load NAME ADDR MODEL BATCH CONCURRENCY PID HOST_PIDS [loadgen flags...]:
# one closed-loop ensemble-loadgen step into $OUT/NAME.json (its output in
# $OUT/NAME.txt), and the CPU ticks process PID and the processes HOST_PIDS
# (may be empty) spent during it into $OUT/NAME.cpu, with what each of PID's
# threads (by name) used (thread_deltas). Needs OUT, DUR, WARM and
# WIN (seconds per window, warm-up seconds, windows at most); calls
# `progress` first if the script defines one. Exits, printing the tool's
# output, if it fails (130 when interrupted).
measure_load() {
  local name=$1 addr=$2 model=$3 batch=$4 conc=$5 pid=$6 hosts=$7 rc=0 r0 h0 r1 h1 channels=(--channels 4 --threads 2)
  shift 7
  [[ " $* " == *" --http "* ]] && channels=()  # HTTP: one connection per call in flight
  if declare -F progress >/dev/null; then progress "$name: $model, batch $batch, concurrency $conc"; fi
  thread_counters "$pid" >"$OUT/$name.threads0"
  r0=$(cpu_ticks "$pid"); h0=$(cpu_ticks $hosts)
  "${BIN:-build/bin}/ensemble-loadgen" --server "$addr" --model "$model" --batch "$batch" --concurrency "$conc" \
    --duration-s "$DUR" --warmup-s "$WARM" --max-windows "$WIN" "${channels[@]}" --ceiling-model none \
    --json "$OUT/$name.json" "$@" >"$OUT/$name.txt" 2>&1 || rc=$?
  r1=$(cpu_ticks "$pid"); h1=$(cpu_ticks $hosts)
  thread_counters "$pid" >"$OUT/$name.threads1"
  [ "$rc" = 130 ] && { echo "$0: interrupted" >&2; exit 130; }
  if [ "$rc" != 0 ]; then
    cat "$OUT/$name.txt" >&2
    echo "$0: ensemble-loadgen failed ($name)" >&2
    exit 1
  fi
  echo "{\"server_ticks\": $((r1 - r0)), \"host_ticks\": $((h1 - h0)), \"tick_hz\": $(getconf CLK_TCK)," \
    "\"server_threads\": $(thread_deltas "$OUT/$name.threads0" "$OUT/$name.threads1")}" >"$OUT/$name.cpu"
  rm -f "$OUT/$name.threads0" "$OUT/$name.threads1"
}

# require_tools TOOL...: exits, naming it, at the first of BIN's programs
# that is not built.
require_tools() {
  local tool
  for tool in "$@"; do
    [ -x "$BIN/$tool" ] || { echo "$0: $BIN/$tool not built (scripts/build.sh)" >&2; exit 1; }
  done
}
