#!/usr/bin/env bash
# container-test.sh: the deployment files run for real, with podman.
#
#   scripts/container-test.sh            # image, Kubernetes manifests, compose
#   scripts/container-test.sh --full     # the image built from source by both
#                                        # stages of docker/Dockerfile (slow)
#   scripts/container-test.sh --keep     # leave the work folder and containers
#
# No image registry is needed (none is reachable on the development
# machines); everything is made here:
#  0. podman with docker/podman/containers.conf (runc; no default ulimits),
#     and the base images docker/Dockerfile names, debian:12 and
#     debian:12-slim, imported from scripts/package-test.sh's cached
#     debootstrap of Debian 12 (its `--prepare`).
#  1. The image: docker/Dockerfile's runtime stage, fed the .deb that
#     scripts/package.sh made (its build stage replaced by a build context
#     holding that .deb, so nothing is compiled twice; --full compiles it in
#     the build stage instead). Then, with the demo repository (written by
#     the image's own ensemble-make-demo) mounted read-only on /models and a
#     read-only root filesystem: it runs as uid 10001, its HEALTHCHECK
#     passes, gRPC, HTTP and /metrics answer through published ports with the
#     answers the server outside the container gives on the same repository,
#     and `podman stop` (SIGTERM) ends it with exit status 0 within its drain
#     time.
#  2. The Kubernetes manifests' CPU path (docker/kubernetes/), with
#     `podman kube play`.
#  3. docker/compose.yaml with podman-compose.
#
# Needs root (rootful podman: its bridge network reaches the pods) and
# podman, runc, podman-compose (scripts/install-deps.sh installs them).
# apt's downloads inside image builds are kept in scripts/package-test.sh's
# cache ($ES_PACKAGE_CACHE/apt-archives), so a second run installs the
# package's dependencies without downloading them again.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
BUILD_DIR=${BUILD_DIR:-build}
CACHE=${ES_PACKAGE_CACHE:-/var/cache/ensemble-serve}
IMAGE=localhost/ensemble-serve:latest   # the name the manifests and compose use
FULL=0
KEEP=0
for arg in "$@"; do
  case "$arg" in
    --full) FULL=1 ;;
    --keep) KEEP=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "container-test: unknown argument '$arg' (see --help)" >&2
      exit 2
      ;;
  esac
done

START=$SECONDS
step() { printf '\n==> [%4ds] %s\n' "$((SECONDS - START))" "$*"; }
die() {
  echo "container-test: FAILED: $*" >&2
  exit 1
}
[ "$(id -u)" -eq 0 ] || die "needs root (rootful podman)"
for tool in podman runc curl python3; do
  command -v "$tool" >/dev/null || die "$tool missing (scripts/install-deps.sh installs it)"
done
export CONTAINERS_CONF=$REPO/docker/podman/containers.conf
BIN=$BUILD_DIR/bin
source scripts/lib/server.sh  # start_server, stop_server: the server outside the container

WORK=$(mktemp -d /tmp/es-container.XXXXXX)
OUTSIDE_PID=
RUN_ID=es-ct-$$
KUBE=$WORK/kube.yaml
KUBE_VOLUMES=0   # 1 once this run made the claim's and the ConfigMap's volumes
COMPOSE_UP=0     # 1 once this run started its compose project
cleanup() {
  local status=$?
  [ -z "$OUTSIDE_PID" ] || kill "$OUTSIDE_PID" 2>/dev/null || true
  if [ "$KEEP" = 1 ]; then
    echo "container-test: kept $WORK and what this run started (containers $RUN_ID-*, pod ensemble-serve-pod-0)"
  else
    # What a failed step left: its containers, pod, volumes and compose project.
    [ "$COMPOSE_UP" = 0 ] || { compose down -v >/dev/null 2>&1 || true; remove_compose_network; }
    if [ "$KUBE_VOLUMES" = 1 ]; then
      podman kube down "$KUBE" >/dev/null 2>&1 || true
      podman volume rm -f ensemble-models ensemble-serve-cpu >/dev/null 2>&1 || true
    fi
    podman ps -a --filter "name=^$RUN_ID-" --format '{{.Names}}' | xargs -r podman rm -f -t 0 >/dev/null 2>&1 || true
    rm -rf "$WORK"
  fi
  exit "$status"
}
trap cleanup EXIT

