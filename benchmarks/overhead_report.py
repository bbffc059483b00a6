#!/usr/bin/env python3
"""The report of benchmarks/run_overhead.sh, from the files it wrote.

    overhead_report.py OUT_DIR STEPS HEADER

Reads OUT_DIR/<step>.json (ensemble-loadgen --json), OUT_DIR/<step>.cpu (CPU
ticks of the server or floor process and of the hosts during the step, and
per thread name of the server the ticks and context switches) and
OUT_DIR/inprocess_*.txt (bench-inprocess); prints Markdown: one table per
step of STEPS (e.g. "1,2,3,4"), each target with its ratio and PASS/MISS.
"""
import json
import os
import re
import sys

TARGETS = {
    "echo_over_floor_us": 8,      # router core-µs per echo request minus the gRPC floor's
    "router_per_member_us": 3,    # router core-µs per extra member call
    "host_per_member_us": 4,      # host core-µs per extra member call beyond the forward
    "share_b64": 0.92,            # demo_ensemble at batch 64, share of its placement's limit
    "vs_python_c64": 20,          # light ensemble with member batching vs the seed way, concurrency 64
    "mlp_p50_over_floor": 1.3,    # batch-1 p50 of mlp over the gRPC floor's
}


def n(x, digits=0):
    return "-" if x is None else f"{x:,.{digits}f}"


# The router's threads by who runs them: the front end's (gRPC's: its
# callback "nexting" threads poll the sockets and run the handlers, then the
# executor, timers and resolver; the HTTP front end's es-http), ours that
# take the hosts' completions and answer (es-done-HOST), and the rest (main
# thread, metrics, supervisors).
FRONT_END_THREADS = ("nexting_thread", "default-executo", "grpc_global_tim", "resolver-execut", "event_engine",
                     "timer_manager", "es-http")


def thread_split(threads, tick_hz, calls):
    """Core-µs per call of the front end's threads and of the completion threads, and context switches per call."""
    def us(pick):
        return 1e6 * sum(t["ticks"] for t in threads if pick(t["name"])) / tick_hz / calls
    switches = sum(t["voluntary"] + t["involuntary"] for t in threads) / calls
    return us(lambda name: name in FRONT_END_THREADS), us(lambda name: name.startswith("es-done-")), switches


def verdict(ok):
    return "**PASS**" if ok else "**MISS**"


class Steps:
    def __init__(self, out):
        self.out = out

    def has(self, name):
        return os.path.exists(f"{self.out}/{name}.json")

    def get(self, name):
        run = json.load(open(f"{self.out}/{name}.json"))
        s = dict(run["steps"][0])
        cpu_path = f"{self.out}/{name}.cpu"
        if os.path.exists(cpu_path):
            cpu = json.load(open(cpu_path))
            calls = max(1, run["totals"]["client_ok"])  # every call of the step, warm-up included, as the ticks
            s["server_us"] = 1e6 * cpu["server_ticks"] / cpu["tick_hz"] / calls
            s["hosts_us"] = 1e6 * cpu["host_ticks"] / cpu["tick_hz"] / calls
            if "server_threads" in cpu:
                s["front_us"], s["done_us"], s["switches"] = thread_split(cpu["server_threads"], cpu["tick_hz"], calls)
        s["p50"] = s["latency_us"]["p50"]
        s["p99"] = s["latency_us"]["p99"]
        return s


def inprocess(out, model):
    text = open(f"{out}/inprocess_{model}.txt").read()
    return {int(b): float(r) for b, r in re.findall(r"^\s+(\d+)\s+(\d+)\s*$", text, re.M)}


