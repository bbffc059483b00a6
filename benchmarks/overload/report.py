#!/usr/bin/python3
"""The table (and, with labels, the plot) of benchmarks/run_overload.sh.

    report.py OUT_DIR TARGET_MS CAPACITY_RPS SOURCE
    report.py --reference-models OUT_DIR

The second form prints the models whose passes over every test image the
verdicts compare the steps with (OUT_DIR/reference_MODEL.json), one a line.

SOURCE: "synthetic", or the trained folder (--trained). Per policy and
offered load: requests of the measured window, the share answered, p50 and
p99 of the answers (ms), failures by gRPC code, and for the ladder the share
of answers by rung. With labels (--trained), the accuracy of the answers (all
of them, and per rung: ensemble-loadgen's by-served_by counts), and
OUT_DIR/overload.svg: p99 latency and accuracy of the answers against offered
load, one line per policy. Without labels the rung shares come from the
server's ensemble_overload_answers_total (after minus before).
"""
import json
import math
import os
import re
import sys

import trained_repo  # (beside this script) the ladder as its config.yaml states it

LOADS = ["0.5", "1", "2", "4", "8"]
POLICIES = ["plain", "shed", "ladder"]
COLOURS = {"plain": "#c0392b", "shed": "#7f8c8d", "ladder": "#2471a3"}


def metric_rungs(path, family="ensemble_overload_answers_total"):
    counts = {}
    if not os.path.exists(path):
        return counts
    for line in open(path):
        m = re.match(family + r'\{(.*)\} ([0-9.e+]+)', line)
        if not m or 'model="ens_ladder"' not in m.group(1):
            continue
        rung = re.search(r'rung="([^"]*)"', m.group(1)).group(1)
        counts[rung] = float(m.group(2))
    return counts


def rung_shares(out, load, step):
    """[(rung, share of answers, accuracy or None)], largest share first."""
    labels = step.get("labels")
    if labels:
        by = labels["by_served_by"]
        total = sum(v["answers"] for v in by.values())
        return sorted(((r or "(none)", v["answers"] / total, v["accuracy"]) for r, v in by.items() if v["answers"]),
                      key=lambda x: -x[1]) if total else []
    before = metric_rungs(os.path.join(out, f"ladder_{load}_before.rungs"))
    after = metric_rungs(os.path.join(out, f"ladder_{load}_after.rungs"))
    diff = {r: after.get(r, 0) - before.get(r, 0) for r in after}
    total = sum(diff.values())
    return sorted(((r, n / total, None) for r, n in diff.items() if n), key=lambda x: -x[1]) if total else []


def ladder_rungs(out):
    """[(served_by name, test-set accuracy or None, has exit_threshold)] of ens_ladder's ladder, richest first."""
    path = os.path.join(out, "repo", "ens_ladder", "config.yaml")
    rungs = trained_repo.ladder_rungs(open(path).read()) if os.path.exists(path) else []
    return [(trained_repo.rung_label(r), float(r["accuracy"]) if "accuracy" in r else None, "exit_threshold" in r)
            for r in rungs]


def references(out):
    """The issue's table: {load: (what, rung's served_by, its test-set accuracy, p99 at most this x the
    target, answered at least %)}: the full ensemble at 0.5x, the cascade at its own threshold at 2x,
    the best member (the last rung) at 8x; none without the ladder's accuracies."""
    rungs = ladder_rungs(out)
    if not rungs or any(acc is None for _, acc, _ in rungs):
        return {}
    cascade = next(((n, a) for n, a, threshold in rungs[1:-1] if n.endswith("_cascade") and not threshold), None)
    table = {"0.5": ("the full ensemble's", rungs[0][0], rungs[0][1], 1.0, 100.0),
             "2": ("the cascade's", *(cascade or (None, None)), 1.0, 99.9),
             "8": ("the best member's", rungs[-1][0], rungs[-1][1], 1.2, 99.0)}
    return {load: row for load, row in table.items() if row[1] is not None}


def reference_model(served_by):
    """The model a reference pass asks for the rung an answer names: the
    ensemble without its ladder (ens_plain) for rung 0, else the rung."""
    return "ens_plain" if served_by == "ens_ladder" else served_by