# A build that retags an image leaves the one it replaces untagged (the
# server's is about 1.1 GB), and a machine that runs the suite many times
# fills its disk with them: each build notes the images its tags name before
# (image_id) and removes them after (remove_replaced) when no tag names them
# any more and no container uses them. Anything podman cannot say for sure
# (inspect failing) keeps the image: a cached build gives the same image
# back, and it must not be removed for want of an answer. (`--full` builds
# also keep the build stage's layers, as podman's layer cache does; not
# removed here.)
image_id() { podman image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }
remove_replaced() {
  local id tags
  for id in "$@"; do
    [ -n "$id" ] || continue
    tags=$(podman image inspect --format '{{join .RepoTags ","}}' "$id" 2>/dev/null) || continue
    [ -z "$tags" ] || continue
    podman rmi "$id" >/dev/null 2>"$WORK/rmi.log" ||
      echo "container-test: the replaced image $id is kept: $(tr '\n' ' ' <"$WORK/rmi.log")"
  done
}

# --- 0. base images ------------------------------------------------------------
base=$(scripts/package-test.sh --prepare | sed -n 's/.*base system ready: //p')
[ -d "$base" ] || die "scripts/package-test.sh --prepare made no base system"
base_id=$(basename "$base")-$(stat -c %Y "$base/.ensemble-serve-base-complete")
if [ "$(podman image inspect --format '{{index .Labels "ensemble-serve.base"}}' debian:12 2>/dev/null)" = "$base_id" ] &&
  podman image exists debian:12-slim; then
  step "base images debian:12, debian:12-slim: imported before from $base"
else
  step "base images debian:12, debian:12-slim: importing $base"
  replaced=("$(image_id docker.io/library/debian:12)" "$(image_id docker.io/library/debian:12-slim)")
  tar -C "$base" --exclude=./.ensemble-serve-base-complete -c . |
    podman import --change "LABEL ensemble-serve.base=$base_id" --change 'CMD ["bash"]' - docker.io/library/debian:12 >/dev/null
  podman tag docker.io/library/debian:12 docker.io/library/debian:12-slim
  remove_replaced "${replaced[@]}"
fi

# --- 1. the image ----------------------------------------------------------------
# --ignorefile: the ignore list BuildKit reads beside the Dockerfile (podman
# 4.3 looks only in the context's root), so `COPY . .` leaves out build/.
build_args=(--format docker --network host --volume "$CACHE/apt-archives:/var/cache/apt/archives"
  --ignorefile docker/Dockerfile.dockerignore -f docker/Dockerfile -t "$IMAGE")
mkdir -p "$CACHE/apt-archives/partial"
replaced=("$(image_id "$IMAGE")")
if [ "$FULL" = 1 ]; then
  step "image: both stages of docker/Dockerfile (the project compiled in the build stage)"
  podman build "${build_args[@]}" . >"$WORK/build.log" 2>&1 || { tail -n 30 "$WORK/build.log" >&2; die "podman build failed (log above)"; }
else
  step "image: the runtime stage of docker/Dockerfile, from scripts/package.sh's .deb"
  scripts/package.sh >"$WORK/package.log" 2>&1 || { tail -n 30 "$WORK/package.log" >&2; die "scripts/package.sh failed"; }
  deb=$(tail -n 1 "$WORK/package.log")
  [ -f "$deb" ] || die "scripts/package.sh printed no package path ($deb)"
  mkdir -p "$WORK/package/out"
  cp "$deb" "$WORK/package/out/"
  podman build "${build_args[@]}" --target runtime --build-context "build=$WORK/package" . >"$WORK/build.log" 2>&1 ||
    { tail -n 30 "$WORK/build.log" >&2; die "podman build failed (log above)"; }
fi
remove_replaced "${replaced[@]}"
podman image inspect --format '{{.Config.User}}' "$IMAGE" | grep -qx '10001:10001' || die "the image's USER is not 10001:10001"

