#!/usr/bin/env python3
"""The report of benchmarks/run_batching.sh, from the files it wrote.

    batching_report.py OUT_DIR

Reads OUT_DIR/<step>.json (ensemble-loadgen --json), OUT_DIR/<step>.cpu (the
CPU ticks of the server or floor process and of the hosts during the step)
and OUT_DIR/<model>_inprocess.txt (bench-inprocess), and prints Markdown:
the tables, each batching target with its ratio and PASS/MISS, and where each
request's CPU time went.
"""
import json
import re
import sys

DELAY_US = 200  # max_queue_delay_us of the *_batched variants (run_batching.sh)


def load(out, name):
    step = json.load(open(f"{out}/{name}.json"))
    cpu = json.load(open(f"{out}/{name}.cpu"))
    s = step["steps"][0]
    calls = max(1, step["totals"]["client_ok"])  # every call of the run, warm-up included, as the ticks
    hz = cpu["tick_hz"]
    rows_per_call = step["config"]["batch"]
    s["server_us_per_req"] = 1e6 * cpu["server_ticks"] / hz / calls
    s["hosts_us_per_req"] = 1e6 * cpu["host_ticks"] / hz / calls
    s["client_us_per_req"] = 1e6 * s["client_cpu_cores"] / s["throughput_rps"]
    s["rows_per_call"] = rows_per_call
    return s


def inprocess(out, model):
    text = open(f"{out}/{model}_inprocess.txt").read()
    by_batch = {int(b): float(r) for b, r in re.findall(r"^\s+(\d+)\s+(\d+)\s*$", text, re.M)}
    best = max(by_batch, key=by_batch.get)
    return by_batch, best


def verdict(ok):
    return "**PASS**" if ok else "**MISS**"


