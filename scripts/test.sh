#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds (warnings are errors
# here, not in users' builds), checks the code with clang (thread-safety
# analysis of every source, clang-tidy on what changed), runs every test with
# ctest. A table of the time each phase took closes the output, with how busy
# the machine's cores were meanwhile (a phase well below 100% leaves cores
# idle: waiting, or one test at a time).
set -euo pipefail
cd "$(dirname "$0")/.."

cpu_ticks() {  # cpu_ticks: "BUSY TOTAL" jiffies of all cores so far (/proc/stat)
  awk '/^cpu / { total = 0; for (i = 2; i <= NF; ++i) total += $i; print total - $5 - $6, total; exit }' /proc/stat
}
phases=()
phase_start=$SECONDS
read -r phase_busy phase_total < <(cpu_ticks)
phase_done() {  # phase_done NAME: records the time since the previous phase
  local busy total
  read -r busy total < <(cpu_ticks)
  local share="   -"  # under a second: too short to say
  if (( total - phase_total >= 100 )); then share=$(printf '%3d%%' $(( 100 * (busy - phase_busy) / (total - phase_total) ))); fi
  phases+=("$(printf '%-28s %6d s   cores busy %s' "$1" $((SECONDS - phase_start)) "$share")")
  phase_start=$SECONDS phase_busy=$busy phase_total=$total
}
print_phases() {
  echo
  echo "test.sh phases:"
  printf '  %s\n' "${phases[@]}"
  printf '  %-28s %6d s\n' total "$SECONDS"
}
side_pid=""
finish() {
  # A run that fails early lets the package and container tests (started in
  # the background below) end, and clean up after themselves, first.
  if [ -n "$side_pid" ] && kill -0 "$side_pid" 2>/dev/null; then
    echo "test.sh: waiting for the package and container tests to end (log $side_log)" >&2
    wait "$side_pid" || true
  fi
  print_phases
}
trap finish EXIT

scripts/install-deps.sh
phase_done install
scripts/build.sh -DES_WERROR=ON
phase_done build

# OpenBLAS's kernels for this CPU, set once for every test (see
# torch_utils/blas_kernels.h): where OpenBLAS does not know the CPU, each
# LibTorch program of the project finds OPENBLAS_CORETYPE unset and runs
# itself again with it, so every model host the tests start (hundreds)
# would load LibTorch twice, and the tests' own LibTorch processes, which
# do not run again, would compute with OpenBLAS's generic kernels. The probe
# is such a program; it prints the value it ran with ('-': OpenBLAS chose
# well by itself, nothing to set). A value set by the caller is kept. The
# BLAS tests clear it for the runs that check the restart.
if [ -z "${OPENBLAS_CORETYPE+set}" ] && [ -x "${BUILD_DIR:-build}/bin/blas_probe" ]; then
  coretype=$(env -u OPENBLAS_CORETYPE "${BUILD_DIR:-build}/bin/blas_probe" 2>/dev/null |
    sed -n 's/.* coretype=\([A-Za-z0-9_]*\) .*/\1/p')
  if [ -n "$coretype" ]; then
    export OPENBLAS_CORETYPE=$coretype
    echo "test.sh: OPENBLAS_CORETYPE=$coretype for every test (OpenBLAS does not know this CPU)"
  fi
fi

# clang-tidy (.clang-tidy) on the sources changed by the last commit
# (ES_TIDY_BASE to compare with another revision).
scripts/tidy.sh
phase_done clang-tidy

