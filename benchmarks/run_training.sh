#!/usr/bin/env bash
# The training benchmark of benchmarks/RESULTS.md ("Training"): twelve small
# CNNs (zoo `convnet`, seeds 101-112) on the full Fashion-MNIST, two CPU
# ranks, then the trained repository served and asked about real test
# images. benchmarks/run_cascade.sh --config
# config/train-fashion-mnist.yaml --out build/fmnist then measures it
# through the server (accuracy, NLL, throughput; cascade).
#
#   benchmarks/run_training.sh [--devices cpu:2] [--epochs N]
#
# Targets: the ensemble reaches at least 93.5% test accuracy, beats
# its best member by at least 0.5 points, has a lower NLL and ECE than the
# best member, and the whole run takes at most 20 minutes on this 2-core
# machine. Prints the trainer's report, the wall time, the all-reduce share
# of the step, and PASS/MISS per target. Output: build/fmnist.
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICES=cpu:2 EPOCHS=()
while [ $# -gt 0 ]; do
  case $1 in
    --devices) DEVICES=$2; shift ;;
    --epochs) EPOCHS=(--epochs "$2"); shift ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "benchmarks/run_training.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -d build ] || bash scripts/build.sh >/dev/null
cmake --build build -j2 --target ensemble-train ensemble-server ensemble-model-host >/dev/null
OUT=build/fmnist
START=$(date +%s.%N)
build/bin/ensemble-train --config config/train-fashion-mnist.yaml --devices "$DEVICES" \
  "${EPOCHS[@]}" --out "$OUT" --force --progress-every 60
END=$(date +%s.%N)
/usr/bin/python3 - "$OUT/report.json" "$START" "$END" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); wall = float(sys.argv[3]) - float(sys.argv[2])
members = r["members"]; ens = r["ensemble"]
best_name = max(members, key=lambda m: members[m]["accuracy"]); best = members[best_name]
margin = 100 * (ens["accuracy"] - best["accuracy"])
def verdict(ok): return "PASS" if ok else "MISS"
print(f"\nwall time {wall:.0f} s ({wall/60:.1f} min), {r['world_size']} rank(s), {r['steps']} steps, "
      f"step {1e3*r['mean_step_seconds']:.1f} ms, all-reduce wait {1e3*r['mean_allreduce_seconds']:.2f} ms "
      f"= {100*r['allreduce_share_of_step']:.1f}% of the step")
print(f"ensemble accuracy {100*ens['accuracy']:.2f}% >= 93.5%: {verdict(ens['accuracy'] >= 0.935)}")
print(f"beats best member ({best_name}, {100*best['accuracy']:.2f}%) by {margin:+.2f} points >= 0.5: {verdict(margin >= 0.5)}")
print(f"NLL {ens['nll']:.4f} < {best['nll']:.4f}: {verdict(ens['nll'] < best['nll'])}; "
      f"ECE {ens['ece']:.4f} < {best['ece']:.4f}: {verdict(ens['ece'] < best['ece'])}")
print(f"run <= 20 min: {verdict(wall <= 1200)}")
PY

# Served as it is: the ensemble's answer on the first four test images.
/usr/bin/python3 - "$OUT/test4.npy" <<'PY'
import gzip, sys, numpy as np
d = "/usr/share/datasets/fashion-mnist/"
x = np.frombuffer(gzip.open(d + "t10k-images-idx3-ubyte.gz").read(), np.uint8, offset=16)
y = np.frombuffer(gzip.open(d + "t10k-labels-idx1-ubyte.gz").read(), np.uint8, offset=8)
np.save(sys.argv[1], (x[:4 * 784].reshape(4, 1, 28, 28) / 255.0).astype(np.float32))
print("\nserving", sys.argv[1].rsplit("/", 1)[0], "- labels of the first 4 test images:", list(map(int, y[:4])))
PY
BIN=build/bin
# shellcheck source=scripts/lib/server.sh
source scripts/lib/server.sh
start_server "$OUT/server.yaml" "$OUT/server.log" --grpc-port 0 --metrics-port 0 --http-port 0
trap stop_server EXIT
build/bin/ensemble-cli --server "$SERVER_ADDR" infer fmnist_ensemble --plain --top-k 1 \
  --input "input=$OUT/test4.npy"