def main(out):
    steps = {n: load(out, n) for n in ["mlp_c32_b1", "mlp_batched_c32_b1", "cnn_c32_b1", "cnn_batched_c32_b1",
                                       "light_ensemble_c32_b1", "light_ensemble_batched_c32_b1",
                                       "mlp_c4_b64", "cnn_c4_b32", "echo_c1_b1", "floor_c32_b1", "floor_c1_b1"]}

    print("### Concurrency 32, batch-1 requests")
    print()
    print("CPU per request: router = the ensemble-server process (gRPC, decode, batcher, channel, encode) and")
    print("hosts = both model-host processes, their user + system time over the whole step divided by the calls")
    print("made (warm-up included); client = ensemble-loadgen's own CPU per call over its measured windows.")
    print()
    print("| model | req/s | p50 µs | p99 µs | avg batch | router µs/req | hosts µs/req | client µs/req |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    labels = {"mlp_c32_b1": "mlp (batching off)", "mlp_batched_c32_b1": "mlp_batched",
              "cnn_c32_b1": "cnn (batching off)", "cnn_batched_c32_b1": "cnn_batched",
              "light_ensemble_c32_b1": "light_ensemble: 3 x mlp (batching off)",
              "light_ensemble_batched_c32_b1": "light_ensemble_batched (each member batched)",
              "floor_c32_b1": "gRPC floor (bench-grpc-floor: no router, no host)"}
    for name, label in labels.items():
        s = steps[name]
        # An ensemble's own statistics count whole requests; its members batch.
        batch = s["server"].get("avg_batch") if s.get("server") and "ensemble" not in name else None
        hosts = f"{s['hosts_us_per_req']:.0f}" if not name.startswith("floor") else "-"
        print(f"| {label} | {s['throughput_rps']:,.0f} | {s['latency_us']['p50']:,.0f} | {s['latency_us']['p99']:,.0f} "
              f"| {'-' if batch is None else f'{batch:.1f}'} | {s['server_us_per_req']:.0f} | {hosts} "
              f"| {s['client_us_per_req']:.0f} |")
    print()
    print("Large requests, concurrency 4 (the server at its best; rows/s against the in-process limit below):")
    print()
    print("| model | rows per request | req/s | rows/s | p99 µs | router µs/req | hosts µs/req | client µs/req |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in ["mlp_c4_b64", "cnn_c4_b32"]:
        s = steps[name]
        print(f"| {name.split('_')[0]} | {s['rows_per_call']} | {s['throughput_rps']:,.0f} | {s['rows_per_s']:,.0f} "
              f"| {s['latency_us']['p99']:,.0f} | {s['server_us_per_req']:,.0f} | {s['hosts_us_per_req']:,.0f} "
              f"| {s['client_us_per_req']:.0f} |")
    print()

    floor = steps["floor_c32_b1"]
    print("### Against the targets")
    print()
    for m in ["mlp", "cnn"]:
        on, off = steps[f"{m}_batched_c32_b1"], steps[f"{m}_c32_b1"]
        ratio = on["throughput_rps"] / off["throughput_rps"]
        p99_ratio = on["latency_us"]["p99"] / off["latency_us"]["p99"]
        by_batch, best = inprocess(out, m)
        limit = by_batch[best]
        big = steps["mlp_c4_b64" if m == "mlp" else "cnn_c4_b32"]
        srv = on["server"]
        if m == "mlp":
            print(f"- Light member (mlp), batching on vs off: **{ratio:.2f}x** the throughput at {p99_ratio:.2f}x "
                  f"the p99 (target at least 3x at equal or lower p99): {verdict(ratio >= 3 and p99_ratio <= 1)}. "
                  f"The gRPC floor alone, with no router and no model, answers "
                  f"{floor['throughput_rps'] / off['throughput_rps']:.2f}x the batching-off throughput: the most any "
                  f"batching could give here.")
        else:
            batch_compute = srv["compute_infer_us"] or 0
            bound = off["latency_us"]["p99"] + DELAY_US + batch_compute
            print(f"- Compute-heavy member (cnn), batching on vs off: **{ratio:.2f}x** the throughput (target at least "
                  f"0.95x): {verdict(ratio >= 0.95)}; p99 {on['latency_us']['p99']:,.0f} µs against batching off's "
                  f"{off['latency_us']['p99']:,.0f} µs plus the queue delay ({DELAY_US} µs) plus one batch's compute "
                  f"({batch_compute:,.0f} µs) = {bound:,.0f} µs: {verdict(on['latency_us']['p99'] <= bound)}.")
        print(f"  - {m} in-process (LibTorch, two threads): {by_batch[1]:,.0f} rows/s at batch 1, best "
              f"{limit:,.0f} rows/s at batch {best}. Server with batching, from batch-1 requests: "
              f"{on['rows_per_s']:,.0f} rows/s = **{100 * on['rows_per_s'] / limit:.0f}%** (target at least 90%): "
              f"{verdict(on['rows_per_s'] >= 0.9 * limit)}; the gRPC floor's batch-1 calls are "
              f"{100 * floor['throughput_rps'] / limit:.0f}% of it. From batch-{big['rows_per_call']} requests at "
              f"concurrency 4: {big['rows_per_s']:,.0f} rows/s = **{100 * big['rows_per_s'] / limit:.0f}%** "
              f"({verdict(big['rows_per_s'] >= 0.9 * limit)}).")
        print(f"  - Server time per request with batching (ModelStatistics): {srv['success_us']:,.0f} µs, of which "
              f"{srv['queue_us']:,.0f} µs in the batcher's queue and {srv['compute_infer_us']:,.0f} µs of host compute "
              f"(batches of {srv['avg_batch']:.1f}); the rest ({srv['success_us'] - srv['queue_us'] - srv['compute_infer_us']:,.0f} µs) "
              f"is the channel to the host and back and the router's own work, waiting for a core.")
        if m == "mlp":
            ens_on, ens_off = steps["light_ensemble_batched_c32_b1"], steps["light_ensemble_c32_b1"]
            ens_ratio = ens_on["throughput_rps"] / ens_off["throughput_rps"]
            ens_p99 = ens_on["latency_us"]["p99"] / ens_off["latency_us"]["p99"]
            print(f"- The same light members in an ensemble of three (each request runs all three), batching on vs "
                  f"off: **{ens_ratio:.2f}x** the throughput at {ens_p99:.2f}x the p99: "
                  f"{verdict(ens_ratio >= 3 and ens_p99 <= 1)}. In-process, one row through the three members: "
                  f"{by_batch[1] / 3:,.0f} rows/s at batch 1, {limit / 3:,.0f} at batch {best}; the "
                  f"batched ensemble reaches {100 * 3 * ens_on['rows_per_s'] / limit:.0f}% of that.")

    echo, floor1 = steps["echo_c1_b1"], steps["floor_c1_b1"]
    e_srv = echo["server"]
    overhead = echo["latency_us"]["p50"] - e_srv["compute_infer_us"]
    own = e_srv["success_us"] - e_srv["compute_infer_us"]
    print(f"- Tiny model (echo) at concurrency 1: p50 {echo['latency_us']['p50']:.0f} µs end to end, host compute "
          f"{e_srv['compute_infer_us']:.0f} µs: end to end minus compute **{overhead:.0f} µs** (target at most 100): "
          f"{verdict(overhead <= 100)}. Of that, the gRPC round trip itself (bench-grpc-floor at concurrency 1, "
          f"p50) is {floor1['latency_us']['p50']:.0f} µs; the server's own time from receiving the request to "
          f"finishing it, less compute (ModelStatistics), is **{own:.0f} µs** on average "
          f"({verdict(own <= 100)} as Triton counts its overhead, from its own statistics).")


if __name__ == "__main__":
    main(sys.argv[1])