def reference_right(out, served_by):
    """Per request (the test images in order), the rows the reference
    rung answered right per answer, from its pass over every image
    (OUT_DIR/reference_MODEL.json, run_overload.sh --trained); None
    without that pass."""
    path = os.path.join(out, f"reference_{reference_model(served_by)}.json")
    if not os.path.exists(path):
        return None
    labels = json.load(open(path))["steps"][0].get("labels") or {}
    by = labels.get("by_request")
    if by is None:
        return None
    return [c / a if a else None for a, c in zip(by["answers"], by["correct"])]


def on_the_same_rows(labels, right):
    """The rows the reference would have answered right had it answered
    the step's requests (ensemble-loadgen's by_request): the sum over them
    of its right rows per answer; None when the step answered a request the
    reference pass did not."""
    total = 0.0
    for r, answers in enumerate(labels["by_request"]["answers"]):
        if not answers:
            continue
        if r >= len(right) or right[r] is None:
            return None
        total += answers * right[r]
    return total


def verdicts(out, target, steps):
    """The issue's targets for the ladder (0.5x, 2x, 8x), each line a verdict, or none without labels.

    The accuracy of a step's answers is judged against the reference rung's
    on the very test images the step answered, when a reference pass
    answered every image (run_overload.sh --trained: the rung alone, closed
    loop): a step that shed a request or two did not answer whole passes
    of the test set, and its accuracy moves from the rung's test-set figure
    by which images it left out. Beside it: the rung's test-set figure, and
    what the rungs that served the step score on the test set, weighted by
    their shares (which images each drew moves the observed figure by a
    few answers either way around that expectation)."""
    rungs = ladder_rungs(out)
    accuracy_of = {name: acc for name, acc, _ in rungs}
    lines = []
    for load, (what, name, test_set, p99_factor, answered_min) in references(out).items():
        s = steps.get(load)
        if s is None or not s.get("labels"):
            continue
        sent = s["ok"] + s["failed"] + s["unanswered"]
        answered = 100 * s["ok"] / sent if sent else 0
        p99 = s["latency_us"]["p99"] / 1000 if s["ok"] else float("inf")
        labels = s["labels"]
        observed = labels["accuracy"]
        by = labels["by_served_by"]
        total = sum(v["answers"] for v in by.values())
        expected = sum(v["answers"] * accuracy_of.get(r, float("nan")) for r, v in by.items()) / total if total else 0
        right = reference_right(out, name)
        paired = on_the_same_rows(labels, right) if right is not None and "by_request" in labels else None
        if paired is not None:
            reference = paired / labels["rows"] if labels["rows"] else 0
            where = f"on the images answered; {100 * test_set:.2f}% on the test set"
        else:
            reference = test_set
            where = "on the test set"
        if load == "0.5":
            accurate = abs(observed - reference) <= 0.0005 + 1e-12
            rule = "within 0.05 points of"
        else:
            accurate = observed >= reference - 1e-12
            rule = "at least"
        margin = round((observed - reference) * labels["rows"])
        checks = [p99 <= p99_factor * target + 1e-9, answered >= answered_min - 1e-9, accurate]
        lines.append(
            f"- {load}x: p99 {p99:.1f} ms (at most {p99_factor * target:g}), answered {answered:.1f}% "
            f"(at least {answered_min:g}%), accuracy {100 * observed:.2f}% ({rule} {what}, {name}: "
            f"{100 * reference:.2f}% {where}; {margin:+d} answers of {labels['rows']}; the rungs served "
            f"score {100 * expected:.2f}% on the test set, weighted by their shares): "
            f"**{'PASS' if all(checks) else 'MISS'}**")
    return lines


def rows(out):
    for load in LOADS:
        for policy in POLICIES:
            path = os.path.join(out, f"{policy}_{load}.json")
            if os.path.exists(path):
                yield load, policy, json.load(open(path))["steps"][0]


