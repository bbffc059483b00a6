#!/usr/bin/env python3
"""The recipe's training step, its members separate against packed as one network.

    taskset -c 1 /usr/bin/python3 benchmarks/packed_training_step.py [--members 12] [--rows 64] [--seconds 3] [--profile]

Twelve members shaped as the zoo's `convnet` (normalisation, 3x3 convolutions
of 16 and 32 filters each pooled 2x2 then relu, a 128-unit hidden layer, 10
logits), one rank's share of the recipe's batch (64 of 128 rows), forward
and backward of the members' summed cross-entropy, one LibTorch thread. Both
pool channels-last, as the zoo does in train mode. Packed: the first
convolution over the shared input computes every member's filters at once,
the second is grouped (groups = members), the linear layers are batched
products, as torch_utils/packed_model.h builds them. Prints the time per
step of each, measured twice alternated; --profile adds LibTorch's operator
table for each. docs/training.md quotes it: this Python step overstates the
packed cost (2.4x here against 1.2x for ensemble-train's own modules).
"""
import argparse
import time

import torch
import torch.nn.functional as F


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--members", type=int, default=12)
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    p.add_argument("--profile", action="store_true", help="also print the operator table of each")
    return p.parse_args()


def conv_pool_relu(x, w, b, groups=1):
    x = F.conv2d(x, w, b, padding=1, groups=groups).contiguous(memory_format=torch.channels_last)
    return F.relu(F.max_pool2d(x, 2))


def main():
    args = parse()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    m, rows = args.members, args.rows
    images = torch.rand(rows, 1, 28, 28)
    labels = torch.randint(0, 10, (rows,))

    def param(*shape, fan_in):
        return (torch.rand(*shape) * 2 - 1).div_(fan_in ** 0.5).requires_grad_(True)

    separate = [dict(w1=param(16, 1, 3, 3, fan_in=9), b1=param(16, fan_in=9),
                     w2=param(32, 16, 3, 3, fan_in=144), b2=param(32, fan_in=144),
                     f1=param(128, 1568, fan_in=1568), g1=param(128, fan_in=1568),
                     f2=param(10, 128, fan_in=128), g2=param(10, fan_in=128)) for _ in range(m)]
    packed = dict(w1=param(16 * m, 1, 3, 3, fan_in=9), b1=param(16 * m, fan_in=9),
                  w2=param(32 * m, 16, 3, 3, fan_in=144), b2=param(32 * m, fan_in=144),
                  f1=param(m, 1568, 128, fan_in=1568), g1=param(m, 1, 128, fan_in=1568),
                  f2=param(m, 128, 10, fan_in=128), g2=param(m, 1, 10, fan_in=128))

    def separate_step():
        x = (images - 0.2860) / 0.3530
        loss = 0
        for p in separate:
            h = conv_pool_relu(conv_pool_relu(x, p["w1"], p["b1"]), p["w2"], p["b2"])
            h = F.relu(F.linear(h.flatten(1), p["f1"], p["g1"]))
            loss = loss + F.cross_entropy(F.linear(h, p["f2"], p["g2"]), labels)
        loss.backward()

    def packed_step():
        p = packed
        x = (images - 0.2860) / 0.3530
        h = conv_pool_relu(conv_pool_relu(x, p["w1"], p["b1"]), p["w2"], p["b2"], groups=m)
        h = h.reshape(rows, m, 1568).transpose(0, 1)  # [members, rows, features]
        h = F.relu(torch.baddbmm(p["g1"], h, p["f1"]))
        logits = torch.baddbmm(p["g2"], h, p["f2"])  # [members, rows, 10]
        loss = F.cross_entropy(logits.reshape(m * rows, 10), labels.repeat(m), reduction="sum") / rows
        loss.backward()

    steps = [("separate", separate_step), ("packed", packed_step)]
    print(f"{m} members, {rows} rows, one thread; ms per step (forward and backward):", flush=True)
    for _ in range(2):
        for name, step in steps:
            for _ in range(3):
                step()
            start, n = time.perf_counter(), 0
            while time.perf_counter() - start < args.seconds:
                step()
                n += 1
            print(f"  {name:8s} {(time.perf_counter() - start) / n * 1e3:7.1f} ms ({n} steps)", flush=True)
    if args.profile:
        for name, step in steps:
            with torch.autograd.profiler.profile() as prof:
                for _ in range(5):
                    step()
            print(f"\n{name}, 5 steps:")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))


if __name__ == "__main__":
    main()
