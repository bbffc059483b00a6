#!/usr/bin/python3
"""Rollouts under load: new versions of every demo member while
ensemble-loadgen keeps the demo ensemble busy.

    rollout.py --bin build/bin --stubs build/python [--rounds 5] [--concurrency 16] [--out DIR]

Two phases, each on a fresh demo repository and server:
  poll      the server rescans every second; each round renames a new version
            folder of every member into place (new weights: the demo built
            with another seed) and waits until each member answers as it;
  explicit  --model-control-mode explicit --load-model demo_ensemble; each
            round adds the folders, then RepositoryModelLoad per member.
Meanwhile ensemble-loadgen runs closed-loop at --concurrency on demo_ensemble
(a soak: every window kept). Prints, per phase, the requests, the errors by
code, and the version each member answers as; writes the same into
DIR/rollout-<date>.md. Exit 0 when no request failed and every member reached
its last version, 1 otherwise, 2 when something is missing.
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import grpc

MEMBERS = ["mlp", "wide_mlp", "cnn"]


def start_server(bin_dir, work, repo, mode_args):
    config = os.path.join(work, "server.yaml")
    with open(config, "w") as f:
        f.write(f"repository: {repo}\nlisten_address: 127.0.0.1\nhosts:\n"
                "  - {name: cpu0, device: cpu, cpu_affinity: [0], threads: 1}\n"
                "  - {name: cpu1, device: cpu, cpu_affinity: [1], threads: 1}\n")
    log = open(os.path.join(work, "server.log"), "a")
    proc = subprocess.Popen([os.path.join(bin_dir, "ensemble-server"), "--config", config, "--grpc-port", "0",
                             "--no-metrics", "--http-port", "0"] + mode_args, stdout=subprocess.PIPE, stderr=log, text=True,
                            start_new_session=True)
    line = proc.stdout.readline()
    if not line.startswith("grpc listening on "):
        raise RuntimeError(f"the server did not start ({line!r}); see {work}/server.log")
    return proc, line.split()[-1]


def stop_server(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


def member_version(pb, stub, model):
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="input", datatype="FP32", shape=[1, 1, 28, 28])
    request.raw_input_contents.append(bytes(4 * 784))
    return stub.ModelInfer(request, timeout=10).model_version


def phase(args, pb, pb_grpc, name, mode_args, load_rpc):
    work = tempfile.mkdtemp(prefix=f"es_rollout_{name}_")
    repo = os.path.join(work, "repo")
    make_demo = os.path.join(args.bin, "ensemble-make-demo")
    subprocess.run([make_demo, "--out", repo, "--seed", "1"], check=True, capture_output=True)
    server, address = start_server(args.bin, work, repo, mode_args)
    stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(address))
    report = os.path.join(work, "loadgen.json")
    soak_s = args.rounds * 6 + 4
    loadgen = subprocess.Popen([os.path.join(args.bin, "ensemble-loadgen"), "--server", address, "--model",
                                "demo_ensemble", "--concurrency", str(args.concurrency), "--soak-s", str(soak_s),
                                "--warmup-s", "0.5", "--duration-s", "1", "--ceiling-model", "none", "--json", report,
                                "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(2)
    switches = []
    for round_no in range(1, args.rounds + 1):
        version = round_no + 1
        fresh = os.path.join(work, f"seed{version}")
        subprocess.run([make_demo, "--out", fresh, "--seed", str(100 * version)], check=True, capture_output=True)
        for member in MEMBERS:
            staged = os.path.join(repo, ".stage", member)
            os.makedirs(staged, exist_ok=True)
            shutil.copy(os.path.join(fresh, member, "1", "model.pt"), os.path.join(staged, "model.pt"))
            os.rename(staged, os.path.join(repo, member, str(version)))  # one rename: all of it or nothing
        started = time.monotonic()
        if load_rpc:
            for member in MEMBERS:
                stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name=member), timeout=120)
        answered = {}
        while time.monotonic() - started < 30:
            answered = {m: member_version(pb, stub, m) for m in MEMBERS}
            if set(answered.values()) == {str(version)}:
                break
            time.sleep(0.1)
        switches.append((version, time.monotonic() - started, answered))
        time.sleep(max(0.0, 5 - (time.monotonic() - started)))
    _, err = loadgen.communicate(timeout=soak_s + 120)
    with open(report) as f:
        totals = json.load(f)["totals"]
    code = stop_server(server)
    shutil.rmtree(work, ignore_errors=True)
    return {"phase": name, "totals": totals, "switches": switches, "server_exit": code, "loadgen_rc": loadgen.returncode,
            "loadgen_stderr": err.strip()[-400:]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default="build/bin")
    parser.add_argument("--stubs", default="build/python")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--out", default="build/benchmarks")
    args = parser.parse_args()
    for b in ("ensemble-server", "ensemble-model-host", "ensemble-make-demo", "ensemble-loadgen"):
        if not os.access(os.path.join(args.bin, b), os.X_OK):
            print(f"rollout.py: {args.bin}/{b} is missing: build it first (scripts/build.sh)", file=sys.stderr)
            return 2
    sys.path.insert(0, args.stubs)
    from proto import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc  # noqa: E402

    results = [phase(args, pb, pb_grpc, "poll", ["--model-control-mode", "poll", "--repository-poll-secs", "1"], False),
               phase(args, pb, pb_grpc, "explicit",
                     ["--model-control-mode", "explicit", "--load-model", "demo_ensemble"], True)]
    lines = [f"# Rollouts under load ({datetime.datetime.now().isoformat(timespec='seconds')})", "",
             f"`{' '.join(sys.argv)}`; demo_ensemble at concurrency {args.concurrency}, {args.rounds} new versions "
             f"of each of {', '.join(MEMBERS)}", ""]
    ok = True
    for r in results:
        t = r["totals"]
        failed = t.get("client_failed", 0) + t.get("client_hung", 0) + t.get("client_unanswered", 0)
        last = str(args.rounds + 1)
        reached = all(set(s[2].values()) == {last} for s in r["switches"][-1:])
        ok = ok and failed == 0 and reached and r["server_exit"] == 0
        lines.append(f"- {r['phase']}: {t.get('client_sent', 0)} requests sent, {t.get('client_ok', 0)} OK, "
                     f"{failed} failed (errors {t.get('client_errors', {})}, hung {t.get('client_hung', 0)}, "
                     f"unanswered {t.get('client_unanswered', 0)}); server exit {r['server_exit']}")
        for version, seconds, answered in r["switches"]:
            lines.append(f"  - version {version}: every member answered as it after {seconds:.1f} s ({answered})")
        if r["loadgen_rc"] != 0:
            lines.append(f"  - loadgen exited {r['loadgen_rc']}: {r['loadgen_stderr']}")
    lines.append("")
    lines.append("PASS" if ok else "FAIL")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"rollout-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}.md")
    with open(path, "w") as f:
        f.write(text)
    print(f"written to {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
