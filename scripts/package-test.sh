#!/usr/bin/env bash
# package-test.sh: proves ensemble-serve's .deb in a clean Debian 12.
#
#   scripts/package-test.sh [PATH_TO_DEB]    # default: build it with scripts/package.sh
#   scripts/package-test.sh --prepare        # only make (or check) the cached base system
#
# Steps (each announced with its elapsed time):
#  1. A minimal Debian 12 (debootstrap --variant=minbase bookworm, from the
#     mirror this machine's apt sources name) cached under
#     $ES_PACKAGE_CACHE (default /var/cache/ensemble-serve), keyed by suite,
#     variant, architecture and mirror; made once, then copied to a fresh
#     work root for every run so the cache stays clean.
#  2. /proc, /sys (read-only), /dev and this machine's /dev/shm (clients'
#     shared-memory regions, the KServe shared-memory extension) are mounted
#     into the work root; downloaded .debs are kept in
#     $ES_PACKAGE_CACHE/apt-archives between runs.
#  3. The .deb is installed inside the chroot by scripts/install-deb.sh (the
#     script docker/Dockerfile runs too): apt resolves Depends: from Debian.
#  4. The installed ensemble-make-demo writes the demo repository into the
#     state folder; the installed ensemble-server is started inside the chroot
#     as the package's user `ensemble-serve` with no_new_privs and an empty
#     capability bounding set (as the unit has it), with the installed
#     example config and free ports.
#  5. From OUTSIDE the chroot, over loopback: GET /v2/health/ready with curl,
#     and inferences of demo_ensemble over gRPC with build/bin/ensemble-cli
#     (when built; curl's HTTP infer otherwise): one plain, one with its
#     input in a shared-memory region (--shm, as the package's user: the
#     region is 0600).
#  6. SIGTERM; the server must exit 0.
#  7. apt-get purge inside the chroot; binaries, /etc/ensemble-serve, the
#     unit, the docs, the state folder and the user must all be gone.
# Every mount is undone and the work root removed on every exit path (set
# ES_PACKAGE_TEST_KEEP=1 to keep the work root for a look). Needs root.
# Exit status 0 only when every step passed.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

CACHE=${ES_PACKAGE_CACHE:-/var/cache/ensemble-serve}
SUITE=bookworm
START=$SECONDS
step() { printf '\n==> [%4ds] %s\n' "$((SECONDS - START))" "$*"; }
die() {
  echo "package-test: FAILED: $*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mounts)"
for tool in debootstrap chroot curl flock mount umount setpriv findmnt; do
  command -v "$tool" >/dev/null || die "$tool missing (scripts/install-deps.sh installs it)"
done

# --- the mirror: the one this machine's apt sources use -----------------------
# First URI of a stanza (deb822 *.sources) or line (*.list) for suite
# $SUITE, and likewise for $SUITE-security.
mirror_for() {  # mirror_for SUITE -> URI or nothing
  local suite=$1 f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v s="$suite" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                        if ($(i + 1) == s) { print $i; exit } }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v s="$suite" 'BEGIN { RS = ""; FS = "\n" }
      { uri = ""; hit = 0; deb = 0
        for (j = 1; j <= NF; j++) {
          if ($j ~ /^URIs:/) { split(substr($j, 6), u, " "); for (k in u) if (u[k] != "") { uri = u[k]; break } }
          if ($j ~ /^Suites:/) { n = split(substr($j, 8), t, " "); for (k = 1; k <= n; k++) if (t[k] == s) hit = 1 }
          if ($j ~ /^Types:.*(^| )deb( |$)/) deb = 1
        }
        if (hit && deb && uri != "") { print uri; exit } }' "$f"
  done
}
MIRROR=$(mirror_for "$SUITE" | sed -n 1p)
SECURITY=$(mirror_for "$SUITE-security" | sed -n 1p)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
MIRROR=${MIRROR%/}
ARCH=$(dpkg --print-architecture)
KEY="$SUITE-minbase-$ARCH-$(printf '%s' "$MIRROR" | sha256sum | cut -c1-12)"
BASE=$CACHE/$KEY
mkdir -p "$CACHE" "$CACHE/apt-archives/partial"