step "demo repository, written by the image's own ensemble-make-demo"
mkdir -p "$WORK/models"
chown 10001:10001 "$WORK/models"
podman run --rm --name "$RUN_ID-make-demo" --read-only -v "$WORK/models:/models" --entrypoint ensemble-make-demo "$IMAGE" \
  --out /models --train-steps 0 >"$WORK/make-demo.log" 2>&1 || { tail -n 20 "$WORK/make-demo.log" >&2; die "ensemble-make-demo in the image failed"; }

step "server container: read-only root, demo repository on /models, ports published on 127.0.0.1"
server=$RUN_ID-server
# (Without systemd, podman cannot schedule the HEALTHCHECK's timer and says
# so on stderr; `podman healthcheck run` below runs the check itself.)
podman run -d --name "$server" --read-only -v "$WORK/models:/models:ro" \
  -p 127.0.0.1::8000 -p 127.0.0.1::8001 -p 127.0.0.1::8002 "$IMAGE" >/dev/null 2>"$WORK/run.err" ||
  { cat "$WORK/run.err" >&2; die "podman run failed"; }
published() { podman port "$server" "$1/tcp" | head -n 1 | sed 's/^0\.0\.0\.0:/127.0.0.1:/'; }
HTTP=$(published 8000)
GRPC=$(published 8001)
METRICS=$(published 8002)
CLI=$BUILD_DIR/bin/ensemble-cli
# picked_port FILE NAME: the host port picked for NAME ("NAME PORT" lines).
picked_port() { awk -v n="$2" '$1 == n { print $2 }' "$1"; }
# wait_ready CONTAINER GRPC_ADDRESS WHAT: until the server in CONTAINER answers
# ready on GRPC_ADDRESS (2 minutes at most); dies with its log otherwise.
wait_ready() {
  local container=$1 address=$2 what=$3
  for _ in $(seq 1 120); do
    "$CLI" --server "$address" --timeout-ms 2000 ready >/dev/null 2>&1 && return 0
    [ "$(podman inspect --format '{{.State.Running}}' "$container")" = true ] || { podman logs "$container" >&2; die "$what exited"; }
    sleep 1
  done
  podman logs --tail 30 "$container" >&2
  die "$what never became ready"
}
wait_ready "$server" "$GRPC" "the server in the container"
uid=$(podman top "$server" huser | awk 'NR > 1 { print $1 }' | sort -u | tr '\n' ' ')
[ "$uid" = "10001 " ] || die "the container's processes run as uid(s) '$uid' on the host, not 10001"
step "ready on gRPC $GRPC, HTTP $HTTP, /metrics $METRICS; runs as uid 10001"

podman healthcheck run "$server" || die "the image's HEALTHCHECK failed on a ready server"
step "HEALTHCHECK passes (podman healthcheck run)"

answers() {  # answers GRPC_ADDRESS HTTP_ADDRESS OUT: the same requests over both transports
  "$CLI" --server "$1" --json infer demo_ensemble --batch 4 --seed 7 >"$3.grpc.json"
  "$CLI" --http --server "$2" --json infer mlp --batch 3 --seed 11 >"$3.http.json"
}
answers "$GRPC" "$HTTP" "$WORK/inside"
curl -fsS "http://$METRICS/metrics" >"$WORK/metrics.txt" || die "/metrics did not answer through $METRICS"
grep -q '^ensemble_' "$WORK/metrics.txt" || die "/metrics has no ensemble_* series"

step "the same requests to ensemble-server outside the container, on the same repository"
sed -e "s#^repository: .*#repository: $WORK/models#" -e 's#^listen_address: .*#listen_address: 127.0.0.1#' \
  -e 's#^grpc_port: .*#grpc_port: 0#' -e 's#^http_port: .*#http_port: 0#' -e 's#^metrics_port: .*#metrics_port: 0#' \
  docker/server.yaml >"$WORK/outside.yaml"
start_server "$WORK/outside.yaml" "$WORK/outside.log"  # scripts/lib/server.sh: sets SERVER_PID, SERVER_ADDR
OUTSIDE_PID=$SERVER_PID
for _ in $(seq 1 120); do
  "$CLI" --server "$SERVER_ADDR" --timeout-ms 2000 ready >/dev/null 2>&1 && break
  sleep 0.5
