#!/usr/bin/env bash
# Experiments (docs/experiments.md): what shadowing costs the serving side,
# and whether the online comparison tracks what labels would say.
#
# One server on the demo repository (its members trained, ensemble-make-demo),
# the Fashion-MNIST test images sent in turn (ensemble-loadgen --inputs,
# --labels), closed loop:
#   1. cost: demo_ensemble at concurrency 16 with a shadow of
#      demo_ensemble_v2 (the same members under another ensemble: a
#      candidate as costly as the serving one, as a retrained ensemble is) at
#      0%, 10% and 100%, set through the HTTP endpoint; three rounds, the
#      three steps in turn each round; requests/s, p50/p99, router and hosts
#      core-us per request, and the shadowed/skipped counts. The figure: the
#      median over rounds of each step's throughput over its round's 0% step.
#   2. tracking: demo_ensemble shadowed at 100% by each of its members (mlp,
#      wide_mlp, cnn) in turn over the test images, beside each candidate's
#      own accuracy on the same images (a step on it with --labels): the
#      online agreement, KL and entropy next to the offline accuracies.
#
#   3. (--trained DIR) two real candidates from ensemble-train: DIR is the
#      repository it wrote (benchmarks/run_training.sh: build/fmnist, twelve
#      convnets). Served: its best member (by the training report); the
#      candidates, each shadowed at 100% over the test images in turn: the
#      twelve-member ensemble as trained and a six-member one of its first
#      six members (the same repository, config only); beside each, the
#      served model's and its own accuracy on all 10,000 test images, and the
#      training report's.
#
#   benchmarks/run_experiments.sh [--no-build] [--seconds S] [--trained DIR]
#
# Prints the tables and writes them to build/bench_experiments/report.md.
# About 4 minutes (the demo's training is most of the first); --trained adds
# about 2.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
source scripts/lib/server.sh
source benchmarks/lib/bench.sh
BUILD=1 SECONDS_PER_STEP=5 TRAINED=
while [ $# -gt 0 ]; do
  case $1 in
    --no-build) BUILD=0 ;;
    --seconds) SECONDS_PER_STEP=$2; shift ;;
    --trained) TRAINED=$2; shift ;;
    -h | --help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "benchmarks/run_experiments.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$TRAINED" ] && [ ! -f "$TRAINED/report.json" ]; then
  echo "--trained $TRAINED: no report.json (benchmarks/run_training.sh writes build/fmnist)" >&2
  exit 1
fi
[ "$BUILD" = 0 ] || scripts/build.sh >/dev/null
require_tools ensemble-server ensemble-loadgen ensemble-model-host ensemble-make-demo
OUT=build/bench_experiments
rm -rf "$OUT" && mkdir -p "$OUT"
progress() { echo "[run_experiments $(date +%H:%M:%S)] $*"; }

progress "the demo repository, members trained (ensemble-make-demo)"
"$BIN/ensemble-make-demo" --out "$OUT/repo" --seed 1 >"$OUT/make_demo.log" 2>&1 || { cat "$OUT/make_demo.log" >&2; exit 1; }
cp -r "$OUT/repo/demo_ensemble" "$OUT/repo/demo_ensemble_v2"
sed -i 's/^name: demo_ensemble$/name: demo_ensemble_v2/' "$OUT/repo/demo_ensemble_v2/config.yaml"
write_two_host_config "$OUT/server.yaml"
progress "the Fashion-MNIST test images as .npy"
/usr/bin/python3 - "$OUT" <<'EOF_PY'
import sys
import numpy as np
sys.path[:0] = ["clients/python", "build/python"]
from kserve_client import fashion_mnist_test
images, labels = fashion_mnist_test("/usr/share/datasets/fashion-mnist", 0, 10000)
np.save(f"{sys.argv[1]}/test.npy", np.ascontiguousarray(images, dtype=np.float32).reshape(-1, 1, 28, 28))
np.save(f"{sys.argv[1]}/labels.npy", labels.astype(np.int64))
EOF_PY

start_server "$OUT/server.yaml" "$OUT/server.log" --grpc-port 0 --http-port 0 --no-metrics
trap stop_server EXIT
for _ in $(seq 1 100); do grep -q "http listening on" "$OUT/server.log" && break; sleep 0.1; done
HTTP=$(sed -n 's/^http listening on //p' "$OUT/server.log")
experiment() {  # experiment MODEL JSON: sets it, keeps the answer
  curl -sf -X POST "http://$HTTP/v2/models/$1/experiment" -d "$2" >/dev/null ||
    { echo "setting the experiment of $1 to $2 failed" >&2; exit 1; }
}
status() { curl -sf "http://$HTTP/v2/models/$1/experiment"; }
step() {  # step NAME MODEL CONCURRENCY
  progress "$1"
  "$BIN/ensemble-loadgen" --server "$SERVER_ADDR" --server-pid "$SERVER_PID" --model "$2" --inputs "$OUT/test.npy" \
    --labels "$OUT/labels.npy" --concurrency "$3" --duration-s "$SECONDS_PER_STEP" --warmup-s 1 --max-windows 1 \
    --ceiling-model none --json "$OUT/$1.json" >"$OUT/$1.txt" 2>&1 || { cat "$OUT/$1.txt" >&2; exit 1; }
}

