#!/usr/bin/env bash
# Side by side, one run, one machine: the tables of benchmarks/RESULTS.md.
#
#   benchmarks/run.sh [--quick] [--no-build]
#
# 1. The compute limit: the demo members (mlp, wide_mlp, cnn) run in-process
#    with LibTorch (bench-inprocess, two workers pinned to a core each, one
#    intra-op and one BLAS thread each, as
#    the server's two hosts), rows/s by batch size; the ensembles' limits
#    derived from them.
# 2. ensemble-server (two hosts, one core each, every model on both) on one
#    member (mlp) and on demo_ensemble: a concurrency sweep with batch-1
#    requests (ensemble-loadgen), and demo_ensemble with requests of the batch
#    size at which it computes fastest in-process, against the limit of 1.
# 3. The Python baseline (benchmarks/python_baseline/server.py: grpcio, one
#    torch.multiprocessing worker per member, queues, mean) next to
#    ensemble-server on the same repository: the light ensemble (three MLPs
#    784-256-10, per-request cost dominates) at batch 1, ensemble-server with
#    and without dynamic batching on the members; and demo_ensemble
#    (compute-heavy members) at that batch size.
# Targets: light members, at least 10x the baseline's best
# throughput at equal or lower p99, and at most a fifth of its p50 at
# concurrency 1; compute-heavy demo members, at least 95% of the in-process
# compute limit. Each is printed as PASS or MISS with the figures measured.
#
# Builds what it needs first (configuring build/ if missing, as
# scripts/build.sh does; --no-build uses build/bin as it is). Writes its files
# under build/bench_run/ and the tables (Markdown) to stdout and to
# build/benchmarks/run-<date>.md. Full mode takes about 8 minutes on two
# cores, --quick (shorter windows, fewer steps) about 1.5.
# Needs Debian's python3-torch, python3-grpcio, python3-numpy, python3-yaml
# (scripts/install-deps.sh), used through /usr/bin/python3.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/server.sh
source benchmarks/lib/bench.sh

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
}
COMMAND="benchmarks/run.sh${*:+ $*}"
QUICK=0 BUILD=1
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --no-build) BUILD=0 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "benchmarks/run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

BUILD_DIR=build
BIN=$BUILD_DIR/bin
PY=/usr/bin/python3
OUT=$BUILD_DIR/bench_run
REPO=$OUT/repo
STARTED=$(date +%s)
LOAD_AT_START=$(cut -d' ' -f1-3 /proc/loadavg)  # before this script adds its own

if [ "$QUICK" = 1 ]; then
  MODE="quick"
  INPROC_S=0.3 DUR=0.5 WARM=0.3 WIN=3
  SWEEP="1,4,16,64" BIG_SWEEP="2,8"
else
  MODE="full"
  INPROC_S=1 DUR=1.5 WARM=1 WIN=6
  SWEEP="1,2,4,8,16,32,64" BIG_SWEEP="1,2,4,8,16"