done
OUT_HTTP=$(sed -n 's/^http listening on //p' "$WORK/outside.log")
[ -n "$OUT_HTTP" ] || { cat "$WORK/outside.log" >&2; die "the server outside printed no HTTP address"; }
answers "$SERVER_ADDR" "$OUT_HTTP" "$WORK/outside"
stop_server
OUTSIDE_PID=
python3 - "$WORK" <<'EOF' || die "the container's answers differ from the server's outside it"
import json, sys
work = sys.argv[1]
for transport in ("grpc", "http"):
    inside = json.load(open(f"{work}/inside.{transport}.json"))
    outside = json.load(open(f"{work}/outside.{transport}.json"))
    a = {o["name"]: o for o in inside["outputs"]}
    b = {o["name"]: o for o in outside["outputs"]}
    assert a.keys() == b.keys() and a, (transport, sorted(a), sorted(b))
    for name in a:
        assert a[name]["shape"] == b[name]["shape"], (transport, name)
        worst = max(abs(x - y) for x, y in zip(a[name]["data"], b[name]["data"]))
        assert worst <= 1e-6, (transport, name, worst)
    print(f"  {transport}: {inside['model_name']}: {len(a)} outputs equal ({', '.join(sorted(a))})")
EOF

step "podman stop: SIGTERM, drain, exit 0"
drain_s=$(($(sed -n 's/^ *drain_timeout_ms: *\([0-9]*\).*/\1/p' docker/server.yaml) / 1000))
stop_start=$SECONDS
podman stop -t $((drain_s + 10)) "$server" >/dev/null 2>>"$WORK/run.err"
stop_took=$((SECONDS - stop_start))
code=$(podman inspect --format '{{.State.ExitCode}}' "$server")
[ "$code" = 0 ] || { podman logs --tail 20 "$server" >&2; die "the server exited $code after SIGTERM"; }
[ "$stop_took" -le "$drain_s" ] || die "podman stop took ${stop_took} s, more than the drain time (${drain_s} s)"
podman logs "$server" >"$WORK/server.log" 2>&1
grep -q 'draining' "$WORK/server.log" || die "the server's log says nothing of a drain after SIGTERM"
# podman itself creates the mount points of /etc/hosts, /etc/hostname and
# /etc/resolv.conf (so /etc shows as changed) and the tmpfs mounts.
changed=$(podman diff "$server" | grep -v -E '^[AC] /(tmp|var/tmp|run|etc/hosts|etc/hostname|etc/resolv\.conf|etc)$|^[AC] /(tmp|var/tmp|run)/' || true)
[ -z "$changed" ] || die "the container wrote outside its volumes and tmpfs: $changed"
step "stopped in ${stop_took} s (drain time ${drain_s} s), exit 0; nothing written outside /models and the tmpfs mounts"


# --- 2. the Kubernetes manifests (CPU path) ----------------------------------------
# podman kube play runs Deployments, PersistentVolumeClaims (as named
# volumes) and ConfigMaps; it has no Namespace, Job or Service. So: the PVC
# first (its volume), then the demo Job's container (the same image, argv
# and user) run once into that volume, then the CPU ConfigMap and
# Deployment, whose pod mounts the filled claim.
step "Kubernetes: podman kube play docker/kubernetes/ (PVC, ConfigMap, CPU Deployment)"
! podman volume exists ensemble-models ||
  die "a podman volume ensemble-models exists already (an earlier run's, kept? podman volume rm ensemble-models)"
! podman volume exists ensemble-serve-cpu ||
  die "a podman volume ensemble-serve-cpu exists already (an earlier run's, kept? podman volume rm ensemble-serve-cpu)"
! podman pod exists ensemble-serve-pod-0 ||
  die "a pod ensemble-serve-pod-0 exists already (an earlier run's, kept? podman pod rm -f ensemble-serve-pod-0)"