# The Debian package and the deployment files, beside the sanitizer builds
# and fuzzing: these two tests mostly wait (a chroot's installs, podman,
# health checks; the cores were half idle through them), the builds keep the
# cores busy, so together they take little more than the builds alone. The
# builds run niced, so the tests get the CPU when they need it. Their output
# goes to a log printed once they end (before the suite); a failure fails
# the run there.
#  - scripts/package-test.sh (docs/package.md): scripts/package.sh builds the
#    .deb from build/, the test installs it into a debootstrapped Debian 12
#    chroot, serves a request from it over loopback, stops it and purges it.
#    Under a minute with its cached base system (/var/cache/ensemble-serve),
#    a few more without. Skip with ES_SKIP_PACKAGE=1.
#  - scripts/container-test.sh (docs/deploy.md, "Podman"): the image's
#    runtime stage built from the same .deb, run and compared with the
#    server outside it; the Kubernetes CPU manifests with `podman kube
#    play`; compose with podman-compose and a Prometheus image made from
#    Debian's package. About 1.5 minutes with its images cached, more the
#    first time (apt downloads, cached for the next run). Skip with
#    ES_SKIP_CONTAINERS=1.
# Both need root (CI is).
side_log=$(mktemp /tmp/es-test-side.XXXXXX)
side_times=$(mktemp /tmp/es-test-side-times.XXXXXX)
(
  set -e
  if [ "${ES_SKIP_PACKAGE:-0}" != 1 ]; then
    started=$SECONDS
    scripts/package-test.sh  # runs scripts/package.sh first
    printf '%-28s %6d s   beside the builds\n' "package test" $((SECONDS - started)) >>"$side_times"
  fi
  if [ "${ES_SKIP_CONTAINERS:-0}" != 1 ]; then
    started=$SECONDS
    scripts/container-test.sh
    printf '%-28s %6d s   beside the builds\n' "container test" $((SECONDS - started)) >>"$side_times"
  fi
) >"$side_log" 2>&1 &
side_pid=$!
echo "test.sh: the package and container tests run beside the next phases (log $side_log)"

# First the sanitizer builds, each in its own build folder, torch-free (a few
# minutes) and with clang, so that -Wthread-safety checks the lock annotations
# there too (cmake/EsWarnings.cmake, common/mutex.h). Skip with
# ES_SKIP_SANITIZERS=1.
#  - ASan+UBSan: common/ (with the annotated mutex), the shared-memory channel
#    and the router's unit tests.
#  - TSan: the same, and one integration slice:
#    the TSan-built ensemble-server with the lying host (tests/fault) under
#    six concurrent clients (it_test_isolation, IsolationTest.*).
# The unit tests are every test registered in tests/common, tests/ipc and
# tests/server (under clang tests/common also proves that a lock annotation
# violation fails the build: common_thread_safety_analysis).
if [ "${ES_SKIP_SANITIZERS:-0}" != 1 ]; then
  sanitizer_build() {  # sanitizer_build DIR CMAKE_OPTION TARGETS...
    local dir=$1 option=$2
    shift 2
    # A folder configured before with another compiler is configured afresh.
    if [ -f "$dir/CMakeCache.txt" ] && ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$dir/CMakeCache.txt"; then
      rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
    fi
    CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DES_BUILD_TORCH=OFF \
      -DES_ENABLE_BENCHMARKS=OFF -DES_WERROR=ON "-D$option=ON" >/dev/null
    # These builds have debug info (-g), for which ccache hashes the working
    # folder too, so a fresh clone elsewhere would miss every object; with
    # CCACHE_NOHASHDIR it hits (an object from the cache may then name the
    # other clone's folder in its debug info: sanitizer reports' file paths).
    CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1 nice -n 10 cmake --build "$dir" -j "$(nproc)" --target "$@"
  }
  sanitizer_ctest() {  # sanitizer_ctest DIR [CTEST ARGS...]: the tests registered in build folder DIR
    local dir=$1
    shift
    ctest --test-dir "$dir" --output-on-failure --timeout 600 --no-tests=error -j "$(nproc)" "$@"
  }

  sanitizer_build build-asan ES_ENABLE_ASAN test_common test_log_setup test_ipc tests/server/all
  sanitizer_ctest build-asan/tests/common
  sanitizer_ctest build-asan/tests/ipc
  sanitizer_ctest build-asan/tests/server
  phase_done "ASan build and tests"

  # TSan. Every report fails the run: halt_on_error ends the process that
  # raced, and each report also lands in a file under $tsan_logs, checked
  # below, because a report in ensemble-server or a host (children of the
  # test) would otherwise show only as a test that failed for another reason.
  # tests/tsan.supp covers races inside Debian's uninstrumented gRPC,
  # protobuf and Abseil only (each entry says why); never our own code.
  sanitizer_build build-tsan ES_ENABLE_TSAN test_common test_log_setup test_ipc tests/server/all it_test_isolation
  tsan_logs=$(mktemp -d /tmp/es-tsan.XXXXXX)
  tsan_failed=0
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp log_path=$tsan_logs/report"
  sanitizer_ctest build-tsan/tests/common || tsan_failed=1
  sanitizer_ctest build-tsan/tests/ipc || tsan_failed=1
  sanitizer_ctest build-tsan/tests/server || tsan_failed=1
  # Torch-free build: registered with --gtest_filter=IsolationTest.*.
  sanitizer_ctest build-tsan/tests/integration -R '^integration_test_isolation$' || tsan_failed=1
  unset TSAN_OPTIONS
  if compgen -G "$tsan_logs/report.*" >/dev/null; then
    cat "$tsan_logs"/report.*
    echo "ThreadSanitizer reported the above (reports kept in $tsan_logs)" >&2
    tsan_failed=1
  fi
  if [ "$tsan_failed" != 0 ]; then
    echo "test.sh: the TSan run failed" >&2
    exit 1
  fi
  rm -rf "$tsan_logs"
  phase_done "TSan build and tests"
