#!/usr/bin/python3
"""Writes the tiny members of benchmarks/run_overhead.sh into a repository.

    /usr/bin/python3 benchmarks/make_overhead_models.py REPO_DIR [MAX_MEMBERS]

  tiny_1 .. tiny_M      one Linear (64 -> 10) and a softmax, FP32, batched up to
                        64, each with its own weights (torch.manual_seed(k));
                        tiny_k runs on host cpu0 for odd k, cpu1 for even k
  tiny_ensemble_N       the mean of tiny_1 .. tiny_N, for N = 1, 2, 4, ... M

so that an ensemble's cost grows by one member call per member while the
compute per call stays a few microseconds: the slope of the server's CPU per
request over N is its own cost per extra member call. M defaults to 16 (a
power of two). Needs Debian's python3-torch.
"""
import os
import sys

import torch

IN, OUT = 64, 10


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(IN, OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc(x), dim=1)


def write_config(repo, name, text):
    os.makedirs(os.path.join(repo, name), exist_ok=True)
    with open(os.path.join(repo, name, "config.yaml"), "w", encoding="utf-8") as f:
        f.write(text)


def main(argv):
    if len(argv) not in (2, 3) or (len(argv) == 3 and not argv[2].isdigit()):
        sys.stderr.write(__doc__)
        return 2
    repo = argv[1]
    members = int(argv[2]) if len(argv) == 3 else 16
    if members < 1 or members & (members - 1):
        sys.stderr.write("make_overhead_models.py: MAX_MEMBERS must be a power of two\n")
        return 2
    for k in range(1, members + 1):
        torch.manual_seed(k)
        name = f"tiny_{k}"
        os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
        torch.jit.script(Tiny().eval()).save(os.path.join(repo, name, "1", "model.pt"))
        write_config(repo, name,
                     "platform: torchscript\nmax_batch_size: 64\n"
                     f"inputs:\n  - {{name: input, datatype: FP32, dims: [{IN}]}}\n"
                     f"outputs:\n  - {{name: probabilities, datatype: FP32, dims: [{OUT}]}}\n"
                     f"hosts: [cpu{(k + 1) % 2}]\n")
    n = 1
    while n <= members:
        lines = "".join(f"    - {{model: tiny_{k}}}\n" for k in range(1, n + 1))
        write_config(repo, f"tiny_ensemble_{n}",
                     f"platform: ensemble\nmax_batch_size: 64\nensemble:\n  combine: mean\n  members:\n{lines}")
        n *= 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
