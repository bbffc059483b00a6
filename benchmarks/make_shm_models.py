#!/usr/bin/python3
"""Writes the two models of benchmarks/run_shm_latency.sh into a repository.

    /usr/bin/python3 benchmarks/make_shm_models.py REPO_DIR [ELEMENTS]

  echo16m  FP32 [1, ELEMENTS] -> [1, ELEMENTS]: output = input (a copy), so a
           16 MiB tensor crosses both ways (clients/make_echo_model.py's model)
  sum16m   FP32 [1, ELEMENTS] -> [1, 1]: the sum of the row, so only the input
           is large: the input path alone

ELEMENTS defaults to 4194304 (16 MiB of FP32). Both are batched with
max_batch_size 1 and run on host cpu0. Needs Debian's python3-torch.
"""
import os
import sys

import torch


class Echo(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


class Sum(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1, keepdim=True)


def write(repo, name, module, in_dims, out_dims):
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    torch.jit.script(module.eval()).save(os.path.join(repo, name, "1", "model.pt"))
    with open(os.path.join(repo, name, "config.yaml"), "w", encoding="utf-8") as f:
        f.write("platform: torchscript\nmax_batch_size: 1\n"
                f"inputs:\n  - {{name: input, datatype: FP32, dims: [{in_dims}]}}\n"
                f"outputs:\n  - {{name: output, datatype: FP32, dims: [{out_dims}]}}\n"
                "hosts: [cpu0]\n")


def main(argv):
    if len(argv) not in (2, 3) or (len(argv) == 3 and not argv[2].isdigit()):
        sys.stderr.write(__doc__)
        return 2
    elements = int(argv[2]) if len(argv) == 3 else 4194304
    write(argv[1], "echo16m", Echo(), elements, elements)
    write(argv[1], "sum16m", Sum(), elements, 1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
