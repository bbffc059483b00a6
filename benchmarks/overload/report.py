#!/usr/bin/python3
"""The table of benchmarks/run_overload.sh from its step files.

    report.py OUT_DIR TARGET_MS CAPACITY_RPS

Per policy and offered load: requests of the measured window, the share answered, p50 and p99
of the answers (ms), failures by gRPC code, and for the ladder the share of
answers by rung (ensemble_overload_answers_total, after minus before).
"""
import json
import os
import re
import sys

LOADS = ["0.5", "1", "2", "4", "8"]
POLICIES = ["plain", "shed", "ladder"]


def rung_counts(path):
    counts = {}
    if not os.path.exists(path):
        return counts
    for line in open(path):
        m = re.match(r'ensemble_overload_answers_total\{(.*)\} ([0-9.e+]+)', line)
        if not m or 'model="ens_ladder"' not in m.group(1):
            continue
        rung = re.search(r'rung="([^"]*)"', m.group(1)).group(1)
        counts[rung] = float(m.group(2))
    return counts


def main():
    out, target, capacity = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    idle = json.load(open(os.path.join(out, "idle.json")))["steps"][0]["latency_us"]
    print("# Overload (synthetic stand-in: four members of fixed work, two per host)\n")
    print(f"Full ensemble alone: p50 {idle['p50'] / 1000:.1f} ms; capacity {capacity:.0f} requests/s "
          f"(closed loop, 8 in flight); ladder target {target:g} ms; open-loop Poisson arrivals.\n")
    print("| policy | offered | sent | answered | p50 ms | p99 ms | failures | answers by rung (ladder) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for load in LOADS:
        for policy in POLICIES:
            path = os.path.join(out, f"{policy}_{load}.json")
            if not os.path.exists(path):
                continue
            s = json.load(open(path))["steps"][0]
            sent = s["ok"] + s["failed"] + s["unanswered"]  # the window's calls that ended (or never did)
            answered = s["ok"] / sent if sent else 0
            lat = s["latency_us"]
            errors = ", ".join(f"{k} {v}" for k, v in sorted(s["errors"].items())) or "-"
            rungs = "-"
            if policy == "ladder":
                before = rung_counts(os.path.join(out, f"{policy}_{load}_before.rungs"))
                after = rung_counts(os.path.join(out, f"{policy}_{load}_after.rungs"))
                diff = {r: after.get(r, 0) - before.get(r, 0) for r in after}
                total = sum(diff.values())
                if total:
                    rungs = ", ".join(f"{r} {100 * n / total:.0f}%" for r, n in
                                      sorted(diff.items(), key=lambda kv: -kv[1]) if n)
            p99 = lat["p99"] / 1000
            mark = " (over target)" if policy == "ladder" and p99 > target else ""
            print(f"| {policy} | {load}x | {sent} | {100 * answered:.1f}% | {lat['p50'] / 1000:.1f} | "
                  f"{p99:.1f}{mark} | {errors} | {rungs} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
