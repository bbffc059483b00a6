#!/usr/bin/env bash
# package.sh: builds ensemble-serve's Debian package,
#   build/package/ensemble-serve_<version>_<arch>.deb
# (version: project(VERSION) in CMakeLists.txt). docs/package.md.
#
#   scripts/package.sh            # prints the .deb's path as its last line
#
# It uses the release build folder build/ (BUILD_DIR overrides), configuring
# it first when it has never been (a fresh clone, docker/Dockerfile's build
# stage), and builds only the packaged programs (cmake/Packaging.cmake),
# under the shared build lock /tmp/es-build.lock so that it never runs two
# builds in one folder at once. Then CPack's DEB generator: strips the
# binaries, installs them into its staging folder and takes Depends: from
# their shared libraries with dpkg-shlibdeps. lintian runs on the result when
# it is installed (warnings are printed, they do not fail the script).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
for tool in cmake cpack dpkg-shlibdeps dpkg-deb flock; do
  command -v "$tool" >/dev/null || { echo "package.sh: $tool missing (scripts/install-deps.sh)" >&2; exit 1; }
done

(
  flock 9
  # A folder configured before cmake/Packaging.cmake existed has no package
  # target list yet: configuring again writes it.
  if [ ! -f "$BUILD_DIR/build.ninja" ] || [ ! -f "$BUILD_DIR/package-targets.txt" ] ||
    [ cmake/Packaging.cmake -nt "$BUILD_DIR/package-targets.txt" ]; then
    if [ -f "$BUILD_DIR/CMakeCache.txt" ]; then
      cmake "$BUILD_DIR" >/dev/null
    else
      cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
    fi
  fi
  read -r -a targets <"$BUILD_DIR/package-targets.txt"
  IFS=';' read -r -a targets <<<"${targets[*]}"
  [ "${#targets[@]}" -ge 6 ] || { echo "package.sh: only ${targets[*]} to package (ES_BUILD_ROUTER/ES_BUILD_TORCH off?)" >&2; exit 1; }
  echo "package.sh: building ${targets[*]} in $BUILD_DIR"
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}"
) 9>/tmp/es-build.lock

version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BUILD_DIR/CMakeCache.txt")
arch=$(dpkg --print-architecture)
deb=$BUILD_DIR/package/ensemble-serve_${version}_${arch}.deb
rm -f "$deb"
echo "package.sh: cpack -G DEB"
(cd "$BUILD_DIR" && cpack -G DEB --config CPackConfig.cmake >cpack.log 2>&1) ||
  { tail -n 30 "$BUILD_DIR/cpack.log" >&2; echo "package.sh: cpack failed (log: $BUILD_DIR/cpack.log)" >&2; exit 1; }
[ -f "$deb" ] || { echo "package.sh: cpack wrote no $deb" >&2; exit 1; }
rm -rf "$BUILD_DIR/package/_CPack_Packages"

dpkg-deb --field "$deb" Package Version Architecture Depends Installed-Size
if command -v lintian >/dev/null; then
  echo "package.sh: lintian"
  lintian --tag-display-limit 0 "$deb" 2>&1 | grep -v "running with root privileges" || true
fi
echo "$deb"