for round in 1 2 3; do
  for percent in 0 10 100; do
    experiment demo_ensemble "{\"candidate\": \"demo_ensemble_v2\", \"mode\": \"shadow\", \"percent\": $percent}"
    step "cost_${percent}_$round" demo_ensemble 16
    status demo_ensemble >"$OUT/cost_${percent}_$round.status.json"
  done
done
for candidate in mlp wide_mlp cnn; do
  experiment demo_ensemble "{\"candidate\": \"$candidate\", \"mode\": \"shadow\", \"percent\": 100, \"window\": 100000}"
  step "track_$candidate" demo_ensemble 8
  status demo_ensemble >"$OUT/track_$candidate.status.json"
  experiment demo_ensemble '{"mode": "off"}'
  step "alone_$candidate" "$candidate" 8
done
stop_server
trap - EXIT

if [ -n "$TRAINED" ]; then
  # The trained members served as they are (copied: the server refuses
  # links out of its repository), with a six-member ensemble beside the twelve.
  progress "the trained repository of $TRAINED, with a six-member ensemble of its members"
  /usr/bin/python3 - "$TRAINED" "$OUT/trained" <<'EOF_PY'
import json, os, re, shutil, sys
trained, out = os.path.abspath(sys.argv[1]), sys.argv[2]
os.makedirs(out)
report = json.load(open(f"{trained}/report.json"))
best = max(report["members"], key=lambda m: report["members"][m]["accuracy"])
for name in report["members"]:
    shutil.copytree(f"{trained}/{name}", f"{out}/{name}")  # copies: the server refuses links out of its repository
full = next(n for n in sorted(os.listdir(trained))
            if os.path.isfile(f"{trained}/{n}/config.yaml") and
            len(re.findall(r"- \{model: ", open(f"{trained}/{n}/config.yaml").read().split("overload:")[0])) == len(report["members"]))
text = open(f"{trained}/{full}/config.yaml").read().split("# Written by ensemble-train: past capacity")[0]
members = re.findall(r"    - \{model: [^}]*\}\n", text)
for name, keep in (("ens12", members), ("ens6", members[:6])):
    os.makedirs(f"{out}/{name}")
    body = text.replace("".join(members), "".join(keep))
    open(f"{out}/{name}/config.yaml", "w").write(body)
json.dump({"served": best, "accuracy": {best: report["members"][best]["accuracy"], "ens12": report["ensemble"]["accuracy"]}},
          open(f"{out}/plan.json", "w"))
print(f"served: {best}; candidates: ens12 ({len(members)} members of {full}), ens6 (its first 6)")
EOF_PY
  SERVED=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['served'])" "$OUT/trained/plan.json")
  sed "s|^repository: .*|repository: $PWD/$OUT/trained|" "$TRAINED/server.yaml" >"$OUT/trained_server.yaml"
  start_server "$OUT/trained_server.yaml" "$OUT/trained_server.log" --grpc-port 0 --http-port 0 --no-metrics
  trap stop_server EXIT
  for _ in $(seq 1 100); do grep -q "http listening on" "$OUT/trained_server.log" && break; sleep 0.1; done
  HTTP=$(sed -n 's/^http listening on //p' "$OUT/trained_server.log")
  for candidate in ens12 ens6; do
    experiment "$SERVED" "{\"candidate\": \"$candidate\", \"mode\": \"shadow\", \"percent\": 100, \"window\": 100000}"
    step "trained_track_$candidate" "$SERVED" 4
    status "$SERVED" >"$OUT/trained_track_$candidate.status.json"
    experiment "$SERVED" '{"mode": "off"}'
  done
  # Each model's accuracy on all 10,000 test images (batches of 50), so the
  # three figures are over the same images.
  progress "accuracy of $SERVED, ens12 and ens6 on the whole test set"
  /usr/bin/python3 - "$OUT" "$SERVER_ADDR" "$SERVED" <<'EOF_PY'
import json, sys
import grpc
import numpy as np
sys.path[:0] = ["build/python"]
from proto import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc
out, address, served = sys.argv[1:4]
images, labels = np.load(f"{out}/test.npy"), np.load(f"{out}/labels.npy")
stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(address))
accuracy = {}
for model in (served, "ens12", "ens6"):
    right = 0
    for i in range(0, len(images), 50):
        request = pb.ModelInferRequest(model_name=model)
        request.inputs.add(name="input", datatype="FP32", shape=[len(images[i:i + 50]), 1, 28, 28])
        request.raw_input_contents.append(np.ascontiguousarray(images[i:i + 50]).tobytes())
        answer = stub.ModelInfer(request, timeout=60)
        p = np.frombuffer(answer.raw_output_contents[0], dtype=np.float32).reshape(-1, 10)
        right += int((p.argmax(axis=1) == labels[i:i + 50]).sum())
    accuracy[model] = right / len(images)
