#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh

# First the shared-memory channel under the sanitizers (each its own build folder;
# torch-free targets only, so they build in a few minutes). Skip with
# ES_SKIP_SANITIZERS=1.
if [ "${ES_SKIP_SANITIZERS:-0}" != 1 ]; then
  sanitize() {  # sanitize DIR CMAKE_OPTION TARGETS...
    local dir=$1 option=$2
    shift 2
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DES_BUILD_TORCH=OFF \
      -DES_ENABLE_BENCHMARKS=OFF "-D$option=ON" >/dev/null
    CCACHE_BASEDIR=$PWD cmake --build "$dir" -j "$(nproc)" --target "$@"
    (cd "$dir" && ctest --output-on-failure --timeout 600 -R "$(IFS='|'; echo "${TESTS[*]}")")
  }
  TESTS=(ipc server_units)
  sanitize build-asan ES_ENABLE_ASAN test_ipc test_server_units
  TESTS=(ipc)
  sanitize build-tsan ES_ENABLE_TSAN test_ipc
fi

# Then the libFuzzer targets (tests/fuzz), each for a short while on its
# checked-in seeds: clang, its own build folder build-fuzz/. Skip with
# ES_SKIP_FUZZ=1; ES_FUZZ_SECONDS sets the time per target (default 20).
if [ "${ES_SKIP_FUZZ:-0}" != 1 ]; then
  scripts/fuzz.sh "${ES_FUZZ_SECONDS:-20}"
fi

# The whole suite last, so its summary closes the output.
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 900
