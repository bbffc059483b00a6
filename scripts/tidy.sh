#!/usr/bin/env bash
# clang-tidy with the project's .clang-tidy over the C++ sources changed since
# a base revision, every finding an error. CI runs it on each change; a whole
# tree run takes an hour on 2 cores (LibTorch's headers), so only what changed.
#
# Usage: scripts/tidy.sh [BASE]   (default: $ES_TIDY_BASE, else HEAD~1)
#   BUILD_DIR  the build folder whose compile_commands.json to use (default build)
# Sources not in the build (e.g. CUDA-only files on a CPU build) are skipped
# and named.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
base=${1:-${ES_TIDY_BASE:-HEAD~1}}
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
if ! command -v clang-tidy >/dev/null; then
  echo "tidy.sh: clang-tidy is missing (scripts/install-deps.sh installs it)" >&2
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
mapfile -t changed < <(git diff --name-only --diff-filter=AMR "$base" -- '*.cc' | grep -vE '^(tests/fuzz|build)' || true)
files=()
for f in "${changed[@]}"; do
  if grep -q "\"file\": \"$PWD/$f\"" "$BUILD_DIR/compile_commands.json"; then
    files+=("$f")
  else
    echo "tidy.sh: $f is not in $BUILD_DIR's build, skipped"
  fi
done
echo "tidy.sh: ${#files[@]} changed source(s) since $base"
[ ${#files[@]} -eq 0 ] && exit 0
# One clang-tidy per source, $(nproc) at once; every warning is an error.
printf '%s\n' "${files[@]}" |
  xargs -P "$(nproc)" -I{} clang-tidy -p "$BUILD_DIR" --quiet --warnings-as-errors='*' {}
echo "tidy.sh: clean"