def slope(xs, ys):
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def router_table(st):
    print("## 1. Router core-µs per request\n")
    print("User + system CPU of the router process (or the floor server) over the step, divided by the calls "
          "made; hosts the same for both model hosts. Batch 1. The floors answer without decoding, queueing "
          "or hosts: `bench-grpc-floor` (the same gRPC service) and `bench-http-floor` (an empty Beast server).\n")
    print("Of the router's CPU, what the front end's threads (gRPC's, or for HTTP `es-http`) and the completion "
          "threads (`es-done-HOST`: they take the hosts' completions and answer) used, and the context switches "
          "per request of the router and of the floor (voluntary and involuntary, every thread).\n")
    print("| request | concurrency | req/s | p50 µs | p99 µs | router µs/req | floor µs/req | router - floor | "
          "hosts µs/req | front-end threads | es-done threads | switches/req | floor switches/req |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows = [("echo, gRPC", "es_echo", "floor_echo"), ("mlp, gRPC", "es_mlp", "floor_mlp"),
            ("demo_ensemble, gRPC", "es_demo", "floor_mlp"), ("echo, HTTP", "http_echo", "http_floor_echo")]
    over = {}
    for label, name, floor in rows:
        for c in (1, 16):
            s, f = st.get(f"{name}_c{c}"), st.get(f"{floor}_c{c}")
            over[(name, c)] = s["server_us"] - f["server_us"]
            print(f"| {label} | {c} | {n(s['throughput_rps'])} | {n(s['p50'])} | {n(s['p99'])} | "
                  f"{n(s['server_us'], 1)} | {n(f['server_us'], 1)} | {n(over[(name, c)], 1)} | "
                  f"{n(s['hosts_us'], 1)} | {n(s.get('front_us'), 1)} | {n(s.get('done_us'), 1)} | "
                  f"{n(s.get('switches'), 2)} | {n(f.get('switches'), 2)} |")
    print()
    for c in (1, 16):
        x = over[("es_echo", c)]
        print(f"- Router core-µs per echo request over the gRPC floor's, concurrency {c}: **{x:.1f}** "
              f"(target at most {TARGETS['echo_over_floor_us']}): {verdict(x <= TARGETS['echo_over_floor_us'])}.")
    for c in (1, 16):
        if not st.has(f"handoff_echo_c{c}"):
            continue
        h, es = st.get(f"handoff_echo_c{c}"), st.get(f"es_echo_c{c}")
        print(f"- The gRPC floor with one hand-off (`--answer-from-thread`: each answer finished by a thread of "
              f"its own, as the router's are), echo at concurrency {c}: {h['server_us']:.1f} core-µs and "
              f"{n(h.get('switches'), 2)} context switches per request, p50 {n(h['p50'])} µs; the router over it: "
              f"**{es['server_us'] - h['server_us']:.1f}** core-µs.")
    for c in (1, 16):
        if not st.has(f"async_echo_c{c}") or not st.has(f"async_handoff_echo_c{c}"):
            continue
        a, ah = st.get(f"async_echo_c{c}"), st.get(f"async_handoff_echo_c{c}")
        print(f"- The gRPC floor with ModelInfer on the asynchronous completion-queue API (`--async`), echo at "
              f"concurrency {c}: {a['server_us']:.1f} core-µs and {n(a.get('switches'), 2)} context switches per "
              f"request answered by the thread that took the call, {ah['server_us']:.1f} and "
              f"{n(ah.get('switches'), 2)} with one hand-off (`--async --answer-from-thread`, finished calls "
              f"collected by the answering thread: no gRPC thread woken for them).")
    for c in (1, 16):
        print(f"- HTTP: router core-µs per echo request over the empty Beast server's, concurrency {c}: "
              f"**{over[('http_echo', c)]:.1f}**.")
    mlp, floor = st.get("es_mlp_c1"), st.get("floor_mlp_c1")
    r = mlp["p50"] / floor["p50"]
    print(f"- Batch-1 p50 of mlp at concurrency 1 over the gRPC floor's: {n(mlp['p50'])} / {n(floor['p50'])} µs "
          f"= **{r:.2f}x** (target at most {TARGETS['mlp_p50_over_floor']}x): "
          f"{verdict(r <= TARGETS['mlp_p50_over_floor'])}.")
    print()