KUBE_VOLUMES=1
podman kube play docker/kubernetes/10-pvc.yaml >"$WORK/kube-pvc.log" 2>&1 || { cat "$WORK/kube-pvc.log" >&2; die "podman kube play of the PVC failed"; }
podman volume exists ensemble-models || die "podman kube play made no volume for the claim ensemble-models"
# The Job's container: its command and args, run as its user with the
# claim's subPath repo on /models, as the Job mounts it.
job_argv=$(/usr/bin/python3 - docker/kubernetes/30-demo-repository-job.yaml <<'PY'
import shlex, sys, yaml
job = yaml.safe_load(open(sys.argv[1]))
c = job["spec"]["template"]["spec"]["containers"][0]
print(shlex.join(c["command"] + c["args"]))
PY
)
claim=$(podman volume inspect --format '{{.Mountpoint}}' ensemble-models)
mkdir -p "$claim/repo"
chown 10001:10001 "$claim/repo"
step "the demo Job's container, once, into the claim's volume (subPath repo): $job_argv"
eval "job_cmd=($job_argv)"
podman run --rm --name "$RUN_ID-demo-job" --read-only --user 10001:10001 -v "$claim/repo:/models" \
  --entrypoint "${job_cmd[0]}" "$IMAGE" "${job_cmd[@]:1}" >"$WORK/job.log" 2>&1 ||
  { tail -n 20 "$WORK/job.log" >&2; die "the demo Job's command failed"; }
# podman 4.3 publishes every containerPort on the host under its own number
# (0.0.0.0:8000...) and makes `replicas` pods on this one host, which cannot
# all have those ports; and it ignores a volume mount's subPath. So the copy
# played here has one replica, a hostPort on 127.0.0.1 picked free for each
# containerPort (what a Service would route to), and the claim's subPath
# mounted as the hostPath of that folder of the claim's volume; nothing else
# changed.
/usr/bin/python3 - docker/kubernetes "$KUBE" "$WORK/kube-ports" "$claim" <<'PY'
import os, socket, sys, yaml
src, out, ports_out, claim_dir = sys.argv[1:5]
docs = [yaml.safe_load(open(os.path.join(src, "20-configmap-cpu.yaml")))]
deployment = yaml.safe_load(open(os.path.join(src, "40-deployment-cpu.yaml")))
deployment["spec"]["replicas"] = 1
pod = deployment["spec"]["template"]["spec"]
claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
for container in pod["containers"]:
    for mount in container.get("volumeMounts", []):
        if mount["name"] in claims and "subPath" in mount:
            name = f"{mount['name']}-{mount['subPath']}"
            pod["volumes"].append({"name": name, "hostPath": {"path": os.path.join(claim_dir, mount["subPath"]), "type": "Directory"}})
            mount["name"] = name
            del mount["subPath"]
picked = []
for container in pod["containers"]:
    for port in container.get("ports", []):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port["hostPort"] = s.getsockname()[1]
        port["hostIP"] = "127.0.0.1"
        picked.append(f"{port['name']} {port['hostPort']}")
