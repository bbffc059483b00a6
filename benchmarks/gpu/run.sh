#!/usr/bin/env bash
# benchmarks/gpu/run.sh: the one check of the CUDA path, on the GPU machine.
#
# Builds the CUDA hosts, the trainer, the GPU tests and benchmarks there
# against its CUDA LibTorch (PyTorch's, found through python3), with the
# router brought prebuilt from Debian (benchmarks/gpu/pack.sh makes the
# bundle), then runs, each step timed and logged:
#
#   env         the machine: GPU, driver, PyTorch, compilers
#   configure   CMake with ES_BUILD_ROUTER=OFF; the LibTorch must be CUDA-enabled
#   build       hosts, trainer, GPU tests, GPU benchmarks (keeps going past errors)
#   router      the prebuilt router and clients, with the bundle's libraries
#               that this machine lacks (LD_LIBRARY_PATH)
#   unit-tests  test_cuda_runtime, test_cuda_host (their GPU tests must run,
#               not skip), test_model_runner, test_request_executor
#   h2d         bench-h2d: arena <-> GPU, pageable vs pinned staging vs registered
#   e2e         router + two hosts on the GPU, real gRPC requests to
#               demo_ensemble; answers equal the CPU hosts' within 2e-3;
#               device memory per host in /metrics
#   train       ensemble-train on cuda:0 (NCCL, world size 1), synthetic data;
#               the repository it writes is served and answers
#   bench       demo_ensemble, batch 1..1024: server (loadgen over gRPC) vs
#               in-process LibTorch on the same GPU; arena registered vs not
#
# and prints a table last (also written to $OUT/gpu-check.md). Logs, CSVs and
# JSON go under $OUT when set (the device tool's folder), else
# <build-dir>/gpu-check. Estimated at 5-7 minutes on the reference machine
# (not measured yet); a CPU rehearsal on Debian takes about 1.5 minutes once built.
#
#   benchmarks/gpu/run.sh [--bundle DIR] [--build-dir DIR] [--quick]
#                         [--device cuda:N] [--rehearse-on-cpu] [--help]
#
#   --bundle DIR       what pack.sh made (default build-gpu-bundle)
#   --build-dir DIR    the CMake build folder (default build-gpu)
#   --quick            fewer batch sizes and shorter windows
#   --device cuda:N    the GPU (default cuda:0)
#   --rehearse-on-cpu  run every step with CPU devices against the LibTorch
#                      CMake finds (Debian's): checks the script and the
#                      build switches where there is no GPU; GPU-only steps
#                      skip and no figure of it is a GPU figure
#
# Exit: 0 every step passed and the targets were met; 1 a step failed;
# 3 every step passed but a performance target was missed; 2 usage error.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUNDLE="$ROOT/build-gpu-bundle"
BUILD="$ROOT/build-gpu"
DEVICE="cuda:0"
QUICK=0
REHEARSE=0

usage() {  # the header comment, up to the first line of code
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bundle) BUNDLE="$(realpath -m "$2")"; shift 2 ;;
    --build-dir) BUILD="$(realpath -m "$2")"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --rehearse-on-cpu) REHEARSE=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$DEVICE" =~ ^cuda:[0-9]+$ ]] || { echo "run.sh: --device must be cuda:N" >&2; exit 2; }
if [[ $REHEARSE == 1 ]]; then DEV=cpu; else DEV="$DEVICE"; fi

