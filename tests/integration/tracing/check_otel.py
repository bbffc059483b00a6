#!/usr/bin/python3
"""ctest `python_otel`: request traces exported as OpenTelemetry spans.

    check_otel.py --server-bin BIN --make-demo BIN --stubs DIR --node NODE

Runs tests/integration/tracing/otlp_receiver.js (the OpenTelemetry project's own
protobuf decoder, from npm) as the collector, and ensemble-server on the demo
repository with `trace: {mode: opentelemetry, url: ..., level: TIMESTAMPS,
rate: 1}`. Sends demo_ensemble requests over gRPC (with a W3C traceparent and
tracestate in the metadata) and HTTP (traceparent header), and an mlp
request with no traceparent. Checks, on what the receiver decoded:
  - every export is application/x-protobuf and decodes;
  - a client's trace continues: the request's root span carries the client's
    trace id, its parent is the client's span, its tracestate is passed on;
    without a traceparent the trace id is new;
  - the tree: root (SERVER) -> decode, combine, encode, send and one member
    span per member; each member -> queue, submit, host <name> (CLIENT),
    read outputs; each host span -> the host's own "host queue" and "compute",
    under the host's resource (service.name ensemble-model-host, es.host,
    es.device), lying within their host span, which lies within its member
    span, which lies within the root;
  - the router's resource names the service, the machine and its pid;
  - with --log-format json, a refused request's log line carries its
    request_id.
Then, with the collector holding every export for 6 s (past the exporter's
2 s deadline), requests are answered as before (none waits for the
collector), and /metrics counts the traces dropped.
Exit 0 = pass.
"""
import argparse
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/integration: server_check
from server_check import CheckFailed, add_server_args, expect, make_demo, run_with_server  # noqa: E402

TIMEOUT_S = 30
MEMBERS = ("mlp", "wide_mlp", "cnn")
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
HTTP_TRACE = "0af7651916cd43dd8448eb211c80319c"
HTTP_SPAN = "b7ad6b7169203331"
HOLD_MS = 6000
BAD_REQUEST_ID = "bad-otel-1"

SERVER_YAML = """repository: {repo}
listen_address: 127.0.0.1
hosts:
  - {{name: cpu0, device: cpu, cpu_affinity: [0], threads: 1, executors: 1}}
  - {{name: cpu1, device: cpu, cpu_affinity: [1], threads: 1, executors: 1}}
trace: {{mode: opentelemetry, url: "http://{collector}/v1/traces", level: TIMESTAMPS, rate: 1}}
"""


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_server_args(parser)
    parser.add_argument("--node", required=True)
    return parser.parse_args()


