#!/usr/bin/python3
"""One probe of run_overload.sh --capacity-at-target.

    at_target.py probe RESULT.json TARGET_MS

RESULT.json is ensemble-loadgen's report of the full ensemble at one
open-loop rate. Prints one line (the rate, what was answered, the p99) and
exits 0 when every request was answered with a p99 within TARGET_MS, else 1.
"""
import json
import sys


def verdict(step, target_ms):
    """(meets the target, the line that says so) for one loadgen step."""
    lost = step["failed"] + step.get("unanswered", 0) + step.get("skipped", 0)
    p99_ms = step["latency_us"]["p99"] / 1000 if step["ok"] else float("inf")
    meets = lost == 0 and p99_ms <= target_ms  # no answer: p99 infinite
    rate = step.get("rate") or step.get("send_rate_rps", 0)
    return meets, (f"{rate:.0f} requests/s offered: {step['ok']} answered, {lost} not, p99 {p99_ms:.1f} ms: "
                   f"{'within' if meets else 'misses'} {target_ms:g} ms")


def main():
    if len(sys.argv) != 4 or sys.argv[1] != "probe":
        sys.stderr.write(__doc__)
        return 2
    meets, line = verdict(json.load(open(sys.argv[2]))["steps"][0], float(sys.argv[3]))
    print(line)
    return 0 if meets else 1


if __name__ == "__main__":
    sys.exit(main())