docs.append(deployment)
yaml.safe_dump_all(docs, open(out, "w"), sort_keys=False)
open(ports_out, "w").write("\n".join(picked) + "\n")
PY
podman kube play "$KUBE" >"$WORK/kube-play.log" 2>&1 || { cat "$WORK/kube-play.log" >&2; die "podman kube play failed"; }
pod=$(podman pod ps --filter "label=app.kubernetes.io/name=ensemble-serve" --format '{{.Name}}' | head -n 1)
[ -n "$pod" ] || pod=$(podman pod ps --format '{{.Name}}' | grep '^ensemble-serve' | head -n 1)
[ -n "$pod" ] || die "podman kube play made no ensemble-serve pod"
ctr=$(podman ps --filter "pod=$pod" --format '{{.Names}}' | grep -- '-server$' | head -n 1)
[ -n "$ctr" ] || die "pod $pod has no server container"
kube_port() { picked_port "$WORK/kube-ports" "$1"; }
wait_ready "$ctr" "127.0.0.1:$(kube_port grpc)" "the pod's server"
"$CLI" --server "127.0.0.1:$(kube_port grpc)" infer demo_ensemble --batch 2 >"$WORK/pod-infer.txt" || die "inference through the pod's gRPC port failed"
"$CLI" --http --server "127.0.0.1:$(kube_port http)" infer mlp >/dev/null || die "inference through the pod's HTTP port failed"
curl -fsS "http://127.0.0.1:$(kube_port metrics)/metrics" >"$WORK/pod-metrics.txt" || die "the pod's /metrics did not answer"
grep -q '^ensemble_' "$WORK/pod-metrics.txt" || die "the pod's /metrics has no ensemble_* series"
[ "$(podman top "$ctr" huser | awk 'NR > 1 { print $1 }' | sort -u)" = 10001 ] || die "the pod's server does not run as uid 10001"
[ "$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$ctr")" = true ] || die "the pod's root filesystem is not read-only"
health=$(podman inspect --format '{{if .Config.Healthcheck}}{{.Config.Healthcheck.Test}}{{end}}' "$ctr")
step "pod $pod (ports $(tr '\n' ' ' <"$WORK/kube-ports")): ready; gRPC, HTTP and /metrics answer; uid 10001, read-only root; podman's health check from the probes: ${health:-none}"
podman kube down "$KUBE" >"$WORK/kube-down.log" 2>&1 || { cat "$WORK/kube-down.log" >&2; die "podman kube down failed"; }
! podman pod exists "$pod" || die "podman kube down left pod $pod"
# kube down leaves the volumes kube play made (the claim's, the ConfigMap's).
podman volume rm -f ensemble-models ensemble-serve-cpu >/dev/null
KUBE_VOLUMES=0
step "podman kube down removed pod $pod"

# --- 3. compose ----------------------------------------------------------------------
# podman-compose (Debian's 1.0.3) runs docker/compose.yaml with three
# differences, each for a reason outside the file: the host ports are free
# ones picked here (a test uses no fixed port), the relative paths are made
# absolute (the copy lives in the work folder), and Grafana, which Debian
# does not package (its service is behind the compose profile `grafana`),
# is left out. Prometheus is the image docker/podman/prometheus.Containerfile
# makes from Debian's prometheus package, tagged with the name compose.yaml
# uses. podman-compose does not wait on depends_on conditions, so the
# one-shot `models` service is run to its end first, as the condition says.
if ! command -v podman-compose >/dev/null; then
  die "podman-compose missing (scripts/install-deps.sh installs it)"
fi
# Compose's services reach each other by name (Prometheus scrapes
# server:8002): a network podman makes must have DNS.
dns_probe=$RUN_ID-dns-probe
podman network create "$dns_probe" >/dev/null || die "podman network create failed"
dns_enabled=$(podman network inspect --format '{{.DNSEnabled}}' "$dns_probe")
podman network rm "$dns_probe" >/dev/null
[ "$dns_enabled" = true ] ||
  die "podman's networks have no DNS, so compose's services cannot find each other by name (the CNI dnsname plugin, golang-github-containernetworking-plugin-dnsname, is missing: scripts/install-deps.sh installs it)"
PROM_IMAGE=$(/usr/bin/python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["services"]["prometheus"]["image"])' docker/compose.yaml)
step "compose: the Prometheus image $PROM_IMAGE, from Debian's prometheus package"
replaced=("$(image_id "docker.io/$PROM_IMAGE")")
podman build --format docker --network host --volume "$CACHE/apt-archives:/var/cache/apt/archives" \
  -f docker/podman/prometheus.Containerfile -t "docker.io/$PROM_IMAGE" docker/podman >"$WORK/prometheus-build.log" 2>&1 ||
  { tail -n 30 "$WORK/prometheus-build.log" >&2; die "building the Prometheus image failed"; }
remove_replaced "${replaced[@]}"
PROJECT=$RUN_ID-compose
/usr/bin/python3 - "$REPO/docker" "$WORK/compose.yaml" "$WORK/compose-ports" <<'PY'
import os, socket, sys, yaml
docker_dir, out, ports_out = sys.argv[1:4]
compose = yaml.safe_load(open(os.path.join(docker_dir, "compose.yaml")))
compose["services"] = {k: v for k, v in compose["services"].items() if "grafana" not in v.get("profiles", [])}
picked = {}
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
for name, service in compose["services"].items():
    if "build" in service:
        service["build"]["context"] = os.path.normpath(os.path.join(docker_dir, service["build"]["context"]))
    service["volumes"] = [os.path.join(docker_dir, v[2:]) if v.startswith("./") else v for v in service.get("volumes", [])]
    ports = []
    for p in service.get("ports", []):
        host, _, container = p.rpartition(":")
        address = host.rsplit(":", 1)[0]
        picked[container] = free_port()
        ports.append(f"{address}:{picked[container]}:{container}")
    if ports:
        service["ports"] = ports
