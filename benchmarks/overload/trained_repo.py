#!/usr/bin/python3
"""The trained repository of benchmarks/run_overload.sh --trained.

    trained_repo.py TRAINED_DIR OUT_DIR TARGET_MS MAX_IN_FLIGHT

TRAINED_DIR is what `ensemble-train` wrote (benchmarks/run_training.sh:
build/fmnist), whose ensemble's config.yaml carries the ladder the trainer
wrote (the ensemble, its cascade variant at a few thresholds, its best
member, each with its test-set accuracy). Into OUT_DIR/repo go copies of the ensemble's members
and of the ladder's rungs, and the ensemble three times, one per policy:
  ens_plain   as trained, without the ladder: today's server
  ens_shed    ensemble.max_in_flight MAX_IN_FLIGHT: shedding only
  ens_ladder  the trained ladder with ens_ladder as rung 0, latency_target_ms
              TARGET_MS, dwell 1000 ms
and the test split of Fashion-MNIST (Debian's dataset-fashion-mnist) as
OUT_DIR/x.npy (10000 x 1 x 28 x 28, float32 in [0, 1], as the trainer
feeds it) and OUT_DIR/y.npy (labels), for ensemble-loadgen --inputs/--labels.
Prints the ensemble's name and the ladder's rungs with their accuracies.
"""
import gzip
import os
import re
import shutil
import sys

DATASET = "/usr/share/datasets/fashion-mnist"
LADDER_HEADER = "# Written by ensemble-train: past capacity"


def trained_ensemble(trained):
    """The folder whose config.yaml has the trainer's ladder: (name, config text)."""
    for name in sorted(os.listdir(trained)):
        path = os.path.join(trained, name, "config.yaml")
        if os.path.isfile(path) and "\noverload:" in open(path).read():
            return name, open(path).read()
    raise SystemExit(f"{trained}: no ensemble with an overload ladder (train with ensemble.latency_target_ms > 0)")


def ladder_rungs(text):
    """The rungs of a config's overload ladder (config.yaml's text), richest
    first: each a flow mapping as a dict (model, accuracy, and exit_threshold
    on a cascade served at a threshold of its own); none without a ladder."""
    start = text.find("\noverload:")
    return [] if start < 0 else [dict(kv.split(": ", 1) for kv in body.split(", "))
                                 for body in re.findall(r"- \{(model: [^}]*)\}", text[start:])]


def rung_label(rung):
    """The rung as answers name it in served_by: the model, @threshold for a cascade at its own."""
    return rung["model"] + ("@" + rung["exit_threshold"] if "exit_threshold" in rung else "")


def main():
    if len(sys.argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    trained, out, target_ms, max_in_flight = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    name, text = trained_ensemble(trained)
    base = text[:text.index(LADDER_HEADER)] if LADDER_HEADER in text else text[:text.index("\noverload:") + 1]
    rungs = ladder_rungs(text)
    if any("accuracy" not in r for r in rungs):
        raise SystemExit(f"{trained}/{name}/config.yaml: every rung of the ladder needs its accuracy")
    members = re.findall(r"- \{model: ([A-Za-z0-9_.-]+)\}", base)
    if len(rungs) < 2 or not members:
        raise SystemExit(f"{trained}/{name}/config.yaml: expected members and a ladder of at least two rungs")
    repo = os.path.join(out, "repo")
    os.makedirs(repo, exist_ok=True)
    for model in sorted(set(members) | {r["model"] for r in rungs[1:]}):
        shutil.copytree(os.path.join(trained, model), os.path.join(repo, model), dirs_exist_ok=True)

    def write(model, config):
        os.makedirs(os.path.join(repo, model), exist_ok=True)
        with open(os.path.join(repo, model, "config.yaml"), "w") as f:
            f.write(config)

    write("ens_plain", base)
    write("ens_shed", base.replace("ensemble:\n", "ensemble:\n  max_in_flight: %d\n" % max_in_flight, 1))
    ladder = [dict(rungs[0], model="ens_ladder")] + rungs[1:]
    write("ens_ladder", base + "overload:\n  latency_target_ms: %g\n  dwell_ms: 1000\n  ladder:\n" % target_ms +
          "".join("    - {%s}\n" % ", ".join(f"{k}: {v}" for k, v in rung.items()) for rung in ladder))

    import numpy as np  # here: report.py imports this file for its ladder alone, numpy or not

    images = np.frombuffer(gzip.open(os.path.join(DATASET, "t10k-images-idx3-ubyte.gz")).read(), np.uint8, offset=16)
    labels = np.frombuffer(gzip.open(os.path.join(DATASET, "t10k-labels-idx1-ubyte.gz")).read(), np.uint8, offset=8)
    np.save(os.path.join(out, "x.npy"), (images.reshape(-1, 1, 28, 28) / 255.0).astype(np.float32))
    np.save(os.path.join(out, "y.npy"), labels.astype(np.int64))
    print(f"ensemble {name}: {len(members)} members; ladder " +
          ", ".join(f"{rung_label(r)} ({100 * float(r['accuracy']):.2f}%)" for r in ladder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