def start_receiver(node, out, *extra):
    proc = subprocess.Popen([node, str(HERE / "otlp_receiver.js"), "--out", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    line = proc.stdout.readline().strip()
    match = re.fullmatch(r"otlp listening on (127\.0\.0\.1:\d+)", line)
    if not match:
        proc.kill()
        raise CheckFailed(f"otlp_receiver.js did not start: {line!r} {proc.stderr.read()!r}")
    return proc, match.group(1)


def read_exports(out):
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def all_spans(exports):
    """(span, resource attributes) of every export."""
    spans = []
    for export in exports:
        if "error" in export:
            raise CheckFailed(f"the receiver could not decode an export: {export['error']}")
        expect("export content type", export["content_type"], "application/x-protobuf")
        for rs in export["resource_spans"]:
            for scope in rs["scopes"]:
                spans.extend((s, rs["resource"]) for s in scope["spans"])
    return spans


def wait_for(out, done, what):
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        spans = all_spans(read_exports(out))
        if done(spans):
            return spans
        time.sleep(0.1)
    raise CheckFailed(f"no {what} within {TIMEOUT_S} s ({len(spans)} spans received)")


def within(inner, outer, what):
    if not (int(outer["start"]) <= int(inner["start"]) <= int(inner["end"]) <= int(outer["end"])):
        raise CheckFailed(f"{what}: [{inner['start']}, {inner['end']}] not within [{outer['start']}, {outer['end']}]")


def check_tree(spans, trace_id, model, members, client_span=None, trace_state="", transport="grpc"):
    """The tree of one request's trace (see the docstring); returns its root."""
    mine = [(s, r) for s, r in spans if s["trace_id"] == trace_id]
    roots = [s for s, _ in mine if s["name"] == f"infer {model}"]
    expect(f"root spans 'infer {model}' in trace {trace_id}", len(roots), 1)
    root = roots[0]
    expect("root kind (SERVER)", root["kind"], 2)
    expect("root's parent", root["parent_span_id"], client_span or "")
    expect("root's tracestate", root["trace_state"], trace_state)
    expect("root's transport", root["attributes"].get("es.transport"), transport)
    expect("root's model.name", root["attributes"].get("model.name"), model)
    children = {}
    for s, r in mine:
        children.setdefault(s["parent_span_id"], []).append((s, r))
    for s, _ in mine:
        if s is not root:
            if not any(p["span_id"] == s["parent_span_id"] for p, _ in mine):
                raise CheckFailed(f"span '{s['name']}' has a parent that is not in its trace")
    under_root = {s["name"]: s for s, _ in children.get(root["span_id"], [])}
    for name in ["decode", "encode", "send"] + (["combine"] if members else []):
        if name not in under_root:
            raise CheckFailed(f"no '{name}' span under '{root['name']}' (children: {sorted(under_root)})")
        within(under_root[name], root, name)
    calls = [under_root[f"member {m}"] for m in members if f"member {m}" in under_root] if members else [root]
    expect(f"member spans under '{root['name']}'", len(calls), len(members) if members else 1)
    for call in calls:
        if call is not root:
            within(call, root, call["name"])
        steps = {s["name"]: (s, r) for s, r in children.get(call["span_id"], [])}
        host_names = [n for n in steps if n.startswith("host ")]
        expect(f"host spans under '{call['name']}'", len(host_names), 1)
        for name in ("queue", "submit", "read outputs"):
            if name not in steps:
                raise CheckFailed(f"no '{name}' span under '{call['name']}' (children: {sorted(steps)})")
            within(steps[name][0], call, f"{call['name']} / {name}")
        host, host_resource = steps[host_names[0]]
        expect(f"{host['name']} kind (CLIENT)", host["kind"], 3)
        within(host, call, f"{call['name']} / {host['name']}")
        on_host = {s["name"]: (s, r) for s, r in children.get(host["span_id"], [])}
        for name in ("host queue", "compute"):
            if name not in on_host:
                raise CheckFailed(f"no '{name}' span under '{host['name']}' (children: {sorted(on_host)})")
            span, resource = on_host[name]
            within(span, host, f"{call['name']} / {host['name']} / {name}")
            expect(f"{name}: resource service.name", resource.get("service.name"), "ensemble-model-host")
            expect(f"{name}: resource es.host", "host " + str(resource.get("es.host")), host["name"])
            expect(f"{name}: resource es.device", resource.get("es.device"), "cpu")
    return root


def run_checks(args, work, out, server_pid):
    def checks(grpc_address, http_address, metrics_address):
        import grpc
        import numpy as np
        from proto import grpc_service_pb2 as pb
        from proto import grpc_service_pb2_grpc as pb_grpc

        image = np.random.default_rng(3).random((1, 1, 28, 28), dtype=np.float32)
        with grpc.insecure_channel(grpc_address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            for model in ("demo_ensemble", "mlp"):
                request = pb.ModelInferRequest(model_name=model)
                request.inputs.add(name="input", datatype="FP32", shape=[1, 1, 28, 28])
                request.raw_input_contents.append(image.tobytes())
                metadata = (("traceparent", f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"), ("tracestate", "vendor=abc,x=1")) \
                    if model == "demo_ensemble" else ()
                stub.ModelInfer(request, timeout=TIMEOUT_S, metadata=metadata)
        body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1, 28, 28],
                                       "data": image.ravel().tolist()}]}).encode()
        http_request = urllib.request.Request(f"http://{http_address}/v2/models/demo_ensemble/infer", data=body,
                                              headers={"Content-Type": "application/json",
                                                       "traceparent": f"00-{HTTP_TRACE}-{HTTP_SPAN}-01"})
        with urllib.request.urlopen(http_request, timeout=TIMEOUT_S) as answer:
            expect("HTTP infer status", answer.status, 200)
        # Refused (no such input): its debug log line names the request.
        with grpc.insecure_channel(grpc_address) as channel:
            bad = pb.ModelInferRequest(model_name="mlp", id=BAD_REQUEST_ID)
            bad.inputs.add(name="no_such_input", datatype="FP32", shape=[1, 1, 28, 28])
            bad.raw_input_contents.append(image.tobytes())
            try:
                pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(bad, timeout=TIMEOUT_S)
                raise CheckFailed("a request with an unknown input was answered")
            except grpc.RpcError as refused:
                expect("unknown input's code", refused.code(), grpc.StatusCode.INVALID_ARGUMENT)

        def complete(spans):
            names = [(s["trace_id"], s["name"]) for s, _ in spans]
            return ((CLIENT_TRACE, "infer demo_ensemble") in names and (HTTP_TRACE, "infer demo_ensemble") in names
                    and any(n == "infer mlp" for _, n in names))

        spans = wait_for(out, complete, "spans of the three requests")
        check_tree(spans, CLIENT_TRACE, "demo_ensemble", MEMBERS, CLIENT_SPAN, "vendor=abc,x=1")
        check_tree(spans, HTTP_TRACE, "demo_ensemble", MEMBERS, HTTP_SPAN, transport="http")
        mlp_traces = {s["trace_id"] for s, _ in spans if s["name"] == "infer mlp"}
        expect("traces of the mlp request", len(mlp_traces), 1)
        mlp_trace = mlp_traces.pop()
        if mlp_trace in (CLIENT_TRACE, HTTP_TRACE, "0" * 32) or len(mlp_trace) != 32:
            raise CheckFailed(f"the request without a traceparent got trace id {mlp_trace!r}")
        check_tree(spans, mlp_trace, "mlp", ())
        routers = {json.dumps(r, sort_keys=True) for s, r in spans if s["name"].startswith("infer ")}
        expect("router resources", len(routers), 1)
        router = json.loads(routers.pop())
        expect("router service.name", router.get("service.name"), "ensemble-server")
        expect("router process.pid", router.get("process.pid"), str(server_pid()))
        if not router.get("host.name"):
            raise CheckFailed("the router's resource has no host.name")
        print(f"PASS: {len(spans)} spans; client trace continued over gRPC and HTTP; tree, resources and host "
              "times as expected")
    return checks