def member_table(st, out):
    print("## 2. Cost per extra member\n")
    forward_us = 1e6 / inprocess(out, "tiny")[1]
    print("`tiny_ensemble_N`: the mean of N one-Linear members (64 -> 10, softmax), spread over the two hosts, "
          f"batch 1. The member's own forward in-process (`bench-inprocess`, one worker, one thread, batch 1): "
          f"{forward_us:.1f} µs.\n")
    print("| members | concurrency | req/s | p50 µs | p99 µs | router µs/req | hosts µs/req | gRPC threads | "
          "es-done threads | switches/req |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    members = [1, 2, 4, 8, 16]
    by = {(m, c): st.get(f"tiny{m}_c{c}") for m in members for c in (1, 16)}
    for m in members:
        for c in (1, 16):
            s = by[(m, c)]
            print(f"| {m} | {c} | {n(s['throughput_rps'])} | {n(s['p50'])} | {n(s['p99'])} | "
                  f"{n(s['server_us'], 1)} | {n(s['hosts_us'], 1)} | {n(s.get('front_us'), 1)} | "
                  f"{n(s.get('done_us'), 1)} | {n(s.get('switches'), 2)} |")
    print()
    for c in (1, 16):
        router = slope(members, [by[(m, c)]["server_us"] for m in members])
        hosts = slope(members, [by[(m, c)]["hosts_us"] for m in members])
        beyond = hosts - forward_us
        rate = by[(16, c)]["throughput_rps"] / by[(1, c)]["throughput_rps"]
        print(f"- Concurrency {c}: slope per extra member call (least squares over N): router **{router:.1f}** "
              f"core-µs (target at most {TARGETS['router_per_member_us']}): "
              f"{verdict(router <= TARGETS['router_per_member_us'])}; hosts {hosts:.1f}, that is "
              f"**{beyond:.1f}** beyond the forward (target at most {TARGETS['host_per_member_us']}): "
              f"{verdict(beyond <= TARGETS['host_per_member_us'])}. 16 members serve at {rate:.2f} of one "
              "member's rate.")
    print()


def placement_limits(out):
    """rows/s by batch: every member on both hosts, and as config/demo.yaml places them.

    Both hosts: two workers computing at once (each member's two-worker
    rows/s), one row through every member. The demo's placement: each host
    runs its own members at the speed of one worker alone on its core (the
    host whose members take longest per row sets the pace). The lone worker
    is the faster figure (with two at once the cores share caches, memory
    bandwidth and, on some machines, one physical core), so the placement's
    share is a lower bound.
    """
    rates = {m: inprocess(out, m) for m in ("mlp", "wide_mlp", "cnn")}
    alone = {m: inprocess(out, f"alone_{m}") for m in ("mlp", "wide_mlp", "cnn")}
    both, placed = {}, {}
    for b in rates["mlp"]:
        both[b] = 1 / sum(1 / rates[m][b] for m in rates)
        placed[b] = min(1 / sum(1 / alone[m][b] for m in ("mlp", "wide_mlp")), alone["cnn"][b])
    return both, placed


def share_table(st, out):
    print("## 3. Share of the compute limit\n")
    both, placed = placement_limits(out)
    print("The limit: `bench-inprocess` (two workers, each pinned to a core with one intra-op and one BLAS "
          "thread, as the hosts) per member and batch; an ensemble's limit is one row through every member: "
          "with every member on both hosts 1 / sum(1 / member rows/s), two workers computing at once; as "
          "config/demo.yaml places them (mlp and wide_mlp share cpu0, cnn alone on cpu1) the slower host's, "
          "each host at the speed of one worker alone on its core (the faster figure: the share is a lower "
          "bound).\n")
    print("| ensemble | batch | concurrency | rows/s | p50 µs | limit rows/s | share | router µs/row |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    shares = {}
    for model, limit in (("demo_ensemble", placed), ("demo_ensemble_both", both)):
        for b in (1, 16, 64):
            s = st.get(f"{model}_b{b}")
            shares[(model, b)] = s["rows_per_s"] / limit[b]
            print(f"| {model} | {b} | {s['concurrency']} | {n(s['rows_per_s'])} | {n(s['p50'])} | {n(limit[b])} | "
                  f"{100 * shares[(model, b)]:.1f}% | {n(s['server_us'] / b, 2)} |")
    print()
    for model in ("demo_ensemble", "demo_ensemble_both"):
        x = shares[(model, 64)]
        print(f"- {model} at batch 64: **{100 * x:.1f}%** of its placement's limit (target at least "
              f"{100 * TARGETS['share_b64']:.0f}%): {verdict(x >= TARGETS['share_b64'])}.")
    print()


def python_table(st):
    print("## 4. Against the seed way\n")
    print("`light_ensemble` (three MLPs 784-256-10, every member on both hosts) and `light_ensemble_batched` "
          "(the same with the router's dynamic batching, `max_queue_delay_us: 0`) against "
          "`benchmarks/python_baseline/server.py` (grpcio, one torch.multiprocessing worker per member), batch 1.\n")
    print("| concurrency | ensemble-server req/s | p99 µs | + member batching req/s | p99 µs | Python req/s | "
          "p99 µs | ratios |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    ratio64 = 0
    for c in (1, 16, 64):
        a, b, p = st.get(f"light_c{c}"), st.get(f"light_batched_c{c}"), st.get(f"python_c{c}")
        ra, rb = a["throughput_rps"] / p["throughput_rps"], b["throughput_rps"] / p["throughput_rps"]
        if c == 64:
            ratio64 = rb
        print(f"| {c} | {n(a['throughput_rps'])} | {n(a['p99'])} | {n(b['throughput_rps'])} | {n(b['p99'])} | "
              f"{n(p['throughput_rps'])} | {n(p['p99'])} | {ra:.1f}x / {rb:.1f}x |")
    print()
    print(f"- Member batching at concurrency 64: **{ratio64:.1f}x** the seed way (target at least "
          f"{TARGETS['vs_python_c64']}x): {verdict(ratio64 >= TARGETS['vs_python_c64'])}.")
    print()


def main(out, steps, header):
    st = Steps(out)
    wanted = set(steps.split(","))
    print("# benchmarks/run_overhead.sh: the server's own cost\n")
    print(header + "\n")
    if "1" in wanted:
        router_table(st)
    if "2" in wanted:
        member_table(st, out)
    if "3" in wanted:
        share_table(st, out)
    if "4" in wanted:
        python_table(st)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        sys.exit(2)
    main(*sys.argv[1:])