fi

# clang's thread-safety analysis (and -Wshadow) over the sources of the main
# build that the clang builds above did not compile with those checks as
# errors: the LibTorch ones, which the torch-free builds leave out, the
# clients, the training command (--covered-by: about half the sources are
# covered; on a machine without caches this phase took a third less). A source
# is parsed again only when it, a header it reads, its flags or clang changed
# since a clean earlier run (the cache in ~/.cache/ensemble-serve).
covered=()
[ "${ES_SKIP_SANITIZERS:-0}" = 1 ] || covered=(--covered-by build-asan build-tsan)
scripts/check_thread_safety.py build "${covered[@]}"
phase_done "thread-safety analysis"

# Then the libFuzzer targets (tests/fuzz), each for a short while on its
# checked-in seeds: clang, its own build folder build-fuzz/; one target per
# core at a time. Skip with ES_SKIP_FUZZ=1; ES_FUZZ_SECONDS sets the time per
# target (default 10: every seed replayed and a short search beyond them, a
# check that no change broke a parser; long searches are scripts/fuzz.sh's
# own runs, e.g. scripts/fuzz.sh 600).
if [ "${ES_SKIP_FUZZ:-0}" != 1 ]; then
  scripts/fuzz.sh "${ES_FUZZ_SECONDS:-10}"
  phase_done fuzz
fi

# The package and container tests, started beside the builds above.
side_rc=0
wait "$side_pid" || side_rc=$?
side_pid=""
cat "$side_log"
while IFS= read -r line; do phases+=("$line"); done <"$side_times"
rm -f "$side_times"
if [ "$side_rc" != 0 ]; then
  echo "test.sh: the package or container test failed (output above, kept in $side_log)" >&2
  exit 1
fi
rm -f "$side_log"
phase_done "waiting for them"

# The whole suite last, so its summary closes the output. In parallel: the
# tests that start servers pinned to CPUs or measure time are RUN_SERIAL
# (nothing runs beside them); the others share the cores, one test more than
# there are cores: about a quarter of the suite's time is waiting (servers
# starting, soak windows, timeouts), which the extra test fills (on the
# 2-core Xeon 439-448 s against 497 with -j 2, the same build).
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 900 -j "$(( $(nproc) + 1 ))"
phase_done ctest