def check_log_names_request(log_path):
    """With --log-format json, the refused request's line carries its request_id."""
    lines = []
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            raise CheckFailed(f"a log line is not JSON with --log-format json: {line!r}")
    named = [j for j in lines if j.get("request_id") == BAD_REQUEST_ID]
    if not named or "refused" not in named[0].get("message", ""):
        raise CheckFailed(f"no json log line with request_id {BAD_REQUEST_ID!r} saying it was refused "
                          f"({len(lines)} lines)")
    print(f"PASS: the refused request's log line: {named[0]['message'][:80]!r} with its request_id")


def dropped_total(metrics_address):
    with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=TIMEOUT_S) as answer:
        text = answer.read().decode()
    match = re.search(r"^ensemble_traces_dropped_total(?:\{\})? (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


def slow_collector_checks(args):
    def checks(grpc_address, http_address, metrics_address):
        import grpc
        import numpy as np
        from proto import grpc_service_pb2 as pb
        from proto import grpc_service_pb2_grpc as pb_grpc

        image = np.zeros((1, 1, 28, 28), dtype=np.float32)
        with grpc.insecure_channel(grpc_address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            request = pb.ModelInferRequest(model_name="demo_ensemble")
            request.inputs.add(name="input", datatype="FP32", shape=[1, 1, 28, 28])
            request.raw_input_contents.append(image.tobytes())
            # The first answer's trace goes out and the collector holds it;
            # what follows is answered meanwhile: no request waits for it.
            stub.ModelInfer(request, timeout=TIMEOUT_S)
            start = time.monotonic()
            for _ in range(200):
                stub.ModelInfer(request, timeout=TIMEOUT_S)
            took = time.monotonic() - start
            if took >= HOLD_MS / 1000:
                raise CheckFailed(f"200 requests took {took:.1f} s while the collector held an export "
                                  f"{HOLD_MS} ms: they waited for it")
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and not (dropped_total(metrics_address) or 0) > 0:
            time.sleep(0.2)
        dropped = dropped_total(metrics_address)
        if not dropped:
            raise CheckFailed(f"ensemble_traces_dropped_total is {dropped} after exports past their deadline")
        print(f"PASS: 200 requests answered in {took:.2f} s while the collector held exports; "
              f"{dropped:.0f} traces counted as dropped")
    return checks


def main():
    args = parse_args()
    sys.path[:0] = [args.stubs]
    with tempfile.TemporaryDirectory(prefix="es_otel.") as work:
        work = pathlib.Path(work)
        repo = work / "repo"
        receivers = []
        try:
            for phase, extra in (("spans", ()), ("slow collector", ("--delay-ms", str(HOLD_MS)))):
                out = work / f"exports-{len(receivers)}.jsonl"
                receiver, collector = start_receiver(args.node, out, *extra)
                receivers.append(receiver)
                server = {}

                def setup(collector=collector):
                    if not repo.exists():
                        make_demo(args.make_demo, repo)
                    (work / "server.yaml").write_text(SERVER_YAML.format(repo=repo, collector=collector))

                checks = run_checks(args, work, out, lambda server=server: server["process"].pid) \
                    if phase == "spans" else slow_collector_checks(args)
                log_args = ("--log-format", "json", "--log-level", "debug") if phase == "spans" else ()
                rc = run_with_server(args.server_bin, work, setup, checks, log_args, ("grpc", "http", "metrics"),
                                     on_start=lambda proc, server=server: server.update(process=proc),
                                     after_stop=(lambda: check_log_names_request(work / "server.log"))
                                     if phase == "spans" else None)
                if rc != 0:
                    return rc
        finally:
            for receiver in receivers:
                os.killpg(receiver.pid, signal.SIGKILL)
                receiver.wait()
    print("PASS: OpenTelemetry export")
    return 0


if __name__ == "__main__":
    sys.exit(main())