fi
MAX_CONC=${SWEEP##*,}

step() { printf '[%4ds] %s\n' $(($(date +%s) - STARTED)) "$*" >&2; }

"$PY" -c 'import torch, grpc, numpy, yaml' 2>/dev/null || {
  echo "benchmarks/run.sh: $PY lacks torch, grpc, numpy or yaml: install python3-torch python3-grpcio" \
    "python3-numpy python3-yaml (scripts/install-deps.sh)" >&2
  exit 1
}

rm -rf "$OUT" && mkdir -p "$OUT" "$BUILD_DIR/benchmarks"

# --- build --------------------------------------------------------------------
if [ "$BUILD" = 1 ]; then
  step "building (log $OUT/build.log)"
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  if ! {
    { [ -f "$BUILD_DIR/build.ninja" ] || cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release; } &&
      cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target ensemble-server ensemble-model-host \
        ensemble-make-demo ensemble-loadgen bench-inprocess es_python_stubs
  } >"$OUT/build.log" 2>&1; then
    tail -n 30 "$OUT/build.log" >&2
    echo "benchmarks/run.sh: the build failed (log $OUT/build.log)" >&2
    exit 1
  fi
fi
for b in ensemble-server ensemble-model-host ensemble-make-demo ensemble-loadgen bench-inprocess; do
  [ -x "$BIN/$b" ] || { echo "benchmarks/run.sh: $BIN/$b missing (run without --no-build)" >&2; exit 1; }
done
[ -f "$BUILD_DIR/python/proto/grpc_service_pb2_grpc.py" ] ||
  { echo "benchmarks/run.sh: no Python stubs in $BUILD_DIR/python (target es_python_stubs)" >&2; exit 1; }

# --- repositories -------------------------------------------------------------
# One repository for both servers: the demo (ensemble-make-demo, seed 1), and
# the light ensemble of three MLPs: the demo's mlp architecture (784-256-10)
# with the weights of make-demo seeds 1, 2 and 3. Every model on every host.
# light_ensemble_batched: the same three members, each with the router's
# dynamic batching (max_queue_delay_us 0: a batch leaves as soon as a host is
# free, so a lone request never waits): ensemble-server's own answer to
# per-request cost, which the baseline does not have.
step "writing the repository $REPO"
"$BIN/ensemble-make-demo" --out "$REPO" --seed 1 >/dev/null
sed -i '/^hosts:/d' "$REPO"/{mlp,wide_mlp,cnn}/config.yaml
write_light_ensemble "$REPO" "$OUT"
write_two_host_config "$OUT/server.yaml"

# --- 1. in-process compute limit ---------------------------------------------
# inprocess PASS: every member by batch size into $OUT/inprocess_PASS_MODEL.txt.
# Pass 1 runs before the servers, pass 2 after them: the limit is the faster
# of the two (on a shared machine the one that ran quieter), their gap the drift.
inprocess() {
  for m in mlp wide_mlp cnn; do
    step "table 1: bench-inprocess $m (pass $1)"
    "$BIN/bench-inprocess" --repo "$REPO" --model "$m" --threads 2 --batches 1,8,16,32,64 \
      --seconds "$INPROC_S" >"$OUT/inprocess_$1_$m.txt"
  done
}
inprocess 1
# The batch size at which demo_ensemble's members together compute fastest:
# its requests in table 2 and 3 use it.
BIG_BATCH=$("$PY" - "$OUT" <<'PY'
import re, sys
rates = {}
for m in ("mlp", "wide_mlp", "cnn"):
    for b, r in re.findall(r"^\s+(\d+)\s+(\d+)\s*$", open(f"{sys.argv[1]}/inprocess_1_{m}.txt").read(), re.M):
        rates.setdefault(int(b), []).append(float(r))
print(max(rates, key=lambda b: 1 / sum(1 / r for r in rates[b])))
PY
)

# --- loadgen -------------------------------------------------------------------
# load NAME MODEL BATCH SWEEP: one closed-loop sweep against $SERVER_ADDR into $OUT/NAME.json.
load() {
  step "loadgen $1: $2, batch $3, concurrency $4"
  local rc=0
  "$BIN/ensemble-loadgen" --server "$SERVER_ADDR" --model "$2" --batch "$3" --concurrency "$4" \
    --duration-s "$DUR" --warmup-s "$WARM" --max-windows "$WIN" --channels 4 --threads 2 \
    --ceiling-model none --json "$OUT/$1.json" >"$OUT/$1.txt" 2>&1 || rc=$?
  [ "$rc" = 130 ] && { echo "benchmarks/run.sh: interrupted" >&2; exit 130; }
  if [ "$rc" != 0 ]; then
    cat "$OUT/$1.txt" >&2
    echo "benchmarks/run.sh: ensemble-loadgen failed ($1); server log: $SERVER_LOG" >&2
    tail -n 20 "$SERVER_LOG" >&2
    exit 1
  fi
}

SERVER_PID="" SERVER_LOG=""
trap 'stop_server' EXIT

# --- 2. ensemble-server --------------------------------------------------------
SERVER_LOG=$OUT/server.log
step "starting ensemble-server ($OUT/server.yaml)"
start_server "$OUT/server.yaml" "$SERVER_LOG" --grpc-port 0 --metrics-port 0 --http-port 0 --log-level warn
load es_mlp_b1 mlp 1 "$SWEEP"
load es_demo_b1 demo_ensemble 1 "$SWEEP"
load es_demo_big demo_ensemble "$BIG_BATCH" "$BIG_SWEEP"
# --- 3. the same server on the light ensemble (the baseline's counterpart) ---
load es_light_b1 light_ensemble 1 "$SWEEP"
load es_lightbatched_b1 light_ensemble_batched 1 "$SWEEP"
stop_server
SERVER_PID=""

# --- 3. the Python baseline ---------------------------------------------------
SERVER_LOG=$OUT/python_light.log
step "starting the Python baseline on light_ensemble"
start_python_baseline "$SERVER_LOG" "$REPO" light_ensemble "$MAX_CONC"
load py_light_b1 light_ensemble 1 "$SWEEP"
stop_server
SERVER_PID=""
SERVER_LOG=$OUT/python_demo.log
step "starting the Python baseline on demo_ensemble"
start_python_baseline "$SERVER_LOG" "$REPO" demo_ensemble "$MAX_CONC"
load py_demo_big demo_ensemble "$BIG_BATCH" "$BIG_SWEEP"
stop_server
SERVER_PID=""
trap - EXIT
inprocess 2

# --- report ----------------------------------------------------------------------
ELAPSED=$(($(date +%s) - STARTED))
REPORT=$BUILD_DIR/benchmarks/run-$(date +%Y-%m-%d-%H%M%S).md
CPU=$(sed -n '/^model name/{s/^model name[[:space:]]*: //p;q}' /proc/cpuinfo)
"$PY" - "$OUT" "$MODE" "$COMMAND" "$(nproc)" "$CPU" "$LOAD_AT_START" "$ELAPSED" \
  "$BIG_BATCH" "$INPROC_S" "$DUR" "$WIN" <<'PY' | tee "$REPORT"
import datetime, json, re, sys
out, mode, command, cores, cpu, load, elapsed, big, inproc_s, dur, win = sys.argv[1:]
big = int(big)
date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

def steps(name):
    return json.load(open(f"{out}/{name}.json"))["steps"]

def inproc(run, m):
    text = open(f"{out}/inprocess_{run}_{m}.txt").read()
    return {int(b): float(r) for b, r in re.findall(r"^\s+(\d+)\s+(\d+)\s*$", text, re.M)}

def n(x, digits=0):
    return f"{x:,.{digits}f}"

def verdict(ok):
    return "**PASS**" if ok else "**MISS**"

def lat(s, p):
    return s["latency_us"][p]

def star(s):
    return "" if s["stable"] else "\\*"

header = (f"Machine: {cores} cores ({cpu}), load average {load} before the run; {date}; "
          f"`{command}` ({mode} mode"
          + (", short windows: noisier figures" if mode == "quick" else "") + f"; whole run {elapsed} s).")
unstable_note = ("\\* the step's last 3 windows of ensemble-loadgen did not agree within 10% "
                 "(a noisy machine; figures are their merge).")
print("# benchmarks/run.sh: side by side\n")

# 1. in-process compute limit: per member and batch size, the faster of the two passes
names = ("mlp", "wide_mlp", "cnn")
passes = [{m: inproc(run, m) for m in names} for run in (1, 2)]
members = {m: {b: max(p[m][b] for p in passes) for b in passes[0][m]} for m in names}
best = {m: max(r.items(), key=lambda kv: kv[1]) for m, r in members.items()}  # (batch, rows/s)
demo_limit = 1 / sum(1 / best[m][1] for m in members)
pass_limits = [1 / sum(1 / max(p[m].values()) for m in names) for p in passes]
demo_big = 1 / sum(1 / members[m][big] for m in members)
light_limit = best["mlp"][1] / 3
print("## 1. In-process compute limit (LibTorch, no server)\n")
print(header + "\n")
print(f"`bench-inprocess --threads 2 --batches 1,8,16,32,64 --seconds {inproc_s}`: two workers, each pinned to "
      "its own core with one intra-op thread and one BLAS thread (as the server's two hosts), forward back to "
      "back, rows/s; measured before the "
      "servers (pass 1) and after them (pass 2), each figure the faster of the two. An ensemble's limit is "
      "one row through every member with the machine's two cores: 1 / sum(1 / member rows/s).\n")
print("| model | batch 1 rows/s | best rows/s | at batch | best, pass 1 | best, pass 2 |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for m in members:
    print(f"| {m} | {n(members[m][1])} | {n(best[m][1])} | {best[m][0]} | {n(max(passes[0][m].values()))} | "
          f"{n(max(passes[1][m].values()))} |")
print(f"| demo_ensemble (each member at its best batch): **the compute limit** | "
      f"{n(1 / sum(1 / members[m][1] for m in members))} | **{n(demo_limit)}** | - | {n(pass_limits[0])} | "
      f"{n(pass_limits[1])} |")
print(f"| demo_ensemble, every member at batch {big} (its fastest common batch) | | {n(demo_big)} | {big} | | |")
# The same limit for a placement: each host one core (a worker's rows/s is
# half the two-worker figure), the members on the hosts that serve them. The
# server in table 2 puts every model on both hosts: the ideal one above. The
# demo's own config (config/demo.yaml, the repository ensemble-make-demo
# writes) puts mlp and wide_mlp on cpu0 and cnn on cpu1.
def placed_limit(placement):
    per_core = {m: best[m][1] / 2 for m in members}
    return min(1 / sum(1 / per_core[m] for m in ms) for ms in placement.values())
demo_placed = placed_limit({"cpu0": ("mlp", "wide_mlp"), "cpu1": ("cnn",)})
print(f"| demo_ensemble as config/demo.yaml places it (mlp, wide_mlp on cpu0; cnn on cpu1) | | {n(demo_placed)} | - | | |")
print(f"| light_ensemble (3 x the mlp architecture) | {n(members['mlp'][1] / 3)} | {n(light_limit)} | "
      f"{best['mlp'][0]} | | |")
print()
drift = abs(pass_limits[0] - pass_limits[1]) / max(pass_limits)
print(f"- The two passes' limits differ by {100 * drift:.0f}%: "
      + ("the machine's speed moved during the run; compare ratios with that in mind."
         if drift > 0.1 else "the machine ran at about the same speed before and after the servers.") + "\n")

# 2. ensemble-server
print("## 2. ensemble-server: throughput and latency by concurrency\n")
print(header + "\n")
print(f"`ensemble-server` with two hosts (one core, one LibTorch thread, one executor each; every model on "
      f"both), driven on the same machine by `ensemble-loadgen` (closed loop, 4 channels, 2 threads, "
      f"windows of {dur} s, at most {win}). Latencies in µs, client-side.\n")
print("| model | batch | concurrency | req/s | rows/s | p50 | p90 | p99 |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
any_unstable = False
for name, model, batch in (("es_mlp_b1", "mlp", 1), ("es_demo_b1", "demo_ensemble", 1),
                           ("es_demo_big", "demo_ensemble", big)):
    for s in steps(name):
        any_unstable |= not s["stable"]
        print(f"| {model} | {batch} | {s['concurrency']}{star(s)} | {n(s['throughput_rps'])} | "
              f"{n(s['rows_per_s'])} | {n(lat(s, 'p50'))} | {n(lat(s, 'p90'))} | {n(lat(s, 'p99'))} |")
es_big = max(steps("es_demo_big"), key=lambda s: s["rows_per_s"])
ratio = es_big["rows_per_s"] / demo_limit
print()
if any_unstable:
    print(unstable_note + "\n")
print(f"- Compute-heavy demo members: demo_ensemble from batch-{big} requests peaks at "
      f"{n(es_big['rows_per_s'])} rows/s (concurrency {es_big['concurrency']}) = **{100 * ratio:.1f}%** of the "
      f"in-process compute limit {n(demo_limit)} rows/s (target at least 95%): {verdict(ratio >= 0.95)}. "
      f"Against every member at batch {big} ({n(demo_big)} rows/s): {100 * es_big['rows_per_s'] / demo_big:.1f}%.")
for name, model in (("es_mlp_b1", "mlp"), ("es_demo_b1", "demo_ensemble")):
    top = max(steps(name), key=lambda s: s["throughput_rps"])
    print(f"- {model}, batch 1: peak {n(top['throughput_rps'])} req/s at concurrency {top['concurrency']}; "
          f"p50 at concurrency 1: {n(lat(steps(name)[0], 'p50'))} µs.")
print()

# 3. Python baseline
print("## 3. ensemble-server vs the Python baseline\n")
print(header + "\n")
print("Baseline: `benchmarks/python_baseline/server.py`, a `grpcio` server (ThreadPoolExecutor, as many "
      "threads as the largest concurrency) whose handler puts each request on one `torch.multiprocessing` "
      "queue per member worker process (spawn; TorchScript member, eval, inference_mode, one thread), "
      "gathers the outputs by request id and averages them; same repository, same KServe v2 API, same "
      "load generator. Servers measured one after the other, never at once.\n")
es_l, esb_l, py_l = steps("es_light_b1"), steps("es_lightbatched_b1"), steps("py_light_b1")
print("### Light members: light_ensemble (three MLPs 784-256-10), batch 1\n")
print("ensemble-server twice: as is, and with dynamic batching on the three members (`light_ensemble_batched`: "
      "`dynamic_batching: {max_queue_delay_us: 0}`, same weights). Req/s ratios against the baseline at the "
      "same concurrency.\n")
print("| concurrency | ensemble-server req/s | p50 µs | p99 µs | + member batching req/s | p50 µs | p99 µs | "
      "Python req/s | p50 µs | p99 µs | req/s ratios |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
by_c = [{s["concurrency"]: s for s in run} for run in (es_l, esb_l, py_l)]
any_unstable = False
for c in by_c[0]:
    cells, row = [str(c)], [run.get(c) for run in by_c]
    for s in row:
        any_unstable |= s is not None and not s["stable"]
        cells += ([f"{n(s['throughput_rps'])}{star(s)}", n(lat(s, "p50")), n(lat(s, "p99"))] if s
                  else ["-", "-", "-"])
    p = row[2]
    cells.append(" / ".join(f"{s['throughput_rps'] / p['throughput_rps']:.1f}x" for s in row[:2] if s and p))
    print("| " + " | ".join(cells) + " |")
print()
if any_unstable:
    print(unstable_note + "\n")
py_best = max(py_l, key=lambda s: s["throughput_rps"])
py1 = next(s for s in py_l if s["concurrency"] == 1)
print(f"- The baseline peaks at {n(py_best['throughput_rps'])} req/s (concurrency {py_best['concurrency']}, p99 "
      f"{n(lat(py_best, 'p99'))} µs); its p50 at concurrency 1 is {n(lat(py1, 'p50'))} µs.")
for label, run in (("ensemble-server", es_l), ("ensemble-server with member batching", esb_l)):
    eligible = [s for s in run if lat(s, "p99") <= lat(py_best, "p99")]
    if eligible:
        top = max(eligible, key=lambda s: s["throughput_rps"])
        tr = top["throughput_rps"] / py_best["throughput_rps"]
        text = (f"best at a p99 no higher than that, {n(top['throughput_rps'])} req/s (concurrency "
                f"{top['concurrency']}, p99 {n(lat(top, 'p99'))} µs): **{tr:.1f}x** (target at least 10x): "
                f"{verdict(tr >= 10)}")
    else:
        text = f"no step with a p99 at or below the baseline's: {verdict(False)}"
    one = next(s for s in run if s["concurrency"] == 1)
    pr = lat(one, "p50") / lat(py1, "p50")
    print(f"- {label}: {text}; p50 at concurrency 1 {n(lat(one, 'p50'))} µs, **{pr:.2f}** of the baseline's "
          f"(target at most 0.20): {verdict(pr <= 0.20)}.")
light_b1 = members["mlp"][1] / 3
need = 10 * py_best["throughput_rps"]
print(f"- For scale: the light ensemble's in-process limit (table 1) is {n(light_b1)} rows/s with batch-1 "
      f"calls and {n(light_limit)} at batch {best['mlp'][0]}; 10x the baseline is {n(need)} req/s"
      + (f", above what its members can compute one row at a time on this machine with no server at all "
         "(only batching can reach it)." if need > light_b1 else "."))
print()
es_h, py_h = steps("es_demo_big"), steps("py_demo_big")
print(f"### Compute-heavy members: demo_ensemble (mlp, wide_mlp, cnn), batch {big}\n")
print("| concurrency | ensemble-server rows/s | p50 µs | p99 µs | Python rows/s | p50 µs | p99 µs | rows/s ratio |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
py_by_c = {s["concurrency"]: s for s in py_h}
for s in es_h:
    p = py_by_c.get(s["concurrency"])
    pcols = (f"{n(p['rows_per_s'])}{star(p)} | {n(lat(p, 'p50'))} | {n(lat(p, 'p99'))} | "
             f"{s['rows_per_s'] / p['rows_per_s']:.2f}x") if p else "- | - | - | -"
    print(f"| {s['concurrency']} | {n(s['rows_per_s'])}{star(s)} | {n(lat(s, 'p50'))} | {n(lat(s, 'p99'))} | "
          f"{pcols} |")
py_big = max(py_h, key=lambda s: s["rows_per_s"])
print()
print(f"- Against the compute limit {n(demo_limit)} rows/s (table 1): ensemble-server "
      f"**{100 * es_big['rows_per_s'] / demo_limit:.1f}%** (target at least 95%: "
      f"{verdict(es_big['rows_per_s'] / demo_limit >= 0.95)}), the baseline {100 * py_big['rows_per_s'] / demo_limit:.1f}%.")
PY
echo >&2
step "done in $ELAPSED s; tables written to $REPORT (files in $OUT)"
