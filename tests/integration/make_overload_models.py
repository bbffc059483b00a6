#!/usr/bin/python3
"""Writes the TorchScript models and ensembles the overload-ladder test serves.

    /usr/bin/python3 make_overload_models.py [--bad-ladder] REPO_DIR

Every model takes FP32 [-1, 4] ("input") and answers FP32 [-1, 4]
("output"), max_batch_size 8, no dynamic batching (each request is computed
on its own, so work queues up behind the slow member):

  fast_a     x + 1 (~0 ms), host cpu0
  fast_b     x + 2 (~0 ms), host cpu0
  slow_c     x + 3 after SLOW_ITERATIONS element-wise sines of 4096 floats,
             host cpu1 (its own host: one executor, one request at a time).
             TorchScript cannot sleep; the loop is what takes the time. On
             this machine (2-core AMD EPYC, one LibTorch thread) a sine of
             4096 floats takes ~4 us idle (measured in python3-torch: 1000
             in ~4 ms), so 7000 take ~28 ms: through the server, slow_ens
             idle answers in 27-35 ms on a quiet machine, 35-75 ms while the
             other core compiles (medians 37-49 ms in the test's warm-up),
             and 12 clients asking for it in full see a median of 300-700 ms
             (24, as the test uses, ~790 ms).
  slow_ens   mean of fast_a, fast_b, slow_c = x + 2, with an overload ladder
             [slow_ens (accuracy 0.95), fast_a (accuracy 0.8)], target
             LATENCY_TARGET_MS (so 120 ms for requests of the default
             priority: lower_priority_share 0.8), dwell DWELL_MS: served by
             fast_a it answers x + 1, so the values tell the rungs apart too.
  quick_ens  mean of fast_a, fast_b = x + 1.5, ladder [quick_ens, fast_b]
             without accuracies (answers carry served_by, no
             served_accuracy).
  plain_ens  mean of fast_a, fast_b, no ladder (answers carry no served_by).

--bad-ladder: slow_ens's ladder names `no_such_model` instead of fast_a
(the server must refuse the repository, naming the file, line and
overload.ladder).

Needs Debian's python3-torch.
"""
import os
import sys

import torch

SLOW_ITERATIONS = 7000
LATENCY_TARGET_MS = 150
DWELL_MS = 1000


class AddConst(torch.nn.Module):
    def __init__(self, value: float):
        super().__init__()
        self.value = value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.value


class Slow(torch.nn.Module):
    def __init__(self, iterations: int, value: float):
        super().__init__()
        self.iterations = iterations
        self.value = value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = torch.ones([4096])
        for _ in range(self.iterations):
            b = torch.sin(b)  # stays far from denormals; its result is used, so not optimised away
        return x + self.value + b[0] * 0.0


IO = ("max_batch_size: 8\n"
      "inputs:\n  - {name: input, datatype: FP32, dims: [4]}\n"
      "outputs:\n  - {name: output, datatype: FP32, dims: [4]}\n")


def write_model(repo, name, module, host):
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    torch.jit.script(module).save(os.path.join(repo, name, "1", "model.pt"))
    with open(os.path.join(repo, name, "config.yaml"), "w") as f:
        f.write("platform: torchscript\n" + IO + "hosts: [" + host + "]\n")


def write_ensemble(repo, name, members, overload=""):
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    with open(os.path.join(repo, name, "config.yaml"), "w") as f:
        f.write("platform: ensemble\n" + IO + "ensemble:\n  combine: mean\n  members:\n" +
                "".join("    - {model: %s}\n" % m for m in members) + overload)


def main():
    args = sys.argv[1:]
    bad_ladder = "--bad-ladder" in args
    args = [a for a in args if a != "--bad-ladder"]
    if len(args) != 1:
        sys.stderr.write("usage: make_overload_models.py [--bad-ladder] REPO_DIR\n")
        return 2
    repo = args[0]
    write_model(repo, "fast_a", AddConst(1.0), "cpu0")
    write_model(repo, "fast_b", AddConst(2.0), "cpu0")
    write_model(repo, "slow_c", Slow(SLOW_ITERATIONS, 3.0), "cpu1")
    cheaper = "no_such_model" if bad_ladder else "fast_a"
    write_ensemble(repo, "slow_ens", ["fast_a", "fast_b", "slow_c"],
                   "overload:\n"
                   "  latency_target_ms: %d\n"
                   "  dwell_ms: %d\n"
                   "  ladder:\n"
                   "    - {model: slow_ens, accuracy: 0.95}\n"
                   "    - {model: %s, accuracy: 0.8}\n" % (LATENCY_TARGET_MS, DWELL_MS, cheaper))
    write_ensemble(repo, "quick_ens", ["fast_a", "fast_b"],
                   "overload:\n  latency_target_ms: %d\n  ladder: [quick_ens, fast_b]\n" % LATENCY_TARGET_MS)
    write_ensemble(repo, "plain_ens", ["fast_a", "fast_b"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