json.dump(accuracy, open(f"{out}/trained_accuracy.json", "w"))
EOF_PY
  stop_server
  trap - EXIT
fi

/usr/bin/python3 - "$OUT" <<'EOF_PY' | tee "$OUT/report.md"
import json, statistics, sys
out = sys.argv[1]
def step(name):
    return json.load(open(f"{out}/{name}.json"))["steps"][0]
def status(name):
    return json.load(open(f"{out}/{name}.status.json"))
print("#### 1. What shadowing costs the serving side\n")
print("| shadow | round | req/s | / 0% | p50 ms | p99 ms | router core-us/req | hosts core-us/req | shadowed | skipped |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
ratios = {10: [], 100: []}
# The counts are the experiment's since its candidate was set (a new share
# keeps them): each step's own are the difference from the step before.
before = {"shadowed": 0, "skipped": 0}
for r in (1, 2, 3):
    base = step(f"cost_0_{r}")["throughput_rps"]
    for p in (0, 10, 100):
        s, st = step(f"cost_{p}_{r}"), status(f"cost_{p}_{r}")
        own = {k: st[k] - before[k] for k in before}
        before = {k: st[k] for k in before}
        if p:
            ratios[p].append(s["throughput_rps"] / base)
        print(f"| {p}% | {r} | {s['throughput_rps']:,.0f} | {s['throughput_rps'] / base:.2f} | "
              f"{s['latency_us']['p50'] / 1000:.2f} | {s['latency_us']['p99'] / 1000:.2f} | "
              f"{s['server_cpu_us_per_request']:.0f} | {s['hosts_cpu_us_per_request']:.0f} | "
              f"{own['shadowed']:,} | {own['skipped']:,} |")
print()
for p in (10, 100):
    print(f"- shadow {p}%: the serving side at **{statistics.median(ratios[p]):.2f}x** its 0% throughput "
          f"(median of the rounds: {', '.join(f'{x:.2f}' for x in ratios[p])}).")
print("\n#### 2. The online comparison against the offline accuracies\n")
print("| candidate | compared | agreement | mean KL | mean abs diff | entropy ensemble / candidate | "
      "p99 ms ensemble / candidate | ensemble accuracy | candidate accuracy |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for c in ("mlp", "wide_mlp", "cnn"):
    t = status(f"track_{c}")["figures"]["total"]
    served, alone = step(f"track_{c}"), step(f"alone_{c}")
    print(f"| {c} | {t['compared_requests']:,} | {t['agreement']:.4f} | {t['mean_kl']:.4f} | {t['mean_abs_diff']:.4f} | "
          f"{t['entropy_serving']:.3f} / {t['entropy_candidate']:.3f} | {t['serving']['p99_ms']:.2f} / "
          f"{t['candidate']['p99_ms']:.2f} | {100 * served['labels']['accuracy']:.2f}% | {100 * alone['labels']['accuracy']:.2f}% |")
import os
if os.path.exists(f"{out}/trained/plan.json"):
    plan = json.load(open(f"{out}/trained/plan.json"))
    served = plan["served"]
    print(f"\n#### 3. Two candidates from ensemble-train against the served {served}\n")
    print(f"| candidate | compared | skipped | agreement | mean KL | mean abs diff | entropy {served} / candidate | "
          f"p50 ms {served} / candidate | p99 ms {served} / candidate | accuracy {served} / candidate (the 10,000 test images) | "
          "report's test-set accuracy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    measured = json.load(open(f"{out}/trained_accuracy.json"))
    for c, members in (("ens12", 12), ("ens6", 6)):
        st = status(f"trained_track_{c}")
        t = st["figures"]["total"]
        report = plan["accuracy"].get(c)
        print(f"| {c} ({members} members) | {t['compared_requests']:,} | {st['skipped']:,} | {t['agreement']:.4f} | "
              f"{t['mean_kl']:.4f} | {t['mean_abs_diff']:.4f} | {t['entropy_serving']:.3f} / {t['entropy_candidate']:.3f} | "
              f"{t['serving']['p50_ms']:.2f} / {t['candidate']['p50_ms']:.2f} | "
              f"{t['serving']['p99_ms']:.2f} / {t['candidate']['p99_ms']:.2f} | "
              f"{100 * measured[served]:.2f}% / {100 * measured[c]:.2f}% | "
              f"{'%.2f%%' % (100 * report) if report else 'not in the report'} |")
    print(f"\n{served}'s own test-set accuracy in the report: {100 * plan['accuracy'][served]:.2f}%")
EOF_PY