yaml.safe_dump(compose, open(out, "w"), sort_keys=False)
with open(ports_out, "w") as f:
    for container, host in sorted(picked.items()):
        f.write(f"{container} {host}\n")
PY
port_of() { picked_port "$WORK/compose-ports" "$1"; }
compose() { podman-compose -p "$PROJECT" -f "$WORK/compose.yaml" "$@"; }
# podman-compose 1.0's `down` leaves the project's network (and its CNI
# file): fifty runs had left fifty.
remove_compose_network() { podman network rm "${PROJECT}_default" >/dev/null 2>&1 || true; }
step "compose: models (one-shot), then server and prometheus"
COMPOSE_UP=1
compose up models >"$WORK/compose-models.log" 2>&1 || { tail -n 20 "$WORK/compose-models.log" >&2; die "compose's models service failed"; }
compose up -d server prometheus >"$WORK/compose-up.log" 2>&1 || { tail -n 30 "$WORK/compose-up.log" >&2; die "podman-compose up failed"; }
C_GRPC=127.0.0.1:$(port_of 8001)
PROM=127.0.0.1:$(port_of 9090)
wait_ready "${PROJECT}_server_1" "$C_GRPC" "compose's server"
"$CLI" --server "$C_GRPC" infer demo_ensemble --batch 2 >/dev/null || die "inference through compose's published gRPC port failed"
# Prometheus scrapes every 5 s (docker/monitoring/prometheus.yml): the
# target is up, and the server's series are there, within a minute.
prom_ok=0
for _ in $(seq 1 60); do
  if /usr/bin/python3 - "$PROM" <<'PY'
import json, sys, urllib.request
base = "http://" + sys.argv[1]
try:
    targets = json.load(urllib.request.urlopen(base + "/api/v1/targets", timeout=3))["data"]["activeTargets"]
    names = json.load(urllib.request.urlopen(base + "/api/v1/label/__name__/values", timeout=3))["data"]
except OSError:
    sys.exit(1)  # not up yet
up = [t for t in targets if t["labels"].get("job") == "ensemble-serve" and t["health"] == "up"]
ours = [n for n in names if n.startswith("ensemble_")]
if not up or not ours:
    sys.exit(1)
print(f"  Prometheus: target {up[0]['scrapeUrl']} up, {len(ours)} ensemble_* series names (e.g. {ours[0]})")
PY
  then
    prom_ok=1
    break
  fi
  sleep 1
done
if [ "$prom_ok" != 1 ]; then
  compose logs prometheus 2>&1 | tail -n 20 >&2
  # Prometheus logs no scrape errors; its targets API has the last one.
  /usr/bin/python3 - "$PROM" <<'PY' >&2 || true
import json, sys, urllib.request
targets = json.load(urllib.request.urlopen("http://" + sys.argv[1] + "/api/v1/targets", timeout=3))["data"]["activeTargets"]
for t in targets:
    print(f"  target {t['scrapeUrl']}: {t['health']} {t.get('lastError', '')}")
PY
  die "Prometheus never had the server's target up with ensemble_* series"
fi
compose down -v >"$WORK/compose-down.log" 2>&1 || { cat "$WORK/compose-down.log" >&2; die "podman-compose down failed"; }
COMPOSE_UP=0
[ -z "$(podman ps -a --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}')" ] || die "podman-compose down left containers"
remove_compose_network
[ -z "$(podman network ls --format '{{.Name}}' | sed -n "/^${PROJECT}_/p")" ] || die "the compose project's network ${PROJECT}_default is left"
step "compose: server answered, Prometheus scraped it; down removed everything"

step "container-test: all passed in $((SECONDS - START)) s"
