#!/usr/bin/env bash
# clang-tidy with the project's .clang-tidy over the lines of C++ sources
# changed since a base revision (clang-tidy-diff: findings on the lines a
# change wrote, not on the old code around them); any finding fails. CI runs
# it on each change; a whole-tree run takes an hour on 2 cores (LibTorch's
# headers), and the old code's findings are not the change's to fix.
#
# Usage: scripts/tidy.sh [BASE]   (default: $ES_TIDY_BASE, else HEAD~1)
#   BUILD_DIR  the build folder whose compile_commands.json to use (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
BUILD_DIR=${BUILD_DIR:-build}
base=${1:-${ES_TIDY_BASE:-HEAD~1}}
tidy_diff=$(command -v clang-tidy-diff || command -v clang-tidy-diff-14.py || true)
if [ -z "$tidy_diff" ] || ! command -v clang-tidy >/dev/null; then
  echo "tidy.sh: clang-tidy / clang-tidy-diff are missing (scripts/install-deps.sh installs them)" >&2
  exit 1
fi
if [ ! -f "$BUILD_DIR/compile_commands.json" ]; then
  echo "tidy.sh: $BUILD_DIR/compile_commands.json is missing: build first (scripts/build.sh)" >&2
  exit 1
fi
if ! git rev-parse --verify --quiet "$base^{commit}" >/dev/null; then
  echo "tidy.sh: base revision '$base' is not in this clone (shallow?): nothing to compare against, nothing checked" >&2
  exit 0
fi
# (grep finds nothing when a change touches no C++ source: not a failure.)
changed=$(git diff --name-only --diff-filter=AMR "$base" -- '*.cc' | { grep -vE '^(tests/fuzz|build)' || true; } | wc -l)
echo "tidy.sh: the changed lines of $changed source(s) since $base"
out=$(git diff -U0 --diff-filter=AMR "$base" -- '*.cc' ':!tests/fuzz' |
  "$tidy_diff" -p1 -path "$BUILD_DIR" -j "$(nproc)" -quiet -iregex '.*\.cc' -extra-arg=-Wno-unknown-warning-option 2>&1 || true)
# Only findings in the project's files count: clang 14 cannot parse LibTorch
# 1.13's headers in C++20 (std::vector<c10::IValue> of an incomplete type),
# which shows as errors inside /usr/include for the LibTorch sources; those
# sources are named as not analysable (scripts/check_thread_safety.py says more).
findings=$(printf '%s\n' "$out" | grep -E "^$PWD/.*: (warning|error): " || true)
printf '%s\n' "$out" | grep -E '^Error while processing' | sed 's/^Error while processing/tidy.sh: not analysable (LibTorch headers):/' || true
if [ -n "$findings" ]; then
  printf '%s\n' "$findings"
  echo "tidy.sh: $(printf '%s\n' "$findings" | wc -l) finding(s) on changed lines" >&2
  exit 1
fi
echo "tidy.sh: clean"
