#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS]: builds the libFuzzer targets (tests/fuzz) with
# clang in build-fuzz/ and runs each for SECONDS (default 60) on a scratch copy
# of its checked-in seeds (tests/fuzz/corpus/<target>/, never written to).
#
# Prints, per target, the executions done and exec/s (libFuzzer's final
# stats), and exits non-zero on any crash, sanitizer report, leak, timeout or
# out-of-memory, printing the reproducer's path and the command that replays
# it. The scratch folder is removed after a clean run and kept after a failed
# one (it holds the reproducers).
#
# Environment:
#   FUZZ_TARGETS     space-separated subset, e.g. "npy request_decode" (default: all)
#   FUZZ_BUILD_DIR   build folder (default build-fuzz)
#   FUZZ_WORK_DIR    scratch folder to use and keep (default: a fresh /tmp/es-fuzz.XXXXXX)
#   FUZZ_JOBS        build parallelism (default: nproc)
#   FUZZ_PARALLEL    targets fuzzed at a time (default: nproc)
#   FUZZ_SKIP_BUILD  1: run the targets as built (e.g. several runs side by side)
#   FUZZ_ARGS        extra libFuzzer flags for every target, e.g. "-runs=1000000"
#                    (libFuzzer stops at whichever of -runs and SECONDS comes first)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
if ! [[ $seconds =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: $0 [SECONDS]   (seconds per target, default 60)" >&2
  exit 2
fi
parallel=${FUZZ_PARALLEL:-$(nproc)}
if ! [[ $parallel =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: FUZZ_PARALLEL must be a positive number of targets, not '$parallel'" >&2
  exit 2
fi
build=${FUZZ_BUILD_DIR:-build-fuzz}
read -r -a targets <<< "${FUZZ_TARGETS:-request_decode server_config model_config channel_attach completion_check npy http_infer http_answer}"

for tool in clang clang++; do
  command -v "$tool" >/dev/null || { echo "fuzz.sh: $tool not found (apt-get install clang)" >&2; exit 1; }
done
if ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz.sh: the libFuzzer runtime is missing (apt-get install libclang-rt-14-dev)" >&2
  exit 1
fi

# The fuzz build: torch-free, no tests or benchmarks, every object instrumented
# (cmake/EsFuzz.cmake). Only the fuzz targets and what they link are built.
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DES_ENABLE_FUZZ=ON -DES_BUILD_TORCH=OFF -DES_ENABLE_TESTS=OFF -DES_ENABLE_BENCHMARKS=OFF >/dev/null
fi
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
if [ "${FUZZ_SKIP_BUILD:-0}" != 1 ]; then
  # CCACHE_NOHASHDIR: a clone in another folder hits the cache despite -g
  # (scripts/test.sh's sanitizer builds say more).
  CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1 nice -n 10 cmake --build "$build" -j "${FUZZ_JOBS:-$(nproc)}" --target "${build_targets[@]}"
fi

work=${FUZZ_WORK_DIR:-$(mktemp -d /tmp/es-fuzz.XXXXXX)}
mkdir -p "$work"
# The YAML targets write their files under TMPDIR: inside the scratch folder,
# so that nothing is left in /tmp even when a target dies.
mkdir -p "$work/tmp"

dict_of() {
  case $1 in
    server_config | model_config) echo tests/fuzz/dict/yaml.dict ;;
    *) [ -f "tests/fuzz/dict/$1.dict" ] && echo "tests/fuzz/dict/$1.dict" ;;
  esac
  return 0
}

# run_target T: fuzzes T; its summary line goes to $work/T.line and, when it
# failed, what to look at to $work/T.failed (printed in order at the end, as
# targets run side by side).
run_target() {
  local t=$1 corpus="$work/corpus/$1" artifacts="$work/artifacts/$1" log="$work/$1.log"
  mkdir -p "$corpus" "$artifacts"
  cp -r "tests/fuzz/corpus/$t/." "$corpus/"
  local args=(-max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048
              -artifact_prefix="$artifacts/")
  local dict
  dict=$(dict_of "$t")
  [ -n "$dict" ] && args+=(-dict="$dict")
  # shellcheck disable=SC2206  # FUZZ_ARGS is a list of flags on purpose
  [ -n "${FUZZ_ARGS:-}" ] && args+=(${FUZZ_ARGS})
  echo "== fuzz_$t: ${seconds}s on $(ls "$corpus" | wc -l) seed(s)"
  local rc=0
  TMPDIR="$work/tmp" nice -n 10 "$build/bin/fuzz_$t" "${args[@]}" "$corpus" >"$log" 2>&1 || rc=$?
  local execs rate cov line
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
  line=$(printf '%-18s %12s execs %8s exec/s  %s' "$t" "${execs:-?}" "${rate:-?}" "${cov:-}")
  if [ "$rc" -ne 0 ]; then
    line+="  FAILED (exit $rc)"
    {
      echo "-- fuzz_$t failed (exit $rc); end of its log ($log):"
      grep -vE '^#[0-9]+\s+(NEW|REDUCE|pulse|RELOAD)' "$log" | tail -40 || true
      for repro in "$artifacts"/*; do
        [ -e "$repro" ] || continue
        echo "-- reproducer: $repro"
        echo "   replay:     $build/bin/fuzz_$t $repro"
      done
    } >"$work/$t.failed"
  fi
  echo "$line" >"$work/$t.line"
}

# $parallel targets at a time (FUZZ_PARALLEL, default one per core), each on
# its own core for its whole time: every target gets the fuzzing it would get
# alone, in a fraction of the wall time.
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$parallel" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_target "$t" &
  running=$((running + 1))
done
wait

failed=()
summary=()
for t in "${targets[@]}"; do
  if [ -f "$work/$t.failed" ]; then
    cat "$work/$t.failed"
    failed+=("$t")
  fi
  summary+=("$(cat "$work/$t.line" 2>/dev/null || echo "$t: no result (the fuzzing job ended early)")")
  [ -f "$work/$t.line" ] || failed+=("$t")
done

echo
echo "== fuzz summary (${seconds}s per target, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz.sh: FAILED: ${failed[*]}; logs and reproducers kept in $work" >&2
  exit 1
fi
if [ -z "${FUZZ_WORK_DIR:-}" ]; then rm -rf "$work"; fi
echo "fuzz.sh: all ${#targets[@]} target(s) clean"
