#!/usr/bin/env bash
# Installs the Debian 12 packages ensemble-serve needs to build, test and run.
# Idempotent: installs only what is missing (apt-get update first, as Debian
# images ship without package lists). Needs root or sudo.
#
#   scripts/install-deps.sh                   # everything
#   scripts/install-deps.sh --no-containers   # without podman and its tools
#                                             # (docker/Dockerfile's build stage)
set -euo pipefail

CONTAINER_TOOLS=1
for arg in "$@"; do
  case "$arg" in
    --no-containers) CONTAINER_TOOLS=0 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "install-deps: unknown argument '$arg' (see --help)" >&2
      exit 2
      ;;
  esac
done

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  clang libclang-rt-14-dev clang-tidy              # test.sh: sanitizer builds, thread-safety analysis, tidy.sh, fuzz.sh
  libtorch-dev libgloo-dev libopenblas0-pthread   # LibTorch (CPU) + Gloo; OpenBLAS: the reference BLAS is ~24x slower
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libboost-dev libyaml-cpp-dev prometheus-cpp-dev
  libcli11-dev nlohmann-json3-dev libspdlog-dev zlib1g-dev
  libgoogle-perftools-dev                         # tcmalloc for the router, the hosts and the trainer (cmake/EsAllocator.cmake)
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist prometheus
  python3 python3-grpcio python3-protobuf python3-numpy python3-torch python3-yaml
  dpkg-dev file debootstrap curl                  # scripts/package.sh (dpkg-shlibdeps; cpack needs file), scripts/package-test.sh
  iproute2                                        # tests/training/integration/test_multi_machine.cc: ip netns, veth
  linux-perf                                      # benchmarks/run_tracing.sh: the router's profile by call stack
)

# scripts/container-test.sh runs the image, the Kubernetes manifests and
# compose with rootful podman (runc: crun refuses hybrid cgroups; the CNI
# plugins and iptables publish ports; the dnsname plugin lets compose's
# services find each other by name, as Prometheus finds `server:8002`: without
# it podman's CNI networks have no DNS). The image's build stage, which runs
# this script too, has no use for them and says --no-containers. (Not
# guessed from /.dockerenv: some virtual machines have one and run podman.)
if [ "$CONTAINER_TOOLS" = 1 ]; then
  PACKAGES+=(podman runc podman-compose containernetworking-plugins golang-github-containernetworking-plugin-dnsname
    iptables catatonit)
fi

# tests/deploy validates the container and Kubernetes files with
# node and npm. A machine that already has them (NodeSource's nodejs, which
# bundles npm and conflicts with Debian's npm package) keeps its own.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  PACKAGES+=(nodejs npm)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${#missing[@]} package(s): ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
