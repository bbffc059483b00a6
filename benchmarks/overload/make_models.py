#!/usr/bin/python3
"""Writes the synthetic repository of benchmarks/run_overload.sh.

    /usr/bin/python3 make_models.py REPO_DIR ITERATIONS TARGET_MS MAX_IN_FLIGHT

Four members m1..m4, FP32 [-1, 16] -> [-1, 16], each ITERATIONS element-wise
sines of 4096 floats (TorchScript cannot sleep: the loop is the work), then
x + k; m1, m2 on host cpu0, m3, m4 on host cpu1. Three ensembles of the
four (mean), one per policy of the benchmark:

  ens_plain   no limit: today's server, queueing past capacity
  ens_shed    ensemble.max_in_flight MAX_IN_FLIGHT: shedding only
  ens_ladder  overload ladder [ens_ladder, pair (m1 + m3, one per host),
              lite], latency_target_ms TARGET_MS, dwell 1000 ms

and `lite`, one member of an eighth of the work on both hosts (the
cheapest rung: a small model, as a trained ensemble's best member is a
twelfth of its cost).

Needs Debian's python3-torch.
"""
import os
import sys

import torch


# The integration test's slow model: ITERATIONS sines, then x + value.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "integration"))
from make_overload_models import Slow as Work  # noqa: E402


IO = ("max_batch_size: 8\n"
      "inputs:\n  - {name: input, datatype: FP32, dims: [16]}\n"
      "outputs:\n  - {name: output, datatype: FP32, dims: [16]}\n")


def write(repo, name, text):
    os.makedirs(os.path.join(repo, name), exist_ok=True)
    with open(os.path.join(repo, name, "config.yaml"), "w") as f:
        f.write(text)


def main():
    if len(sys.argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    repo, iterations, target_ms, max_in_flight = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    for k, host in ((1, "cpu0"), (2, "cpu0"), (3, "cpu1"), (4, "cpu1")):
        name = "m%d" % k
        os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
        torch.jit.script(Work(iterations, float(k))).save(os.path.join(repo, name, "1", "model.pt"))
        write(repo, name, "platform: torchscript\n" + IO + "hosts: [%s]\n" % host)

    os.makedirs(os.path.join(repo, "lite", "1"), exist_ok=True)
    torch.jit.script(Work(max(1, iterations // 8), 2.5)).save(os.path.join(repo, "lite", "1", "model.pt"))
    write(repo, "lite", "platform: torchscript\n" + IO + "hosts: [cpu0, cpu1]\n")

    def ensemble(members, extra=""):
        return ("platform: ensemble\n" + IO + "ensemble:\n  combine: mean\n" + extra + "  members:\n" +
                "".join("    - {model: %s}\n" % m for m in members))

    four = ["m1", "m2", "m3", "m4"]
    write(repo, "ens_plain", ensemble(four))
    write(repo, "ens_shed", ensemble(four, "  max_in_flight: %d\n" % max_in_flight))
    write(repo, "pair", ensemble(["m1", "m3"]))
    write(repo, "ens_ladder", ensemble(four) +
          "overload:\n  latency_target_ms: %g\n  dwell_ms: 1000\n  ladder: [ens_ladder, pair, lite]\n" % target_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