OUT_DIR="${OUT:-$BUILD/gpu-check}"
LOG="$OUT_DIR/logs"
RES="$OUT_DIR/results"  # one-line results of the steps: <step>.detail, figures
WORK="$BUILD/gpu-check-work"
ROUTER_LIB="$WORK/router-lib"
mkdir -p "$LOG" "$RES" "$WORK"
rm -f "$RES"/* "$WORK/pids"
SYSTEM_PYTHON="$(command -v python3 || true)"
export PATH="/opt/torch/.venv/bin:$PATH"  # the GPU machine's cmake and ninja
# The Python whose PyTorch provides the CUDA LibTorch: the first that imports torch.
TORCH_PY=""
for p in python3 "$SYSTEM_PYTHON" /usr/bin/python3; do
  if [[ -n "$p" ]] && "$p" -c 'import torch' >/dev/null 2>&1; then TORCH_PY="$(command -v "$p")"; break; fi
done

if [[ $QUICK == 1 ]]; then
  BATCHES=(1 8 64 256 1024); WINDOW_S=0.5; INPROC_S=0.5
else
  BATCHES=(1 2 4 8 16 32 64 128 256 512 1024); WINDOW_S=1; INPROC_S=1
fi
[[ $REHEARSE == 1 ]] && { BATCHES=(1 16 64); WINDOW_S=0.3; INPROC_S=0.3; }
BATCH_LIST="$(IFS=,; echo "${BATCHES[*]}")"
TARGETS=(ensemble-model-host ensemble-make-demo ensemble-train bench-gpu-inprocess
         test_cuda_host test_model_runner test_request_executor)
# The CUDA-toolkit-only parts; a rehearsal builds them where the toolkit is.
if [[ $REHEARSE == 0 || -f /usr/local/cuda/include/cuda_runtime_api.h ]]; then
  TARGETS+=(bench-h2d test_cuda_runtime)
fi

# --- helpers -------------------------------------------------------------------

STEPS=()
declare -A STATUS SECONDS_OF
T0=$(date +%s)

# run_step NAME FUNCTION: runs FUNCTION in a subshell with errexit (so any
# failing command fails the step), output to $LOG/NAME.log; exit 0 PASS,
# 77 SKIP, anything else FAIL. The step's one-line result is $RES/NAME.detail.
run_step() {
  local name="$1" fn="$2" start rc
  STEPS+=("$name")
  start=$(date +%s%N)
  printf '%-11s ... ' "$name"
  set +e
  ( set -euo pipefail; trap step_cleanup EXIT; "$fn" ) >"$LOG/$name.log" 2>&1
  rc=$?
  set -e
  SECONDS_OF[$name]=$(( ($(date +%s%N) - start + 500000000) / 1000000000 ))
  case $rc in
    0) STATUS[$name]=PASS ;;
    77) STATUS[$name]=SKIP ;;
    *) STATUS[$name]=FAIL
       [[ -s "$RES/$name.detail" ]] || echo "exit $rc: $(grep -v '^\s*$' "$LOG/$name.log" | tail -n 1 | cut -c1-160)" >"$RES/$name.detail" ;;
  esac
  echo "${STATUS[$name]} (${SECONDS_OF[$name]} s) $(cat "$RES/$name.detail" 2>/dev/null || true)"
}
detail() { echo "$*" >"$RES/$STEP_NAME.detail"; }
figure() { echo "$2" >"$RES/$1"; }      # figure NAME VALUE
read_figure() { cat "$RES/$1" 2>/dev/null || echo "-"; }
have() { [[ -x "$BUILD/bin/$1" ]]; }
need() { for b in "$@"; do have "$b" || { detail "needs $b, which did not build"; return 1; }; done; }

# A step that fails while its router runs stops it on the way out.
step_cleanup() {
  if [[ -n "${ROUTER_PID:-}" ]] && kill -0 "$ROUTER_PID" 2>/dev/null; then stop_router; fi
}

cleanup() {
  if [[ -f "$WORK/pids" ]]; then
    while read -r pid; do kill -TERM "$pid" 2>/dev/null || true; done <"$WORK/pids"
  fi
}
trap cleanup EXIT

router_env() {
  env LD_LIBRARY_PATH="$ROUTER_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
}

# start_router CONFIG NAME [VAR=VALUE...]: sets ROUTER_PID, GRPC, METRICS once
# every host is ready.
start_router() {
  local config="$1" name="$2"; shift 2
  local log="$LOG/router-$name.log"
  # env execs the router, so $! is the router itself (a shell function run
  # in the background would be a subshell, and killing it would orphan the router).
  env LD_LIBRARY_PATH="$ROUTER_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@" \
    "$BUILD/bin/ensemble-server" --config "$config" --grpc-port 0 --metrics-port 0 --http-port 0 >"$log" 2>&1 &
  ROUTER_PID=$!
  echo "$ROUTER_PID" >>"$WORK/pids"
  for _ in $(seq 1 900); do
    grep -q 'metrics listening on' "$log" && break
    kill -0 "$ROUTER_PID" 2>/dev/null || { echo "router '$name' exited:"; tail -n 20 "$log"; return 1; }
    sleep 0.1
  done
  GRPC="$(grep -m1 -o 'grpc listening on [^ ]*' "$log" | awk '{print $4}')"
  METRICS="$(grep -m1 -o 'metrics listening on [^ ]*' "$log" | awk '{print $4}')"
  [[ -n "$GRPC" ]] || { echo "router '$name' printed no gRPC address"; tail -n 20 "$log"; return 1; }
  for _ in $(seq 1 600); do
    router_env "$BUILD/bin/ensemble-cli" --server "$GRPC" ready >/dev/null 2>&1 && return 0
    kill -0 "$ROUTER_PID" 2>/dev/null || { echo "router '$name' exited:"; tail -n 20 "$log"; return 1; }
    sleep 0.2
  done
  echo "router '$name' not ready after 120 s"; tail -n 20 "$log"; return 1
}

stop_router() {
  kill -TERM "$ROUTER_PID" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$ROUTER_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$ROUTER_PID" 2>/dev/null || true
  wait "$ROUTER_PID" 2>/dev/null || true
}

cli() { router_env "$BUILD/bin/ensemble-cli" --server "$GRPC" "$@"; }

# server_yaml FILE DEVICE EXECUTORS: hosts gpu0 and gpu1 (the demo's two hosts)
server_yaml() {
  cat >"$1" <<EOF
# Written by benchmarks/gpu/run.sh: the demo ensemble on two hosts sharing one device.
repository: $WORK/repo
listen_address: 127.0.0.1
log_level: info
hosts:
  - {name: gpu0, device: $2, threads: 1, executors: $3}
  - {name: gpu1, device: $2, threads: 1, executors: $3}
limits:
  max_request_bytes: 67108864
  arena_bytes: 268435456
EOF
}

# --- steps ---------------------------------------------------------------------

step_env() {
  STEP_NAME="env"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -n), $(nproc) CPUs, $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    | tee "$RES/gpu" || echo "no nvidia-smi"
  echo "cmake: $(cmake --version | head -n1); g++: $(g++ --version | head -n1)"
  [[ -x /usr/local/cuda/bin/nvcc ]] && /usr/local/cuda/bin/nvcc --version | tail -n1
  [[ -f "$BUNDLE/MANIFEST" ]] && { echo "bundle:"; cat "$BUNDLE/MANIFEST"; }
  if [[ $REHEARSE == 1 ]]; then
    detail "rehearsal on the CPU: no GPU figure below is a GPU figure"
    figure torch "(CMake's LibTorch)"
    return 0
  fi
  [[ -n "$TORCH_PY" ]] || { detail "no python3 here imports torch"; return 1; }
  echo "PyTorch from $TORCH_PY"
  "$TORCH_PY" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")' \
    | tee "$RES/torch_line"
  read -r tv cv avail _ <"$RES/torch_line"
  figure torch "$tv (CUDA $cv)"
  [[ "$avail" == True ]] || { detail "PyTorch sees no GPU"; return 1; }
  detail "$(cat "$RES/gpu" 2>/dev/null | head -n1); PyTorch $tv, CUDA $cv"
}

step_configure() {
  STEP_NAME=configure
  local prefix="$BUNDLE/prefix/usr" torch_prefix="" cuda_mode=ON generator=()
  [[ -d "$prefix" ]] || { detail "no $prefix: run benchmarks/gpu/pack.sh on Debian and carry build-gpu-bundle"; return 1; }
  if [[ $REHEARSE == 1 ]]; then
    cuda_mode=AUTO
  else
    [[ -n "$TORCH_PY" ]] || { detail "no python3 here imports torch"; return 1; }
    torch_prefix="$("$TORCH_PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
  fi
  command -v ninja >/dev/null && generator=(-G Ninja)
  [[ -f "$BUILD/CMakeCache.txt" ]] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${generator[1]:-Unix Makefiles}" "$BUILD/CMakeCache.txt" \
    && rm -rf "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles"
  local cuda_root="${CUDAToolkit_ROOT:-}"
  [[ -z "$cuda_root" && -d /usr/local/cuda/include ]] && cuda_root=/usr/local/cuda
  cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DES_BUILD_ROUTER=OFF -DES_CUDA="$cuda_mode" \
    -DCMAKE_PREFIX_PATH="${torch_prefix:+$torch_prefix;}$prefix" \
    ${cuda_root:+-DCUDAToolkit_ROOT="$cuda_root"}
  local line
  line="$(grep -m1 -o 'ensemble-serve: CUDA LibTorch [A-Z]*, CUDA runtime parts [A-Z]*' "$LOG/configure.log" || true)"
  if [[ $REHEARSE == 0 && "$line" != *"CUDA LibTorch ON"* ]]; then
    detail "the LibTorch found is not CUDA-enabled ($line)"; return 1
  fi
  detail "${line#ensemble-serve: }"
}

step_build() {
  STEP_NAME=build
  [[ -f "$BUILD/CMakeCache.txt" ]] || { detail "not configured"; return 1; }
  local keep_going=(-- -k 0)
  grep -q 'CMAKE_GENERATOR:INTERNAL=Ninja' "$BUILD/CMakeCache.txt" || keep_going=(-- -k)
  set +e
  cmake --build "$BUILD" -j "$(nproc)" --target "${TARGETS[@]}" "${keep_going[@]}"
  set -e
  local missing=()
  for t in "${TARGETS[@]}"; do have "$t" || missing+=("$t"); done
  if [[ ${#missing[@]} -gt 0 ]]; then
    detail "did not build: ${missing[*]}; first error: $(grep -m1 'error:' "$LOG/build.log" | cut -c1-200)"
    return 1
  fi
  detail "${#TARGETS[@]} targets"
}

step_router() {
  STEP_NAME=router
  local src="$BUNDLE/router"
  [[ -d "$src/bin" ]] || { detail "no $src: run benchmarks/gpu/pack.sh on Debian and carry build-gpu-bundle"; return 1; }
  mkdir -p "$BUILD/bin"
  # Beside the hosts: the router starts ensemble-model-host from its own folder.
  cp --remove-destination "$src/bin/"* "$BUILD/bin/"
  rm -rf "$ROUTER_LIB"; mkdir -p "$ROUTER_LIB"
  local missing m
  for _ in 1 2 3 4 5 6; do  # dependencies of dependencies show up one round later
    missing="$(for b in ensemble-server ensemble-cli ensemble-loadgen; do
                 LD_LIBRARY_PATH="$ROUTER_LIB" ldd "$BUILD/bin/$b"; done | awk '/not found/ {print $1}' | sort -u)"
    [[ -z "$missing" ]] && break
    for m in $missing; do
      [[ -f "$src/lib/$m" ]] || { detail "$m is missing here and not in the bundle"; return 1; }
      ln -sf "$src/lib/$m" "$ROUTER_LIB/$m"
    done
  done
  router_env "$BUILD/bin/ensemble-server" --help >/dev/null
  router_env "$BUILD/bin/ensemble-loadgen" --help >/dev/null
  detail "prebuilt router; $(ls "$ROUTER_LIB" | wc -l) of the bundle's $(ls "$src/lib" | wc -l) libraries needed here"
}

step_unit_tests() {
  STEP_NAME=unit-tests
  local t failed=0 summary=()
  for t in test_cuda_runtime test_cuda_host test_model_runner test_request_executor; do
    have "$t" || { [[ $REHEARSE == 1 && $t == test_cuda_runtime ]] && continue; summary+=("$t: not built"); failed=1; continue; }
    set +e
    timeout --kill-after=5 300 "$BUILD/bin/$t" --gtest_output="xml:$OUT_DIR/$t.xml" >"$LOG/$t.log" 2>&1
    local rc=$?
    set -e
    local counts
    counts="$(python3 - "$OUT_DIR/$t.xml" "$REHEARSE" <<'PY'
import sys, xml.etree.ElementTree as ET
gpu_suites = {"ArenaOnGpu", "CudaHostPath", "CudaHostPathUnregistered"}
try:
    cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
except Exception as e:
    print("no-xml 0 0 0 0"); sys.exit()
passed = failed = skipped = gpu_skipped = 0
for c in cases:
    if c.find("failure") is not None: failed += 1
    elif c.get("result") == "skipped" or c.find("skipped") is not None:
        skipped += 1
        if c.get("classname") in gpu_suites: gpu_skipped += 1
    else: passed += 1
print("ok", passed, failed, skipped, gpu_skipped)
PY
)"
    read -r state p f s gs <<<"$counts"
    if [[ ${s:-0} == 0 ]]; then summary+=("$t $p/$((p + f)) passed"); else summary+=("$t $p/$((p + f + s)) passed, $s skipped"); fi
    if [[ $rc != 0 || $state != ok || $f != 0 ]]; then failed=1; fi
    if [[ $REHEARSE == 0 && ${gs:-0} != 0 ]]; then summary+=("($gs GPU tests skipped on the GPU machine)"); failed=1; fi
  done
  detail "$(IFS=';'; echo "${summary[*]}" | sed 's/;/; /g')"
  return $failed
}

step_h2d() {
  STEP_NAME=h2d
  [[ $REHEARSE == 1 ]] && { detail "needs a GPU"; return 77; }
  need bench-h2d
  set +e
  timeout --kill-after=5 120 "$BUILD/bin/bench-h2d" --device "${DEVICE#cuda:}" --csv "$OUT_DIR/h2d.csv"
  local rc=$?
  set -e
  [[ $rc == 77 ]] && { detail "bench-h2d saw no CUDA device"; return 1; }
  [[ $rc == 0 ]] || return $rc
  python3 - "$OUT_DIR/h2d.csv" "$RES" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
get = lambda d, m, b: next((r for r in rows if r["direction"] == d and r["mode"] == m and r["bytes"] == str(b)), None)
big, small = 64 << 20, 4 << 10
out = []
for d in ("h2d", "d2h"):
    cells = []
    for m in ("pageable", "staging", "registered"):
        r = get(d, m, big)
        cells.append(f"{m} {float(r['gb_per_s']):.1f}" if r else f"{m} -")
    out.append(f"{d} 64 MiB GB/s: " + ", ".join(cells))
    r_s, r_r = get(d, "staging", small), get(d, "registered", small)
    if r_s and r_r:
        out.append(f"{d} 4 KiB µs: staging {float(r_s['median_us']):.1f}, registered {float(r_r['median_us']):.1f}")
reg = next((r for r in rows if r["direction"] == "register"), None)
if reg: out.append(f"registering 128 MiB: {float(reg['median_us']) / 1000:.1f} ms once")
open(f"{sys.argv[2]}/h2d.detail", "w").write("; ".join(out) + "\n")
PY
}

# Answers of demo_ensemble for fixed inputs, as JSON, from the router at $GRPC.
infer_set() {
  local tag="$1" b
  for b in 1 8 1024; do
    cli --json infer demo_ensemble --batch "$b" --seed 11 >"$WORK/answers-$tag-$b.json"
  done
}

step_e2e() {
  STEP_NAME=e2e
  need ensemble-make-demo ensemble-model-host ensemble-server ensemble-cli
  rm -rf "$WORK/repo"
  "$BUILD/bin/ensemble-make-demo" --out "$WORK/repo" --max-batch-size 1024 --hosts gpu0,gpu1
  server_yaml "$WORK/cpu.yaml" cpu 1
  server_yaml "$WORK/gpu.yaml" "$DEV" 4
  start_router "$WORK/cpu.yaml" e2e-cpu
  infer_set cpu
  stop_router
  start_router "$WORK/gpu.yaml" e2e-gpu
  infer_set gpu
  sleep 0.4  # a heartbeat (100 ms) publishes the hosts' device memory
  python3 - "http://$METRICS/metrics" >"$WORK/metrics-e2e.txt" <<'PY'
import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())
PY
  grep -E 'ensemble_host_(device_memory|up)' "$WORK/metrics-e2e.txt" || true
  grep -E 'arena|stream|executor|ready with' "$LOG/router-e2e-gpu.log" | head -n 12 || true
  stop_router
  grep -c 'arena registered with CUDA' "$LOG/router-e2e-gpu.log" >"$WORK/registered-hosts" || true
  python3 - "$WORK" "$RES" "$REHEARSE" <<'PY'
import json, sys, re
work, res, rehearse = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
worst, values, disagree_rows, rows = 0.0, 0, 0, 0
for b in (1, 8, 1024):
    cpu = {o["name"]: o for o in json.load(open(f"{work}/answers-cpu-{b}.json"))["outputs"]}
    gpu = {o["name"]: o for o in json.load(open(f"{work}/answers-gpu-{b}.json"))["outputs"]}
    assert cpu.keys() == gpu.keys(), f"batch {b}: outputs differ: {sorted(cpu)} vs {sorted(gpu)}"
    for name, c in cpu.items():
        g = gpu[name]
        assert c["shape"] == g["shape"], f"batch {b} {name}: shape {c['shape']} vs {g['shape']}"
        if name == "disagreement":  # a count of argmax votes: near-ties may flip, compared apart
            rows += len(c["data"]); disagree_rows += sum(x != y for x, y in zip(c["data"], g["data"]))
            continue
        for x, y in zip(c["data"], g["data"]):
            worst = max(worst, abs(x - y)); values += 1
ok = worst <= 2e-3
mem = {}
for line in open(f"{work}/metrics-e2e.txt"):
    m = re.match(r'ensemble_host_device_memory_(allocated|reserved)_bytes\{([^}]*)\} ([0-9.e+]+)', line)
    if m:
        host = re.search(r'host="([^"]*)"', m.group(2)).group(1)
        mem.setdefault(host, {})[m.group(1)] = float(m.group(3))
mem_text = ", ".join(f"{h} {v.get('allocated', 0) / 2**20:.0f}/{v.get('reserved', 0) / 2**20:.0f} MiB"
                     for h, v in sorted(mem.items()))
if not rehearse and (len(mem) < 2 or any(v.get("reserved", 0) <= 0 for v in mem.values())):
    ok = False; mem_text += " (device memory missing from /metrics)"
registered = int(open(f"{work}/registered-hosts").read().strip() or 0)
if not rehearse and registered < 2:
    ok = False
mem_text = (mem_text or "-") + f"; arena registered with CUDA on {registered}/2 hosts"
detail = (f"max abs(gpu - cpu) {worst:.2e} over {values} values (batches 1, 8, 1024; members, mean, entropy); "
          f"disagreement differs in {disagree_rows}/{rows} rows; device memory allocated/reserved: {mem_text}")
open(f"{res}/e2e.detail", "w").write(detail + "\n")
open(f"{res}/e2e_maxdiff", "w").write(f"{worst:.2e}\n")
sys.exit(0 if ok else 1)
PY
}

step_train() {
  STEP_NAME=train
  need ensemble-train ensemble-model-host ensemble-server ensemble-cli
  local devices="$DEV" out="$WORK/trained"
  [[ $REHEARSE == 1 ]] && devices=cpu:1
  cat >"$WORK/train.yaml" <<'EOF'
# Written by benchmarks/gpu/run.sh: a short run on synthetic data.
run: gpu-check
data: {dataset: synthetic, synthetic_train_rows: 8192, synthetic_test_rows: 2048, loader_threads: 2, prefetch_batches: 4}
training: {epochs: 2, batch_size: 256, optimizer: adam, learning_rate: 0.003, schedule: one_cycle, seed: 3}
distributed: {bucket_mb: 25, collective_timeout_ms: 60000}
checkpoint: {every_steps: 16}
members:
  - {name: mlp_a, architecture: mlp, seed: 1}
  - {name: cnn_b, architecture: cnn, seed: 2}
ensemble: {name: gpu_check_ensemble, combine: mean, max_batch_size: 256}
EOF
  rm -rf "$out"
  NCCL_DEBUG=INFO timeout --kill-after=10 240 "$BUILD/bin/ensemble-train" --config "$WORK/train.yaml" \
    --devices "$devices" --out "$out"
  [[ -f "$out/server.yaml" ]] || { detail "no server.yaml written"; return 1; }
  local backend="Gloo (rehearsal)"
  if [[ $REHEARSE == 0 ]]; then
    grep -q "on $DEVICE" "$LOG/train.log" || { detail "the rank did not train on $DEVICE"; return 1; }
    grep -q 'NCCL INFO' "$LOG/train.log" || { detail "no NCCL INFO lines: was NCCL used?"; return 1; }
    backend="NCCL $(grep -m1 -o 'NCCL version [0-9.+a-z]*' "$LOG/train.log" | awk '{print $3}')"
  fi
  start_router "$out/server.yaml" trained
  cli infer gpu_check_ensemble --batch 4 --seed 5
  stop_router
  local accuracy steps
  accuracy="$(grep -m1 '^gpu_check_ensemble ' "$LOG/train.log" | awk '{print $2}' || true)"
  steps="$(grep -m1 -o '[0-9]* rank(s), [0-9]* steps of [0-9]* rows in [0-9.]* s; step [0-9.]* ms' "$LOG/train.log" || true)"
  detail "$backend: ${steps:-?}; ensemble test accuracy ${accuracy:-?} (synthetic data); its repository served on $DEV and answered"
}

loadgen() {  # loadgen BATCH CONCURRENCY CSV
  router_env timeout --kill-after=5 120 "$BUILD/bin/ensemble-loadgen" --server "$GRPC" --model demo_ensemble \
    --batch "$1" --concurrency "$2" --duration-s "$WINDOW_S" --warmup-s 0.5 --max-windows 3 \
    --threads 4 --channels 4 --ceiling-model none --csv "$3"
}

step_bench() {
  STEP_NAME=bench
  need bench-gpu-inprocess ensemble-model-host ensemble-server ensemble-loadgen
  [[ -d "$WORK/repo" ]] || "$BUILD/bin/ensemble-make-demo" --out "$WORK/repo" --max-batch-size 1024 --hosts gpu0,gpu1
  [[ -f "$WORK/gpu.yaml" ]] || server_yaml "$WORK/gpu.yaml" "$DEV" 4
  local threads
  for threads in 1 4; do
    timeout --kill-after=5 240 "$BUILD/bin/bench-gpu-inprocess" --repo "$WORK/repo" --device "$DEV" \
      --batches "$BATCH_LIST" --threads "$threads" --seconds "$INPROC_S" --csv "$OUT_DIR/inprocess-t$threads.csv"
  done
  start_router "$WORK/gpu.yaml" bench
  local b
  loadgen 1 1 "$OUT_DIR/server-b1-c1.csv"
  for b in "${BATCHES[@]}"; do loadgen "$b" 8 "$OUT_DIR/server-b$b-c8.csv"; done
  stop_router
  # The same with the arena not registered: the driver stages every copy.
  start_router "$WORK/gpu.yaml" bench-unregistered ES_CUDA_REGISTER_ARENA=0
  grep -q 'arena not registered' "$LOG/router-bench-unregistered.log" || [[ $REHEARSE == 1 ]] \
    || { echo "the hosts did not say the arena was left unregistered"; return 1; }
  local ab=(64)
  if [[ ${BATCHES[-1]} != 64 ]]; then ab+=("${BATCHES[-1]}"); fi
  for b in "${ab[@]}"; do loadgen "$b" 8 "$OUT_DIR/unregistered-b$b-c8.csv"; done
  stop_router
  python3 - "$OUT_DIR" "$RES" "$BATCH_LIST" "${ab[*]}" <<'PY'
import csv, sys
out, res = sys.argv[1], sys.argv[2]
batches = [int(b) for b in sys.argv[3].split(",")]
ab = [int(b) for b in sys.argv[4].split()]
def one(path):
    rows = list(csv.DictReader(open(path)))
    return rows[0] if rows else None
inproc = {}
for t in (1, 4):
    for r in csv.DictReader(open(f"{out}/inprocess-t{t}.csv")):
        inproc.setdefault(int(r["batch"]), {})[t] = (float(r["rows_per_s"]), float(r["p50_us"]))
lines = ["| batch | server rows/s (conc 8) | server p50 µs | in-process rows/s (1 thr / 4 thr) | in-process p50 µs (1 thr) | server / best in-process |",
         "| ---: | ---: | ---: | ---: | ---: | ---: |"]
best_server, best_inproc = (0, 0), (0, 0)
for b in batches:
    s = one(f"{out}/server-b{b}-c8.csv")
    srv = float(s["rows_per_s"]) if s and float(s["ok"]) > 0 else 0.0
    i1, i4 = inproc[b].get(1, (0, 0)), inproc[b].get(4, (0, 0))
    ib = max(i1[0], i4[0])
    best_server = max(best_server, (srv, b)); best_inproc = max(best_inproc, (ib, b))
    lines.append(f"| {b} | {srv:,.0f} | {float(s['lat_p50_us']) if s else 0:,.0f} | {i1[0]:,.0f} / {i4[0]:,.0f} | "
                 f"{i1[1]:,.0f} | {srv / ib if ib else 0:.2f} |")
lat = one(f"{out}/server-b1-c1.csv")
srv_p50 = float(lat["lat_p50_us"]) if lat else 0.0
inproc_p50 = inproc[1][1][1] if 1 in inproc and 1 in inproc[1] else 0.0
ratio = best_server[0] / best_inproc[0] if best_inproc[0] else 0.0
lat_ratio = srv_p50 / inproc_p50 if inproc_p50 else 0.0
ab_cells = []
for b in ab:
    reg, unreg = one(f"{out}/server-b{b}-c8.csv"), one(f"{out}/unregistered-b{b}-c8.csv")
    if reg and unreg:
        ab_cells.append(f"batch {b}: registered {float(reg['rows_per_s']):,.0f}, unregistered {float(unreg['rows_per_s']):,.0f} rows/s")
throughput_ok, latency_ok = ratio >= 0.8, 0 < lat_ratio <= 2.0
open(f"{res}/bench_table.md", "w").write("\n".join(lines) + "\n")
open(f"{res}/bench.detail", "w").write(
    f"server best {best_server[0]:,.0f} rows/s at batch {best_server[1]}, in-process best {best_inproc[0]:,.0f} at batch {best_inproc[1]}\n")
open(f"{res}/target_throughput", "w").write(
    f"{'MET' if throughput_ok else 'MISSED'}: {ratio:.0%} of in-process (target >= 80%)\n")
open(f"{res}/target_latency", "w").write(
    f"{'MET' if latency_ok else 'MISSED'}: batch-1 p50 server {srv_p50:,.0f} µs vs in-process {inproc_p50:,.0f} µs = {lat_ratio:.2f}x (target <= 2x)\n")
open(f"{res}/arena_ab", "w").write("; ".join(ab_cells) + "\n")
PY
}

# --- run -----------------------------------------------------------------------

echo "benchmarks/gpu/run.sh: device $DEV$([[ $REHEARSE == 1 ]] && echo ' (rehearsal on the CPU)'), build $BUILD, logs $LOG"
run_step env step_env
run_step configure step_configure
run_step build step_build
run_step router step_router
run_step unit-tests step_unit_tests
run_step h2d step_h2d
run_step e2e step_e2e
run_step train step_train
run_step bench step_bench

failed=0
for s in "${STEPS[@]}"; do
  if [[ ${STATUS[$s]} == FAIL ]]; then failed=1; fi
done
missed=0
if grep -qs '^MISSED' "$RES/target_throughput" "$RES/target_latency" || [[ ! -s "$RES/target_throughput" ]]; then
  missed=1
fi

{
  echo "## GPU check ($(date -u +%Y-%m-%d), $(read_figure gpu | head -n1), PyTorch $(read_figure torch))"
  if [[ $REHEARSE == 1 ]]; then
    echo
    echo "**Rehearsal on the CPU: not a GPU figure anywhere in this table.**"
  fi
  echo
  echo "| step | result | s | detail |"
  echo "| --- | --- | ---: | --- |"
  for s in "${STEPS[@]}"; do
    echo "| $s | ${STATUS[$s]} | ${SECONDS_OF[$s]} | $(cat "$RES/$s.detail" 2>/dev/null | tr '|' '/' || true) |"
  done
  echo
  if [[ -s "$RES/bench_table.md" ]]; then
    echo "demo_ensemble on $DEV: server (router + 2 hosts x 4 executors, gRPC, loadgen 4 threads) vs in-process LibTorch"
    echo
    cat "$RES/bench_table.md"
    echo
    echo "- throughput at the best batch: $(read_figure target_throughput)"
    echo "- latency at batch 1: $(read_figure target_latency)"
    echo "- arena registered vs not (end to end): $(read_figure arena_ab)"
  fi
  echo
  echo "total $(( $(date +%s) - T0 )) s; logs and CSVs: $OUT_DIR"
} >"$OUT_DIR/gpu-check.md"
echo
cat "$OUT_DIR/gpu-check.md"
if [[ $failed == 1 ]]; then exit 1; fi
if [[ $missed == 1 ]]; then exit 3; fi
exit 0
