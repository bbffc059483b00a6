#!/usr/bin/env bash
# benchmarks/gpu/pack.sh: run on the Debian machine before the GPU check.
#
# The GPU machine (docs/gpu.md) has a CUDA LibTorch but no gRPC,
# prometheus-cpp, civetweb, spdlog, GoogleTest, ... and no package registry.
# This packs, into one folder that travels with the working tree:
#
#   router/bin/  ensemble-server, ensemble-cli, ensemble-loadgen, built here
#                (the router links no LibTorch, so Debian's build runs there)
#   router/lib/  every shared library they load except glibc's and the C++
#                runtime's; run.sh links only those the GPU machine lacks
#   prefix/      Debian's -dev packages the hosts, the trainer and the tests
#                are built against there, extracted with dpkg -x (CMake
#                packages, headers, libraries); absolute symlinks made relative
#   MANIFEST     what is in it, from which commit, when
#
#   benchmarks/gpu/pack.sh [--build-dir build] [--out build-gpu-bundle]
#
# build-gpu-bundle/ is ignored by git (build*/); carry it to the GPU machine
# (the device tool's `carry`), then run benchmarks/gpu/run.sh there.
set -euo pipefail

usage() {  # the header comment, up to the first line of code
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="$ROOT/build"
OUT="$ROOT/build-gpu-bundle"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD_DIR="$(realpath -m "$2")"; shift 2 ;;
    --out) OUT="$(realpath -m "$2")"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "pack.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

# The packages the GPU-side build needs and the GPU machine lacks (it has
# protobuf, yaml-cpp, Boost headers and zlib's runtime). Runtime
# packages come with their -dev package: their .so is what the -dev symlink
# and CMake package point at. prometheus-cpp's CMake package asks for
# civetweb (whose package names its server binary too), ZLIB and CURL, so
# those come as well (found, never linked).
DEBS=(
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libgtest-dev libgmock-dev
  nlohmann-json3-dev libcli11-dev
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
  libcivetweb-dev libcivetweb1 civetweb
  zlib1g-dev zlib1g
  libcurl4-openssl-dev libcurl4
)
ROUTER_BINS=(ensemble-server ensemble-cli ensemble-loadgen)

step() { printf '\n== %s\n' "$*"; }

step "router binaries ($BUILD_DIR)"
missing=()
for b in "${ROUTER_BINS[@]}"; do [[ -x "$BUILD_DIR/bin/$b" ]] || missing+=("$b"); done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "building ${missing[*]}"
  cmake --build "$BUILD_DIR" -j2 --target "${missing[@]}"
fi
rm -rf "$OUT"
mkdir -p "$OUT/router/bin" "$OUT/router/lib" "$OUT/prefix" "$OUT/debs"
for b in "${ROUTER_BINS[@]}"; do
  cp "$BUILD_DIR/bin/$b" "$OUT/router/bin/"
  strip --strip-unneeded "$OUT/router/bin/$b" 2>/dev/null || true
done

step "their shared libraries (ldd)"
# glibc, the loader and the C++ runtime stay the GPU machine's own (newer,
# backward compatible); everything else is copied under its soname.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libresolv\.so|libstdc\+\+\.so|libgcc_s\.so)'
for b in "${ROUTER_BINS[@]}"; do
  ldd "$BUILD_DIR/bin/$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
  [[ "$soname" =~ $skip ]] && continue
  cp -L "$path" "$OUT/router/lib/$soname"
done
echo "$(ls "$OUT/router/lib" | wc -l) libraries, $(du -sh "$OUT/router/lib" | cut -f1)"

step "Debian -dev packages for the GPU-side build"
( cd "$OUT/debs" && apt-get download "${DEBS[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' ) || {
  echo "pack.sh: apt-get download failed (run 'apt-get update' first?)" >&2; exit 1; }
for deb in "$OUT"/debs/*.deb; do dpkg -x "$deb" "$OUT/prefix"; done
# Not needed to build (usr/src/gtest links to the googletest sources package).
rm -rf "$OUT/debs" "$OUT/prefix/usr/src" "$OUT/prefix/usr/share/doc" "$OUT/prefix/usr/share/man" \
  "$OUT/prefix/usr/share/lintian"
# Debian's usr-merge leftovers: e.g. usr/lib/x86_64-linux-gnu/libz.so ->
# /lib/x86_64-linux-gnu/libz.so.1.2.13. Point such links into the prefix.
find "$OUT/prefix" -type l | while read -r link; do
  target="$(readlink "$link")"
  [[ "$target" == /* ]] || continue
  if [[ -e "$OUT/prefix$target" ]]; then
    ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$OUT/prefix$target")" "$link"
  fi
done
broken="$(find "$OUT/prefix" -xtype l | wc -l)"
[[ "$broken" == 0 ]] || { echo "pack.sh: $broken broken symlinks in the prefix:" >&2; find "$OUT/prefix" -xtype l >&2; exit 1; }

step "manifest"
{
  echo "# build-gpu-bundle, made by benchmarks/gpu/pack.sh"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "made on: $(. /etc/os-release && echo "$PRETTY_NAME"), $(uname -m)"
  echo "router: ${ROUTER_BINS[*]}"
  echo "packages:"
  for p in "${DEBS[@]}"; do echo "  $p $(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || echo '?')"; done
} > "$OUT/MANIFEST"
cat "$OUT/MANIFEST"
size_kb="$(du -sk "$OUT" | cut -f1)"
echo
echo "pack.sh: $OUT: $((size_kb / 1024)) MiB"
if (( size_kb > 60 * 1024 )); then
  echo "pack.sh: over 60 MiB: too big to carry to the GPU machine (64 MiB for all carried paths)" >&2
  exit 1
fi
