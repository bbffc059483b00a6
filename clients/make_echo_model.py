#!/usr/bin/python3
"""Writes a trivial echo model into a model repository: the load tester's ceiling.

The model's forward returns a copy of its input, so serving it costs the
server almost nothing but the request path itself (gRPC, validation, the
shared-memory round trip, the response). ensemble-loadgen measured against it
(`--ceiling-model echo`) gives the highest throughput the tool and the router
path can show on this machine: see docs/loadgen.md.

    /usr/bin/python3 clients/make_echo_model.py --out build/demo_repo

writes <out>/echo/config.yaml and <out>/echo/1/model.pt. Its input has the
demo models' shape by default (FP32 [-1, 1, 28, 28], batched up to 64), so
the ceiling is measured with the same request payload as the demo models.
Needs Debian's python3-torch (run it with /usr/bin/python3).
"""
import argparse
import os
import sys


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="model repository to write into")
    parser.add_argument("--name", default="echo", help="model name (folder), default echo")
    parser.add_argument("--dims", default="1,28,28",
                        help="non-batch dims of the input and output, default 1,28,28 (the demo models')")
    parser.add_argument("--max-batch-size", type=int, default=64, help="default 64")
    parser.add_argument("--hosts", default="", help="comma-separated host names to place it on (default: every host)")
    args = parser.parse_args(argv)
    try:
        args.dims = [int(d) for d in args.dims.split(",")]
    except ValueError:
        parser.error("--dims: comma-separated integers")
    if any(d < 1 for d in args.dims):
        parser.error("--dims: every dim >= 1 (a fixed output size keeps the server's arena reservation small)")
    if args.max_batch_size < 1:
        parser.error("--max-batch-size must be >= 1")
    return args


def main(argv):
    args = parse_args(argv)
    import torch  # after argument parsing: --help works without torch

    class Echo(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

    model_dir = os.path.join(args.out, args.name)
    os.makedirs(os.path.join(model_dir, "1"), exist_ok=True)
    scripted = torch.jit.script(Echo().eval())
    path = os.path.join(model_dir, "1", "model.pt")
    scripted.save(path + ".tmp")
    os.replace(path + ".tmp", path)
    dims = ", ".join(str(d) for d in args.dims)
    lines = [
        "# A trivial echo model (clients/make_echo_model.py): output = input.",
        "# ensemble-loadgen measures its own ceiling against it (docs/loadgen.md).",
        "platform: torchscript",
        f"max_batch_size: {args.max_batch_size}",
        "inputs:",
        f"  - {{name: input, datatype: FP32, dims: [{dims}]}}",
        "outputs:",
        f"  - {{name: output, datatype: FP32, dims: [{dims}]}}",
    ]
    if args.hosts:
        lines.append("hosts: [" + ", ".join(h.strip() for h in args.hosts.split(",")) + "]")
    with open(os.path.join(model_dir, "config.yaml"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.name} (echo, FP32 [-1, {dims}]) to {model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