def svg(points, target, path):
    """Two panels side by side: p99 (log scale) and accuracy of the answers, against offered load (log 2)."""
    w, h, pad = 360, 260, 50
    xs = [math.log2(float(x)) for x in LOADS]

    def x_of(load, left):
        return left + pad + (math.log2(float(load)) - xs[0]) / (xs[-1] - xs[0]) * (w - 2 * pad)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * w}" height="{h + 30}" font-family="sans-serif" '
             f'font-size="11">', f'<rect width="{2 * w}" height="{h + 30}" fill="white"/>']
    p99s = [p["p99_ms"] for p in points if p["p99_ms"] > 0] + [target]
    lo, hi = math.log10(min(p99s)) - 0.1, math.log10(max(p99s)) + 0.1
    accs = [p["accuracy"] for p in points if p["accuracy"] is not None]
    alo, ahi = (min(accs) - 0.002, max(accs) + 0.002) if accs else (0, 1)
    panels = [("p99 latency of the answers (ms, log)", 0, lambda p: p["p99_ms"] if p["p99_ms"] > 0 else None,
               lambda v: h - pad - (math.log10(v) - lo) / (hi - lo) * (h - 2 * pad), lambda v: f"{v:.3g}",
               [10 ** (lo + (hi - lo) * k / 4) for k in range(5)]),
              ("accuracy of the answers (%)", w, lambda p: p["accuracy"],
               lambda v: h - pad - (v - alo) / (ahi - alo) * (h - 2 * pad), lambda v: f"{100 * v:.2f}",
               [alo + (ahi - alo) * k / 4 for k in range(5)])]
    for title, left, value, y_of, label, ticks in panels:
        parts.append(f'<text x="{left + w / 2}" y="18" text-anchor="middle" font-size="13">{title}</text>')
        parts.append(f'<line x1="{left + pad}" y1="{h - pad}" x2="{left + w - pad}" y2="{h - pad}" stroke="black"/>')
        parts.append(f'<line x1="{left + pad}" y1="{pad}" x2="{left + pad}" y2="{h - pad}" stroke="black"/>')
        for t in ticks:
            parts.append(f'<text x="{left + pad - 4}" y="{y_of(t) + 4:.1f}" text-anchor="end">{label(t)}</text>')
        for load in LOADS:
            parts.append(f'<text x="{x_of(load, left):.1f}" y="{h - pad + 14}" text-anchor="middle">{load}x</text>')
        parts.append(f'<text x="{left + w / 2}" y="{h - pad + 30}" text-anchor="middle">offered load '
                     f'(x the full ensemble\'s capacity)</text>')
        if left == 0:
            y = y_of(target)
            parts.append(f'<line x1="{left + pad}" y1="{y:.1f}" x2="{left + w - pad}" y2="{y:.1f}" stroke="black" '
                         f'stroke-dasharray="4 3"/><text x="{left + w - pad}" y="{y - 4:.1f}" text-anchor="end">'
                         f'target {target:g} ms</text>')
        for policy in POLICIES:
            pts = [(x_of(p["load"], left), y_of(value(p))) for p in points
                   if p["policy"] == policy and value(p) is not None]
            if not pts:
                continue
            parts.append(f'<polyline fill="none" stroke="{COLOURS[policy]}" stroke-width="2" points="' +
                         " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
            parts.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{COLOURS[policy]}"/>' for x, y in pts)
    for i, policy in enumerate(POLICIES):
        x = pad + i * 110
        parts.append(f'<rect x="{x}" y="{h + 12}" width="14" height="4" fill="{COLOURS[policy]}"/>'
                     f'<text x="{x + 18}" y="{h + 18}">{policy}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--reference-models":
        print("\n".join(sorted({reference_model(row[1]) for row in references(sys.argv[2]).values()})))
        return 0
    out, target, capacity, source = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    idle = json.load(open(os.path.join(out, "idle.json")))["steps"][0]["latency_us"]
    labelled = source != "synthetic"
    what = f"the trained ensemble of {source}" if labelled else \
        "synthetic stand-in: four members of fixed work, two per host"
    print(f"# Overload ({what})\n")
    measured = os.path.join(out, "capacity.json")
    closed = json.load(open(measured))["steps"][0] if os.path.exists(measured) else {}
    in_flight = closed.get("concurrency", 8)
    closed_text = f"closed loop with {in_flight} in flight it served {closed.get('throughput_rps', 0):.0f}"
    if os.path.exists(os.path.join(out, "at_target_capacity.txt")):
        probes = open(os.path.join(out, "at_target.txt")).read().strip().splitlines()
        how = (f"the highest Poisson rate at which it answered every request with a p99 within the target, "
               f"of {len(probes)} probes of 6 s; {closed_text}")
    elif os.path.exists(os.path.join(out, "given_capacity.txt")):
        how = f"given with --capacity; {closed_text}"
    else:
        how = f"closed loop, {in_flight} in flight"
    print(f"Full ensemble alone: p50 {idle['p50'] / 1000:.1f} ms; capacity {capacity:.0f} requests/s "
          f"({how}); ladder target {target:g} ms; open-loop Poisson arrivals.", end="")
    deep = os.path.join(out, "capacity_deep.json")
    if os.path.exists(deep):
        served = json.load(open(deep))["steps"][0]["throughput_rps"]
        print(f" At 128 in flight, where its members batch more of what waits, it served {served:.0f} "
              f"requests/s ({served / capacity:.1f}x): the steps are multiples of the capacity above, so 2x "
              f"offers {2 * capacity / served:.2f}x and 4x {4 * capacity / served:.2f}x of that deeper figure.",
              end="")
    cheapest = os.path.join(out, "capacity_cheapest.json")
    if os.path.exists(cheapest):
        step = json.load(open(cheapest))["steps"][0]
        print(f" The cheapest rung ({step.get('model', 'last rung')}) alone: capacity "
              f"{step['throughput_rps']:.0f} requests/s (closed loop, 32 in flight), "
              f"{step['throughput_rps'] / capacity:.1f}x the full ensemble's: past that even the cheapest rung "
              f"queues, and shedding is what is left.", end="")
    print("\n")
    acc_head = " accuracy |" if labelled else ""
    print(f"| policy | offered | sent | answered | p50 ms | p99 ms |{acc_head} failures | answers by rung (ladder) |")
    print("| --- " * (8 + labelled) + "|")
    points = []
    for load, policy, s in rows(out):
        sent = s["ok"] + s["failed"] + s["unanswered"]  # the window's calls that ended (or never did)
        answered = s["ok"] / sent if sent else 0
        lat = s["latency_us"]
        errors = ", ".join(f"{k} {v}" for k, v in sorted(s["errors"].items())) or "-"
        rungs = "-"
        if policy == "ladder":
            rungs = ", ".join(f"{r} {100 * share:.0f}%" + (f" ({100 * acc:.2f}%)" if acc is not None else "")
                              for r, share, acc in rung_shares(out, load, s)) or "-"
        p99 = lat["p99"] / 1000 if s["ok"] else 0
        mark = " (over target)" if policy == "ladder" and p99 > target else ""
        accuracy = s["labels"]["accuracy"] if labelled and s.get("labels") else None
        acc_cell = (f" {100 * accuracy:.2f}% |" if accuracy is not None else " - |") if labelled else ""
        p50 = f"{lat['p50'] / 1000:.1f}" if s["ok"] else "-"
        print(f"| {policy} | {load}x | {sent} | {100 * answered:.1f}% | {p50} | "
              f"{p99:.1f}{mark} |{acc_cell} {errors} | {rungs} |")
        points.append({"load": load, "policy": policy, "p99_ms": p99, "accuracy": accuracy})
    lines = verdicts(out, target, {load: s for load, policy, s in rows(out) if policy == "ladder"})
    if lines:
        print("\nThe ladder against its targets (the issue's table):\n")
        print("\n".join(lines))
    print("\nThe ladder's controller, per rung: mean latency predicted at admission and observed by the router "
          "(ms), over the step's answers (the server's ensemble_overload_*_latency_seconds_total):\n")
    print("| offered | rung | answers | predicted ms | observed ms |")
    print("| --- | --- | --- | --- | --- |")
    for load in LOADS:
        diff = {}
        for family in ("predicted_answers_total", "predicted_latency_seconds_total", "observed_latency_seconds_total"):
            before = metric_rungs(os.path.join(out, f"ladder_{load}_before.rungs"), "ensemble_overload_" + family)
            after = metric_rungs(os.path.join(out, f"ladder_{load}_after.rungs"), "ensemble_overload_" + family)
            diff[family] = {r: after[r] - before.get(r, 0) for r in after}
        for rung, n in sorted(diff["predicted_answers_total"].items(), key=lambda kv: -kv[1]):
            if n > 0:
                print(f"| {load}x | {rung} | {n:.0f} | "
                      f"{1e3 * diff['predicted_latency_seconds_total'][rung] / n:.1f} | "
                      f"{1e3 * diff['observed_latency_seconds_total'][rung] / n:.1f} |")
    if labelled:
        svg(points, target, os.path.join(out, "overload.svg"))
        print(f"\nPlot: {os.path.join(out, 'overload.svg')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
