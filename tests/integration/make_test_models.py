#!/usr/bin/python3
"""Writes the extra TorchScript models the error tests serve beside the demo.

    /usr/bin/python3 make_test_models.py REPO_DIR

  thrower  FP32 [-1, 4] -> [-1, 4]: returns 2*x, but raises RuntimeError("boom")
           when the sum of its input is over 1e6 (the INTERNAL error case).
  echo     FP32 [-1, -1] -> [-1, -1]: returns x + 1; a variable-size input, so a
           request can be made larger than the server's max_request_bytes.

Both run on host cpu0 (beside mlp and wide_mlp). Needs Debian's python3-torch.
"""
import os
import sys

import torch


class Thrower(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.sum()) > 1e6:
            raise RuntimeError("boom")
        return x * 2.0


class Echo(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1.0


def write_model(repo, name, module, dims):
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    torch.jit.script(module).save(os.path.join(repo, name, "1", "model.pt"))
    with open(os.path.join(repo, name, "config.yaml"), "w") as f:
        f.write(
            "platform: torchscript\n"
            "max_batch_size: 8\n"
            "inputs:\n"
            f"  - {{name: input, datatype: FP32, dims: {dims}}}\n"
            "outputs:\n"
            f"  - {{name: output, datatype: FP32, dims: {dims}}}\n"
            "hosts: [cpu0]\n"
        )


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: make_test_models.py REPO_DIR\n")
        return 2
    repo = sys.argv[1]
    write_model(repo, "thrower", Thrower(), "[4]")
    write_model(repo, "echo", Echo(), "[-1]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