# --- 1. the cached base system -------------------------------------------------
ensure_base() {
  # One maker at a time; a half-made base (no stamp) is made afresh.
  exec 9>"$CACHE/.base.lock"
  flock 9
  if [ -f "$BASE/.ensemble-serve-base-complete" ]; then
    step "base system: cached $BASE"
  else
    step "base system: debootstrap --variant=minbase $SUITE from $MIRROR into $BASE (first run only)"
    rm -rf --one-file-system "$BASE.tmp"
    debootstrap --variant=minbase --arch="$ARCH" "$SUITE" "$BASE.tmp" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
      { tail -n 30 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
    # The same registry for apt inside: the suite, its updates and security.
    {
      echo "deb $MIRROR $SUITE main"
      echo "deb $MIRROR $SUITE-updates main"
      [ -z "$SECURITY" ] || echo "deb ${SECURITY%/} $SUITE-security main"
    } >"$BASE.tmp/etc/apt/sources.list"
    rm -rf "$BASE.tmp/var/cache/apt/archives"/*.deb "$BASE.tmp/var/lib/apt/lists"/*_Packages
    touch "$BASE.tmp/.ensemble-serve-base-complete"
    rm -rf --one-file-system "$BASE"
    mv "$BASE.tmp" "$BASE"
  fi
  flock -u 9
}
ensure_base
if [ "${1:-}" = "--prepare" ]; then
  step "base system ready: $BASE"
  exit 0
fi

# --- the package ---------------------------------------------------------------
DEB=${1:-}
if [ -z "$DEB" ]; then
  step "building the package (scripts/package.sh)"
  scripts/package.sh
  DEB=$(ls -t "${BUILD_DIR:-build}"/package/ensemble-serve_*_"$ARCH".deb | head -n1)
fi
[ -f "$DEB" ] || die "$DEB: no such package"
DEB=$(readlink -f "$DEB")
step "package: $DEB"

# --- 2. a fresh work root and its mounts ----------------------------------------
ROOT=$(mktemp -d "$CACHE/work.XXXXXX")
MOUNTS=()  # mounted paths, undone in reverse order
SERVER_PID=""
# The script's own stdout/stderr, for cleanup: a signal's trap runs inside
# whatever redirection the interrupted command had (a step's log file).
exec 4>&1 3>&2
cleanup() {
  local rc=$? pid i
  set +e
  exec 1>&4 2>&3
  # Anything still running inside the work root (a server that did not stop)
  # is ended before its mounts go: only processes whose root is ours.
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$ROOT" ] && kill -KILL "$pid" 2>/dev/null
  done
  [ -z "$SERVER_PID" ] || wait "$SERVER_PID" 2>/dev/null
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTS[i]}" || umount -l "${MOUNTS[i]}" || echo "package-test: could not unmount ${MOUNTS[i]}" >&2
  done
  if [ "${ES_PACKAGE_TEST_KEEP:-0}" = 1 ]; then
    echo "package-test: work root kept: $ROOT" >&2
  elif findmnt -rn -o TARGET | grep "^$ROOT" >/dev/null; then
    echo "package-test: $ROOT still has mounts; not removed" >&2
  else
    rm -rf --one-file-system "$ROOT"
  fi
  if [ "$rc" -eq 0 ]; then
    printf '\npackage-test: PASSED in %ds\n' "$((SECONDS - START))"
  else
    printf '\npackage-test: FAILED (exit %d) after %ds\n' "$rc" "$((SECONDS - START))" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "work root: copying the base to $ROOT"
cp -a "$BASE/." "$ROOT/"
mnt() {  # mnt TARGET MOUNT-ARGS...: mounts and remembers it for cleanup
  local target=$1
  shift
  mount "$@" "$target"
  MOUNTS+=("$target")
}
mnt "$ROOT/proc" -t proc proc
mnt "$ROOT/sys" -t sysfs -o ro,nosuid,nodev,noexec sysfs
mnt "$ROOT/dev" --bind /dev
mnt "$ROOT/dev/shm" --bind /dev/shm  # shared with clients outside (ensemble-cli --shm)
mnt "$ROOT/var/cache/apt/archives" --bind "$CACHE/apt-archives"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
in_root() { chroot "$ROOT" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root "$@"; }

# --- 3. install with the one install script -------------------------------------
step "installing the package in the chroot: scripts/install-deb.sh (apt resolves Depends:)"
mkdir -p "$ROOT/tmp/es-deb"
cp "$DEB" "$ROOT/tmp/es-deb/"
cp scripts/install-deb.sh "$ROOT/tmp/es-deb/install-deb.sh"
# Which install script and package this run proved (docker/Dockerfile runs
# the same scripts/install-deb.sh).
echo "install-deb.sh sha256 $(sha256sum <scripts/install-deb.sh | cut -d' ' -f1)"
echo "$(basename "$DEB") sha256 $(sha256sum <"$DEB" | cut -d' ' -f1)"
in_root sh /tmp/es-deb/install-deb.sh "/tmp/es-deb/$(basename "$DEB")" >"$ROOT/tmp/es-deb/install.log" 2>&1 ||
  { tail -n 40 "$ROOT/tmp/es-deb/install.log" >&2; die "install-deb.sh failed in the chroot"; }
grep -E '^(Get|Fetched|Setting up ensemble-serve)' "$ROOT/tmp/es-deb/install.log" | tail -n 3
in_root dpkg-query -W -f='installed ${Package} ${Version}, ${Installed-Size} KiB\n' ensemble-serve
for b in ensemble-server ensemble-model-host ensemble-train ensemble-cli ensemble-loadgen ensemble-make-demo; do
  [ -x "$ROOT/usr/bin/$b" ] || die "/usr/bin/$b missing after install"
done
[ -f "$ROOT/etc/ensemble-serve/server.yaml" ] || die "/etc/ensemble-serve/server.yaml missing"
[ -f "$ROOT/lib/systemd/system/ensemble-server.service" ] || die "the systemd unit is missing"
grep -q '^ensemble-serve:' "$ROOT/etc/passwd" || die "postinst made no user ensemble-serve"
uid=$(awk -F: '$1 == "ensemble-serve" { print $3 }' "$ROOT/etc/passwd")
gid=$(awk -F: '$1 == "ensemble-serve" { print $4 }' "$ROOT/etc/passwd")
echo "user ensemble-serve: uid $uid gid $gid"
[ "$uid" -ne 0 ] || die "the package's user is root"
# Every shared library resolves in the clean system (Depends: complete).
if in_root ldd /usr/bin/ensemble-server /usr/bin/ensemble-model-host | grep 'not found'; then
  die "libraries missing in the clean system: Depends: is incomplete"
fi

# --- 4. the demo repository and the installed server, as the package's user ------
STATE=/var/lib/ensemble-serve
step "writing the demo repository with the installed ensemble-make-demo (as ensemble-serve)"
[ -d "$ROOT$STATE" ] || die "postinst made no $STATE"
chroot --userspec="$uid:$gid" --groups="$gid" "$ROOT" env -i PATH=/usr/bin:/bin HOME="$STATE" \
  ensemble-make-demo --out "$STATE/models" --train-steps 0 | tail -n 2

step "starting the installed ensemble-server in the chroot (as ensemble-serve, /etc/ensemble-serve/server.yaml)"
LOG=$ROOT/tmp/es-server.log
# As the unit runs it, as far as that goes without systemd: the package's
# user, NoNewPrivileges=yes, an empty capability bounding set.
chroot "$ROOT" setpriv --reuid="$uid" --regid="$gid" --clear-groups --no-new-privs --bounding-set=-all \
  --inh-caps=-all env -i PATH=/usr/bin:/bin HOME="$STATE" \
  ensemble-server --config /etc/ensemble-serve/server.yaml --grpc-port 0 --http-port 0 --metrics-port 0 \
  >"$LOG" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 240); do
  grep -q '^metrics listening on' "$LOG" && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$LOG" >&2; die "ensemble-server exited while starting"; }
  sleep 0.5
done
grep -q '^metrics listening on' "$LOG" || { cat "$LOG" >&2; die "ensemble-server did not start within 120 s"; }
GRPC=$(sed -n 's/^grpc listening on //p' "$LOG")
HTTP=$(sed -n 's/^http listening on //p' "$LOG")
echo "server pid $SERVER_PID: grpc $GRPC, http $HTTP"
[ "$(stat -c %u "/proc/$SERVER_PID")" = "$uid" ] || die "the server does not run as ensemble-serve"
grep -q '^NoNewPrivs:[[:space:]]*1$' "/proc/$SERVER_PID/status" || die "the server runs without no_new_privs"
grep -q '^CapBnd:[[:space:]]*0*$' "/proc/$SERVER_PID/status" || die "the server has a capability bounding set"
case "$GRPC$HTTP" in
  127.0.0.1:*127.0.0.1:*) ;;
  *) die "the server does not listen on loopback only: $GRPC, $HTTP" ;;
esac

# --- 5. requests from outside the chroot, over loopback ----------------------------
step "requests from outside the chroot over loopback"
ready=""
for _ in $(seq 1 120); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://$HTTP/v2/health/ready" || true)
  [ "$code" = 200 ] && { ready=1; break; }
  sleep 0.5
done
[ -n "$ready" ] || { cat "$LOG" >&2; die "GET /v2/health/ready never answered 200 (last: $code)"; }
echo "GET http://$HTTP/v2/health/ready -> 200"
CLI=${BUILD_DIR:-build}/bin/ensemble-cli
if [ -x "$CLI" ]; then
  out=$("$CLI" --server "$GRPC" infer demo_ensemble --batch 2) ||
    { cat "$LOG" >&2; die "ensemble-cli infer demo_ensemble failed"; }
  sed -n "1,12p" <<<"$out"
  # The ensemble's answer names its combined output and its members'.
  grep -q 'mlp' <<<"$out" || die "the inference answer names no member: $out"
  # The input through a POSIX shared-memory region the server maps: the
  # client runs as the package's user, as a region is readable by its owner.
  out=$(setpriv --reuid="$uid" --regid="$gid" --clear-groups "$CLI" --server "$GRPC" \
    infer demo_ensemble --shm --plain) || { cat "$LOG" >&2; die "ensemble-cli infer --shm failed"; }
  sed -n "1,3p" <<<"$out"
  grep -q 'probabilities' <<<"$out" || die "the --shm answer has no probabilities: $out"
else
  body='{"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":['$(seq -s, 1 784 | sed 's/[0-9]\+/0.5/g')']}]}'
  out=$(curl -sf -H 'Content-Type: application/json' -d "$body" "http://$HTTP/v2/models/demo_ensemble/infer") ||
    die "HTTP infer demo_ensemble failed"
  printf '%.600s\n' "$out"
  grep -q '"outputs"' <<<"$out" || die "the HTTP answer has no outputs: $out"
fi

# --- 6. SIGTERM, exit 0 -------------------------------------------------------------
step "SIGTERM to the server; it must exit 0"
kill -TERM "$SERVER_PID"
rc=0
wait "$SERVER_PID" || rc=$?
SERVER_PID=""
tail -n 3 "$LOG"
[ "$rc" -eq 0 ] || { cat "$LOG" >&2; die "ensemble-server exited $rc after SIGTERM"; }
echo "ensemble-server exited 0"

# --- 7. purge, and nothing left ----------------------------------------------------
step "apt-get purge ensemble-serve in the chroot"
in_root apt-get purge -y -q ensemble-serve >"$ROOT/tmp/es-purge.log" 2>&1 ||
  { cat "$ROOT/tmp/es-purge.log" >&2; die "apt-get purge failed"; }
tail -n 2 "$ROOT/tmp/es-purge.log"
if in_root dpkg-query -W -f='${Status}' ensemble-serve 2>/dev/null | grep -q 'installed\|config-files'; then
  die "dpkg still knows ensemble-serve after purge"
fi
for p in /usr/bin/ensemble-server /usr/bin/ensemble-model-host /usr/bin/ensemble-train /usr/bin/ensemble-cli \
  /usr/bin/ensemble-loadgen /usr/bin/ensemble-make-demo /etc/ensemble-serve /usr/share/doc/ensemble-serve \
  /lib/systemd/system/ensemble-server.service "$STATE"; do
  [ ! -e "$ROOT$p" ] || die "$p is still there after purge"
done
grep -q '^ensemble-serve:' "$ROOT/etc/passwd" && die "user ensemble-serve still exists after purge"
grep -q '^ensemble-serve:' "$ROOT/etc/group" && die "group ensemble-serve still exists after purge"
echo "purged: binaries, /etc/ensemble-serve, the unit, the docs, $STATE and the user are gone"
