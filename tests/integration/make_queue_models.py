#!/usr/bin/python3
"""Writes the TorchScript models the priority, batching and limits tests serve.

    /usr/bin/python3 make_queue_models.py REPO_DIR

  slow_prio  FP32 [-1, 1] -> [-1, 1]: returns 2*x after N element-wise sines
             of 4096 floats, N = the largest input value (~10 us each here), so
             a request can hold the host as long as a test needs. (A loop of
             torch.mm crashed LibTorch's optimiser in the host's warm-up.) max_batch_size
             4, dynamic batching, 2 priority levels.
  slow_pref  the same model; max_batch_size 8, preferred_batch_sizes [4].
  slow_a, slow_b  the same model, max_batch_size 4, dynamic batching: the
             members of
  slow_pair  an ensemble of slow_a and slow_b (mean), for the test that an
             ensemble request that expired or was cancelled takes its
             members' queued work with it.
  blowup     FP32 [1] -> FP32 [262144] (1 MiB): a small request with a large
             answer, for the memory bound on clients that never read.

All run on host cpu0 (one executor: one batch at a time). Needs Debian's
python3-torch.
"""
import os
import sys

import torch


class Slow(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = int(x.max().item())
        b = torch.ones([4096])
        for _ in range(n):
            b = torch.sin(b)  # stays far from denormals; its result is used, so not optimised away
        return x * 2.0 + b[0] * 0.0


class Blowup(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros([262144]) + x[0]


def write_model(repo, name, module, config):
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    torch.jit.script(module).save(os.path.join(repo, name, "1", "model.pt"))
    with open(os.path.join(repo, name, "config.yaml"), "w") as f:
        f.write("platform: torchscript\n" + config + "hosts: [cpu0]\n")


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: make_queue_models.py REPO_DIR\n")
        return 2
    repo = sys.argv[1]
    slow_io = ("inputs:\n  - {name: input, datatype: FP32, dims: [1]}\n"
               "outputs:\n  - {name: output, datatype: FP32, dims: [1]}\n")
    write_model(repo, "slow_prio", Slow(),
                "max_batch_size: 4\n" + slow_io +
                "dynamic_batching: {max_queue_delay_us: 1000, priority_levels: 2, default_priority: 2}\n")
    write_model(repo, "slow_pref", Slow(),
                "max_batch_size: 8\n" + slow_io +
                "dynamic_batching: {max_queue_delay_us: 1000, preferred_batch_sizes: [4]}\n")
    for name in ("slow_a", "slow_b"):
        write_model(repo, name, Slow(),
                    "max_batch_size: 4\n" + slow_io + "dynamic_batching: {max_queue_delay_us: 1000}\n")
    os.makedirs(os.path.join(repo, "slow_pair", "1"), exist_ok=True)
    with open(os.path.join(repo, "slow_pair", "config.yaml"), "w") as f:
        f.write("platform: ensemble\nmax_batch_size: 4\n" + slow_io +
                "ensemble:\n  combine: mean\n  members:\n    - {model: slow_a}\n    - {model: slow_b}\n")
    write_model(repo, "blowup", Blowup(),
                "max_batch_size: 0\n"
                "inputs:\n  - {name: input, datatype: FP32, dims: [1]}\n"
                "outputs:\n  - {name: output, datatype: FP32, dims: [262144]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
