#!/usr/bin/python3
"""Writes the extra TorchScript models the error tests serve beside the demo.

    /usr/bin/python3 make_test_models.py REPO_DIR [MODEL ...]

  thrower      FP32 [-1, 4] -> [-1, 4]: returns 2*x, but raises RuntimeError("boom")
               when the sum of its input is over 1e6 (the INTERNAL error case).
  echo         FP32 [-1, -1] -> [-1, -1]: returns x + 1; a variable-size input, so a
               request can be made larger than the server's max_request_bytes.
  spinner      FP32 [-1, 4] -> [-1, 4]: returns 3*x, but computes forever (a busy
               loop) when the sum of its input is over 1e6: the hung forward.
               Its config sets max_compute_ms: 1000.
  hang_warmup  FP32 [-1, 4] -> [-1, 4]: computes forever on any input, so its
               warm-up never ends: the start-up that hangs.
  versioned    FP32 [-1, 4] -> [-1, 4]: version folders 1, 2 and 3, version k
               returns x + k, so an answer says which version computed it.

Without MODEL names it writes thrower and echo. All run on host cpu0 (beside
mlp and wide_mlp). Needs Debian's python3-torch.
"""
import os
import sys

import torch


class Thrower(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.sum()) > 1e6:
            raise RuntimeError("boom")
        return x * 2.0


class Spinner(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.sum()) > 1e6:
            acc = torch.zeros(1)
            i = 0
            while i >= 0:  # for ever (2^63 iterations)
                acc = acc + 1.0
                i += 1
            return x + acc
        return x * 3.0


class HangWarmup(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        acc = torch.zeros(1)
        i = 0
        while i >= 0:  # for ever, on every input, warm-up's zeros included
            acc = acc + 1.0
            i += 1
        return x + acc


class Plus(torch.nn.Module):
    def __init__(self, k: float):
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.k


class Echo(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1.0


def write_model(repo, name, module, dims, extra="", versions=None):
    for version, m in (versions or {1: module}).items():
        os.makedirs(os.path.join(repo, name, str(version)), exist_ok=True)
        torch.jit.script(m).save(os.path.join(repo, name, str(version), "model.pt"))
    with open(os.path.join(repo, name, "config.yaml"), "w") as f:
        f.write(
            "platform: torchscript\n"
            "max_batch_size: 8\n"
            "inputs:\n"
            f"  - {{name: input, datatype: FP32, dims: {dims}}}\n"
            "outputs:\n"
            f"  - {{name: output, datatype: FP32, dims: {dims}}}\n"
            "hosts: [cpu0]\n" + extra
        )


def main():
    models = {
        "thrower": lambda repo: write_model(repo, "thrower", Thrower(), "[4]"),
        "echo": lambda repo: write_model(repo, "echo", Echo(), "[-1]"),
        "spinner": lambda repo: write_model(repo, "spinner", Spinner(), "[4]", "max_compute_ms: 1000\n"),
        "hang_warmup": lambda repo: write_model(repo, "hang_warmup", HangWarmup(), "[4]"),
        "versioned": lambda repo: write_model(repo, "versioned", None, "[4]",
                                              versions={k: Plus(float(k)) for k in (1, 2, 3)}),
    }
    names = sys.argv[2:] or ["thrower", "echo"]
    if len(sys.argv) < 2 or any(n not in models for n in names):
        sys.stderr.write("usage: make_test_models.py REPO_DIR [" + " | ".join(models) + " ...]\n")
        return 2
    for name in names:
        models[name](sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
