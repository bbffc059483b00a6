#!/usr/bin/python3
"""ctest `http_rest`: the HTTP/REST (KServe v2) front end of a real ensemble-server.

    check_http.py --server-bin BIN --make-demo BIN --stubs DIR

Writes the demo repository into a temp dir and starts ensemble-server with
--http-port 0 and small HTTP limits in its config (3 s request timeout, 6 s
idle timeout, 8 KiB of headers, 64 connections), then checks, with curl
and Python's http.client / raw sockets against the printed address:
  - every route with curl: health, server and model metadata, model ready,
    config and statistics (against the gRPC answers), repository index,
    load/unload refused outside explicit mode, shared-memory status, unknown
    route 404, wrong method 405, a percent-encoded model name;
  - JSON and binary-tensor inference (inputs and outputs) for mlp and the
    ensemble, compared with gRPC ModelInfer answers (python3-grpcio);
  - bad bodies (invalid JSON, wrong element types, wrong counts, unknown
    input, wrong datatype, unknown model) answered 400/404 with messages that
    name what was wrong; gzip and deflate bodies (415 for other encodings);
  - one keep-alive connection serving hundreds of requests (same local port);
  - a slow-loris client (headers, and a body, dribbled) and bodies over the
    limit (413, also chunked, and a gzip body inflating past it) and headers over the limit (431) cut off while
    another client keeps being served; an idle keep-alive connection closed
    after the idle timeout; connections past the cap closed;
  - system shared memory over HTTP: register, status, an inference whose
    input and output are in regions, unregister;
  - a second server with TLS (certificates made here with openssl, clients
    must present one: mTLS), bearer tokens (infer and admin roles) and
    explicit model control: 401 without or with a wrong token, 403 for an
    infer token on admin routes, open health probes, unload and load; its
    --http-request-timeout-secs 2 overriding the config's 60 s (a client
    that never starts the handshake is cut after 2 s);
  - SIGTERM under HTTP load with an idle keep-alive connection open: calls in
    flight answered 200, later ones 503 "shutting down", exit 0.
Everything it writes is removed at the end. Exit 0 = pass.
"""
import argparse
import http.client
import json
import os
import pathlib
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

TIMEOUT_S = 30
STARTUP_S = 120
MAX_REQUEST_BYTES = 1 << 20
# The first server's HTTP limits (its config's limits), all below the defaults
# so that each check fails if the config did not reach the HTTP server.
REQUEST_TIMEOUT_S = 3      # http_request_timeout_ms (default 30 s)
IDLE_TIMEOUT_S = 6         # http_idle_timeout_ms (default 60 s)
MAX_HEADER_BYTES = 8192    # http_max_header_bytes (default 16 KiB)
MAX_CONNECTIONS = 64       # http_max_connections (default 512)
HTTP_LIMITS = (f", http_request_timeout_ms: {REQUEST_TIMEOUT_S * 1000}, http_idle_timeout_ms: {IDLE_TIMEOUT_S * 1000}"
               f", http_max_header_bytes: {MAX_HEADER_BYTES}, http_max_connections: {MAX_CONNECTIONS}")

SERVER_YAML = """repository: {repo}
listen_address: 127.0.0.1
hosts:
{hosts}
limits: {{max_request_bytes: {max_bytes}, heartbeat_timeout_ms: 5000, drain_timeout_ms: 5000{http_limits}}}
{extra}"""
TWO_HOSTS = """  - {name: cpu0, device: cpu, cpu_affinity: [0], threads: 1, executors: 1}
  - {name: cpu1, device: cpu, cpu_affinity: [1], threads: 1, executors: 1}"""
ONE_HOST = "  - {name: cpu0, device: cpu, cpu_affinity: [0], threads: 1, executors: 1}"


class CheckFailed(Exception):
    pass


def expect(what, got, want):
    if got != want:
        raise CheckFailed(f"{what}: got {got!r}, want {want!r}")


def check(condition, what):
    if not condition:
        raise CheckFailed(what)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server-bin", required=True)
    parser.add_argument("--make-demo", required=True)
    parser.add_argument("--stubs", required=True, help="folder holding the generated `proto` package")
    return parser.parse_args()


class Server:
    """ensemble-server in its own session; reads the grpc and http lines."""

    def __init__(self, server_bin, config, log_path, extra_args=()):
        self.log_path = log_path
        log = open(log_path, "wb")
        self.proc = subprocess.Popen([server_bin, "--config", str(config), "--grpc-port", "0", "--http-port", "0",
                                      "--no-metrics", *extra_args],
                                     stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        # Unbuffered reads: a buffered readline could swallow the second line.
        text = b""
        deadline = time.monotonic() + STARTUP_S
        while text.count(b"\n") < 2 and time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self.proc.stdout.fileno(), 4096) if ready else b""
            if not chunk:
                break
            text += chunk
        lines = [line.strip() for line in text.decode(errors="replace").splitlines()]
        grpc_match = re.fullmatch(r"grpc listening on (127\.0\.0\.1:\d+)", lines[0] if lines else "")
        http_match = re.fullmatch(r"http listening on (127\.0\.0\.1:\d+)", lines[1] if len(lines) > 1 else "")
        if not grpc_match or not http_match:
            self.kill()
            raise CheckFailed(f"want 'grpc listening on' then 'http listening on' lines, got {lines!r}; log:\n"
                              + self.log_tail())
        self.grpc = grpc_match.group(1)
        self.http = http_match.group(1)
        self.host, port = self.http.split(":")
        self.port = int(port)

    def log_tail(self):
        return "\n".join(pathlib.Path(self.log_path).read_text(errors="replace").splitlines()[-40:])

    def stop(self):
        """SIGTERM, then the exit status (SIGKILL of the group if it hangs)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()
            raise CheckFailed("ensemble-server still running 15 s after SIGTERM")

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def curl(url, method="GET", data=None, headers=(), options=()):
    """(status, headers {lower-case name: value}, body bytes) of one curl call."""
    with tempfile.TemporaryDirectory(prefix="es_curl.") as tmp:
        head, body = os.path.join(tmp, "head"), os.path.join(tmp, "body")
        cmd = ["curl", "-s", "-S", "--max-time", str(TIMEOUT_S), "-X", method, "-D", head, "-o", body,
               "-w", "%{http_code}", *options]
        for h in headers:
            cmd += ["-H", h]
        if data is not None:
            cmd += ["--data-binary", "@-"]
        run = subprocess.run(cmd + [url], input=data if isinstance(data, bytes) else (data or "").encode(),
                             capture_output=True)
        if run.returncode != 0:
            return None, {}, run.stderr
        fields = {}
        for line in pathlib.Path(head).read_text(errors="replace").splitlines()[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                fields[k.strip().lower()] = v.strip()
        return int(run.stdout.decode()), fields, pathlib.Path(body).read_bytes()


def curl_json(url, want_status, what, **kwargs):
    status, fields, body = curl(url, **kwargs)
    expect(f"{what}: HTTP status (body {body[:300]!r})", status, want_status)
    if not body:
        return None
    expect(f"{what}: content-type", fields.get("content-type"), "application/json")
    return json.loads(body)


def expect_error(url, want_status, needles, what, **kwargs):
    got = curl_json(url, want_status, what, **kwargs)
    check(isinstance(got, dict) and isinstance(got.get("error"), str), f"{what}: no {{\"error\": ...}} body: {got!r}")
    for needle in needles:
        check(needle in got["error"], f"{what}: error {got['error']!r} does not mention {needle!r}")


def image(batch, seed=0):
    """Deterministic pixels in [0, 1), `batch` images of 784."""
    return [((i * 7 + seed * 13) % 97) / 97.0 for i in range(batch * 784)]


def check_routes(server, stub, service):
    base = f"http://{server.http}"
    status, fields, body = curl(f"{base}/v2/health/live")
    expect("live status", status, 200)
    expect("live body", body, b"")
    expect("ready status", curl(f"{base}/v2/health/ready")[0], 200)
    meta = curl_json(f"{base}/v2", 200, "server metadata")
    expect("server metadata name", meta["name"], "ensemble-serve")
    for ext in ("binary_tensor_data", "model_repository", "statistics"):
        check(ext in meta["extensions"], f"server metadata extensions lack {ext}: {meta['extensions']}")

    grpc_meta = stub.ModelMetadata(service.ModelMetadataRequest(name="mlp"), timeout=TIMEOUT_S)
    for path in ("/v2/models/mlp", "/v2/models/mlp/versions/1", "/v2/models/ml%70"):
        m = curl_json(base + path, 200, f"GET {path}")
        expect(f"{path} name", m["name"], "mlp")
        expect(f"{path} versions", m["versions"], list(grpc_meta.versions))
        expect(f"{path} platform", m["platform"], grpc_meta.platform)
        expect(f"{path} inputs", m["inputs"], [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                                               for t in grpc_meta.inputs])
        expect(f"{path} outputs", [o["name"] for o in m["outputs"]], [t.name for t in grpc_meta.outputs])
    expect_error(f"{base}/v2/models/mlp/versions/9", 404, ["'9'"], "unknown version")
    expect_error(f"{base}/v2/models/no_such_model", 404, ["no_such_model"], "unknown model")
    expect("model ready", curl(f"{base}/v2/models/mlp/ready")[0], 200)
    expect("ensemble version 1 ready", curl(f"{base}/v2/models/demo_ensemble/versions/1/ready")[0], 200)
    expect_error(f"{base}/v2/models/nope/ready", 404, ["nope"], "unknown model ready")

    config = curl_json(f"{base}/v2/models/mlp/config", 200, "config")
    grpc_config = stub.ModelConfig(service.ModelConfigRequest(name="mlp"), timeout=TIMEOUT_S).config
    expect("config name", config["name"], grpc_config.name)
    expect("config max_batch_size", config["max_batch_size"], grpc_config.max_batch_size)
    expect("config platform", config["platform"], grpc_config.platform)
    expect("config input dims", config["input"][0]["dims"], list(grpc_config.input[0].dims))
    expect("config input data_type", config["input"][0]["data_type"], "TYPE_FP32")
    ens = curl_json(f"{base}/v2/models/demo_ensemble/config", 200, "ensemble config")
    expect("ensemble steps", [s["model_name"] for s in ens["ensemble_scheduling"]["step"]],
           [s.model_name for s in stub.ModelConfig(service.ModelConfigRequest(name="demo_ensemble"),
                                                   timeout=TIMEOUT_S).config.ensemble_scheduling.step])

    stats = curl_json(f"{base}/v2/models/mlp/stats", 200, "stats")
    grpc_stats = stub.ModelStatistics(service.ModelStatisticsRequest(name="mlp"), timeout=TIMEOUT_S)
    expect("stats names", [(s["name"], s["version"]) for s in stats["model_stats"]],
           [(s.name, s.version) for s in grpc_stats.model_stats])
    check(isinstance(stats["model_stats"][0]["inference_count"], int), "inference_count is not a JSON integer")
    durations = stats["model_stats"][0]["inference_stats"]
    for key in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit",
                "cache_miss"):
        check(isinstance(durations.get(key, {}).get("count"), int) and isinstance(durations[key].get("ns"), int),
              f"stats inference_stats.{key} lacks count/ns (Triton always sends them): {durations}")
    expect("stats inference_count", stats["model_stats"][0]["inference_count"],
           grpc_stats.model_stats[0].inference_count)
    expect("versioned stats", [s["version"] for s in
                               curl_json(f"{base}/v2/models/mlp/versions/1/stats", 200, "v1 stats")["model_stats"]],
           ["1"])
    everything = curl_json(f"{base}/v2/models/stats", 200, "all stats")
    expect("all stats models", sorted({s["name"] for s in everything["model_stats"]}),
           ["cnn", "demo_ensemble", "mlp", "wide_mlp"])

    index = curl_json(f"{base}/v2/repository/index", 200, "index", method="POST")
    expect("index", sorted((m["name"], m["version"], m["state"]) for m in index),
           sorted((m.name, m.version, m.state) for m in
                  stub.RepositoryIndex(service.RepositoryIndexRequest(), timeout=TIMEOUT_S).models))
    ready_index = curl_json(f"{base}/v2/repository/index", 200, "ready index", method="POST", data='{"ready": true}')
    check(all(m["state"] == "READY" for m in ready_index) and len(ready_index) == 4,
          f"ready index: {ready_index}")
    expect_error(f"{base}/v2/repository/index", 400, ["ready"], "index with a bad body", method="POST",
                 data='{"ready": 1}')
    expect_error(f"{base}/v2/repository/models/mlp/load", 503, ["explicit"], "load in mode none", method="POST")
    expect_error(f"{base}/v2/repository/models/mlp/unload", 503, ["explicit"], "unload in mode none",
                 method="POST", data='{"parameters": {"unload_dependents": true}}')
    expect("shm status (none registered)", curl_json(f"{base}/v2/systemsharedmemory/status", 200, "shm status"), [])

    expect_error(f"{base}/v2/no/such/route", 404, ["no route"], "unknown route")
    expect_error(f"{base}/metrics", 404, ["no route"], "unknown route outside /v2")
    status, fields, body = curl(f"{base}/v2/models/mlp/infer")
    expect("GET on infer", status, 405)
    expect("405 Allow", fields.get("allow"), "POST")
    status, fields, body = curl(f"{base}/v2/health/ready", method="POST")
    expect("POST on ready", status, 405)
    expect("405 Allow on ready", fields.get("allow"), "GET")
    print("routes: checked with curl against the gRPC answers")


def http_post(conn, path, body, headers=None):
    conn.request("POST", path, body=body, headers=headers or {})
    response = conn.getresponse()
    return response.status, dict((k.lower(), v) for k, v in response.getheaders()), response.read()


def grpc_infer(stub, service, model, pixels, batch, params=None):
    request = service.ModelInferRequest(model_name=model, id="g")
    tensor = request.inputs.add()
    tensor.name = "input"
    tensor.datatype = "FP32"
    tensor.shape.extend([batch, 1, 28, 28])
    request.raw_input_contents.append(struct.pack(f"<{len(pixels)}f", *pixels))
    for key, value in (params or {}).items():
        request.parameters[key].bool_param = value
    response = stub.ModelInfer(request, timeout=TIMEOUT_S)
    return {o.name: (list(o.shape), raw) for o, raw in zip(response.outputs, response.raw_output_contents)}


def floats(raw):
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def check_infer(server, stub, service):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=TIMEOUT_S)
    for model, batch, params in (("mlp", 1, {}), ("mlp", 3, {}), ("demo_ensemble", 2, {"return_uncertainty": True})):
        pixels = image(batch, seed=batch)
        want = grpc_infer(stub, service, model, pixels, batch, params)
        # JSON in, JSON out; nested rows.
        rows = [pixels[i * 784:(i + 1) * 784] for i in range(batch)]
        body = json.dumps({"id": "h1", "parameters": params,
                           "inputs": [{"name": "input", "datatype": "FP32", "shape": [batch, 1, 28, 28],
                                       "data": rows}]})
        status, fields, raw = http_post(conn, f"/v2/models/{model}/infer", body)
        expect(f"{model} JSON infer status ({raw[:200]!r})", status, 200)
        got = json.loads(raw)
        expect(f"{model} id", got["id"], "h1")
        expect(f"{model} model_name", got["model_name"], model)
        expect(f"{model} model_version", got["model_version"], "1")
        expect(f"{model} output names", sorted(o["name"] for o in got["outputs"]), sorted(want))
        for o in got["outputs"]:
            shape, grpc_raw = want[o["name"]]
            expect(f"{model} {o['name']} shape", o["shape"], shape)
            expect(f"{model} {o['name']} datatype", o["datatype"], "FP32")
            # The same float32 values: JSON prints each float32 exactly (as a double).
            expect(f"{model} {o['name']} data", o["data"], floats(grpc_raw))
        if model == "demo_ensemble":
            check("member_versions" in got.get("parameters", {}), f"ensemble answer lacks member_versions: {got}")

        # Binary in, binary out (one output asked binary, the rest by binary_data_output).
        header = json.dumps({"parameters": dict(params, binary_data_output=True),
                             "inputs": [{"name": "input", "datatype": "FP32", "shape": [batch, 1, 28, 28],
                                         "parameters": {"binary_data_size": batch * 784 * 4}}],
                             }).encode()
        status, fields, raw = http_post(conn, f"/v2/models/{model}/infer",
                                        header + struct.pack(f"<{len(pixels)}f", *pixels),
                                        {"Inference-Header-Content-Length": str(len(header)),
                                         "Content-Type": "application/octet-stream"})
        expect(f"{model} binary infer status ({raw[:200]!r})", status, 200)
        check("inference-header-content-length" in fields, f"{model}: binary answer without its header length")
        json_length = int(fields["inference-header-content-length"])
        got = json.loads(raw[:json_length])
        offset = json_length
        for o in got["outputs"]:
            check("data" not in o, f"{model} {o['name']}: JSON data in a binary answer")
            size = o["parameters"]["binary_data_size"]
            expect(f"{model} {o['name']} binary bytes", raw[offset:offset + size], want[o["name"]][1])
            offset += size
        expect(f"{model} binary answer length", offset, len(raw))

    # Only the outputs asked for, one of them binary.
    pixels = image(1)
    header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": pixels}],
                         "outputs": [{"name": "disagreement", "parameters": {"binary_data": True}},
                                     {"name": "entropy"}],
                         "parameters": {"return_uncertainty": True}})
    status, fields, raw = http_post(conn, "/v2/models/demo_ensemble/infer", header)
    expect(f"requested outputs status ({raw[:200]!r})", status, 200)
    json_length = int(fields["inference-header-content-length"])
    got = json.loads(raw[:json_length])
    expect("requested outputs", [o["name"] for o in got["outputs"]], ["disagreement", "entropy"])
    expect("binary disagreement size", got["outputs"][0]["parameters"]["binary_data_size"], 4)
    expect("entropy as JSON", len(got["outputs"][1]["data"]), 1)
    print("infer: JSON and binary answers equal the gRPC ones (mlp batch 1 and 3, demo_ensemble)")

    # Bad bodies: 400 naming what is wrong; the connection stays usable.
    good = {"name": "input", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": image(1)}
    cases = [
        ("{not json", 400, ["not valid JSON"]),
        (json.dumps({"inputs": [dict(good, data=["x"] + image(1)[1:])]}), 400,
         ["input 'input'", "element 0 is a string", "FP32"]),
        (json.dumps({"inputs": [dict(good, data=image(1)[:700])]}), 400, ["input 'input'", "700", "784"]),
        (json.dumps({"inputs": [dict(good, data=[True] * 784)]}), 400, ["element 0 is a bool"]),
        (json.dumps({"inputs": [dict(good, name="pixels")]}), 400, ["no input named 'pixels'"]),
        (json.dumps({"inputs": [dict(good, datatype="INT32", data=[1] * 784)]}), 400, ["datatype", "INT32"]),
        (json.dumps({"inputs": [dict(good, shape=[1, 28, 28])]}), 400, ["shape"]),
        (json.dumps({"inputs": [good], "parameters": {"priority": "high"}}), 400, ["priority"]),
        (json.dumps({"inputs": [good], "outputs": [{"name": "nope"}]}), 400, ["no output named 'nope'"]),
        (json.dumps({"inputs": {}}), 400, ["\"inputs\""]),
    ]
    def failures():
        stats = curl_json(f"http://{server.http}/v2/models/mlp/stats", 200, "stats")["model_stats"]
        return sum(s["inference_stats"]["fail"]["count"] for s in stats)

    failed_before = failures()
    for body, want_status, needles in cases:
        status, fields, raw = http_post(conn, "/v2/models/mlp/infer", body)
        expect(f"bad body {body[:60]!r} status ({raw[:200]!r})", status, want_status)
        message = json.loads(raw)["error"]
        for needle in needles:
            check(needle in message, f"bad body {body[:60]!r}: error {message!r} does not mention {needle!r}")
    status, fields, raw = http_post(conn, "/v2/models/nope/infer", json.dumps({"inputs": [good]}))
    expect("infer on an unknown model", status, 404)
    status, fields, raw = http_post(conn, "/v2/models/mlp/infer", json.dumps({"inputs": [good]}),
                                    {"Inference-Header-Content-Length": "12x"})
    expect("bad Inference-Header-Content-Length", status, 400)
    # Each failed mlp request is in its statistics, whether the JSON or the
    # tensors were wrong (as gRPC counts a request that fails to decode).
    expect("mlp's failure count after the bad bodies", failures() - failed_before, len(cases) + 1)
    status, fields, raw = http_post(conn, "/v2/models/mlp/infer", json.dumps({"inputs": [good]}))
    expect("a good request after the bad ones, same connection", status, 200)
    print(f"infer: bad bodies answered 400/404 with messages naming the input, element or field; "
          f"all {len(cases) + 1} counted as mlp failures")

    # Compressed bodies (tritonclient's request_compression_algorithm): the
    # same answer as the plain body; other encodings 415, a corrupt one 400.
    import gzip
    import zlib
    body = json.dumps({"inputs": [good]}).encode()
    status, _, raw = http_post(conn, "/v2/models/mlp/infer", body)
    expect("plain body", status, 200)
    plain = json.loads(raw)["outputs"][0]["data"]
    for encoding, packed in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        status, _, raw = http_post(conn, "/v2/models/mlp/infer", packed, {"Content-Encoding": encoding})
        expect(f"{encoding} body status ({raw[:200]!r})", status, 200)
        expect(f"{encoding} body answer", json.loads(raw)["outputs"][0]["data"], plain)
    header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1, 28, 28],
                                     "parameters": {"binary_data_size": 784 * 4}}]}).encode()
    status, _, raw = http_post(conn, "/v2/models/mlp/infer",
                               gzip.compress(header + struct.pack("<784f", *good["data"])),
                               {"Content-Encoding": "gzip", "Inference-Header-Content-Length": str(len(header))})
    expect(f"gzip binary body ({raw[:200]!r})", status, 200)
    expect("gzip binary body answer", json.loads(raw)["outputs"][0]["data"], plain)
    status, _, raw = http_post(conn, "/v2/models/mlp/infer", body, {"Content-Encoding": "br"})
    expect("Content-Encoding br", status, 415)
    status, _, raw = http_post(conn, "/v2/models/mlp/infer", gzip.compress(body)[:-20], {"Content-Encoding": "gzip"})
    expect(f"truncated gzip ({raw!r})", status, 400)
    check(b"gzip" in raw, f"the truncated gzip error does not say gzip: {raw!r}")
    status, _, raw = http_post(conn, "/v2/models/mlp/infer", body, {"Content-Encoding": "deflate"})
    expect(f"a plain body called deflate ({raw!r})", status, 400)
    print("infer: gzip and deflate bodies (JSON and binary) answered as plain ones; br 415, corrupt 400")

    # Compressed answers (tritonclient's response_compression_algorithm sends
    # Accept-Encoding): the same bytes once inflated, binary outputs included
    # (Inference-Header-Content-Length counts the inflated JSON).
    batch = 8
    pixels = image(batch, seed=5)
    header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [batch, 1, 28, 28],
                                     "parameters": {"binary_data_size": batch * 784 * 4}}],
                         "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}}]}).encode()
    binary_body = header + struct.pack(f"<{batch * 784}f", *pixels)
    headers = {"Inference-Header-Content-Length": str(len(header))}
    status, fields, want = http_post(conn, "/v2/models/demo_ensemble/infer", binary_body, headers)
    expect("binary answer, uncompressed", (status, fields.get("content-encoding")), (200, None))
    json_length = fields.get("inference-header-content-length")
    check(json_length is not None and 0 < int(json_length) < len(want), f"no JSON length in {fields}")
    for accept, unpack in (("gzip", gzip.decompress), ("gzip;q=0.1, deflate", zlib.decompress)):
        status, fields, raw = http_post(conn, "/v2/models/demo_ensemble/infer", binary_body,
                                        dict(headers, **{"Accept-Encoding": accept}))
        coding = "gzip" if accept == "gzip" else "deflate"
        expect(f"Accept-Encoding {accept}: status and Content-Encoding", (status, fields.get("content-encoding")),
               (200, coding))
        inflated, cut = unpack(raw), int(json_length)
        # Equal JSON (its parameters map has no fixed order) and equal tensor bytes.
        expect(f"Accept-Encoding {accept}: the inflated answer's JSON", json.loads(inflated[:cut]),
               json.loads(want[:cut]))
        expect(f"Accept-Encoding {accept}: the inflated answer's binary outputs", inflated[cut:], want[cut:])
        expect(f"Accept-Encoding {accept}: Inference-Header-Content-Length (of the inflated JSON)",
               fields.get("inference-header-content-length"), json_length)
    url = f"http://{server.http}/v2/models/demo_ensemble/config"
    status, fields, packed_config = curl(url, options=["--compressed"])
    expect("curl --compressed on the config: status, Content-Encoding", (status, fields.get("content-encoding")),
           (200, "gzip"))
    expect("curl --compressed on the config: the inflated answer", json.loads(packed_config), json.loads(curl(url)[2]))
    print(f"infer: answers compressed on request (gzip, deflate): inflated, the plain answer's JSON and "
          f"tensor bytes ({len(want)} bytes, {len(raw)} compressed); curl --compressed")


def check_keep_alive(server):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=TIMEOUT_S)
    conn.connect()
    port = conn.sock.getsockname()[1]
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1, 28, 28],
                                   "data": image(1)}]})
    for i in range(300):
        if i % 3 == 0:
            conn.request("GET", "/v2/health/ready")
            want = 200
        elif i % 3 == 1:
            conn.request("POST", "/v2/models/mlp/infer", body=body)
            want = 200
        else:
            conn.request("GET", "/v2/models/nope")
            want = 404
        response = conn.getresponse()
        response.read()
        expect(f"keep-alive request {i} status", response.status, want)
        check(conn.sock is not None, f"the server closed the keep-alive connection after request {i}")
        expect(f"keep-alive request {i} local port", conn.sock.getsockname()[1], port)
    conn.close()
    # Pipelined: several requests sent at once are answered in order, and
    # `Connection: close` on the last closes the connection after its answer.
    sock = socket.create_connection((server.host, server.port), timeout=TIMEOUT_S)
    live = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    missing = b"GET /v2/models/nope HTTP/1.1\r\nHost: x\r\n\r\n"
    sock.sendall(live + missing + live + missing + b"GET /v2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data, closed = read_all(sock, 10)
    sock.close()
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", data)
    expect("pipelined answers", statuses, [b"200", b"404", b"200", b"404", b"200"])
    check(closed and data.endswith(b"]}"), f"the pipelined connection did not end after the last answer: {data[-80:]!r}")
    print("keep-alive: 300 requests (ready, infer, 404) on one connection; 5 pipelined answered in order")


def read_status_line(sock, timeout):
    """The first line the server sends (b'' if it closes without one)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    return data.split(b"\r\n", 1)[0]


def read_all(sock, timeout):
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data, True
            data += chunk
    except ConnectionResetError:
        return data, True
    except socket.timeout:
        return data, False


def dribble(server, prefix, trickle, results, key):
    """Sends `prefix`, then one byte of `trickle` every 0.25 s until the server cuts the connection."""
    sock = socket.create_connection((server.host, server.port), timeout=TIMEOUT_S)
    start = time.monotonic()
    sock.sendall(prefix)
    cut = None
    i = 0
    while time.monotonic() - start < 20:
        try:
            sock.sendall(trickle[i % len(trickle):i % len(trickle) + 1])
        except (BrokenPipeError, ConnectionResetError):
            cut = time.monotonic() - start
            break
        readable, _, _ = select.select([sock], [], [], 0.25)
        if readable:
            try:
                if sock.recv(4096) == b"":
                    cut = time.monotonic() - start
                    break
            except ConnectionResetError:
                cut = time.monotonic() - start
                break
        i += 1
    sock.close()
    results[key] = cut


def idle_cut(server, results):
    """One request on a keep-alive connection, then silence: how long until the server closes it."""
    sock = socket.create_connection((server.host, server.port), timeout=TIMEOUT_S)
    sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    check(read_status_line(sock, 10).startswith(b"HTTP/1.1 200"), "the idle connection's first request failed")
    start = time.monotonic()
    _, closed = read_all(sock, 4 * IDLE_TIMEOUT_S)
    sock.close()
    results["idle"] = time.monotonic() - start if closed else None


def check_limits(server):
    results = {}
    threads = [
        threading.Thread(target=idle_cut, args=(server, results)),
        threading.Thread(target=dribble, args=(server, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: ",
                                               b"abcdefgh", results, "headers")),
        threading.Thread(target=dribble, args=(server, b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\n"
                                               b"Content-Length: 100000\r\n\r\n{\"inputs\": [", b"1, ",
                                               results, "body")),
    ]
    for t in threads:
        t.start()
    # Meanwhile another client is served, request after request.
    conn = http.client.HTTPConnection(server.host, server.port, timeout=TIMEOUT_S)
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1, 28, 28],
                                   "data": image(1)}]})
    served = 0
    while any(t.is_alive() for t in threads):
        status, _, _ = http_post(conn, "/v2/models/mlp/infer", body)
        expect("infer while slow clients dribble", status, 200)
        served += 1
    for t in threads:
        t.join()
    conn.close()
    cut = results.get("idle")
    check(cut is not None, f"an idle keep-alive connection was not closed within {4 * IDLE_TIMEOUT_S} s")
    check(IDLE_TIMEOUT_S - 0.5 <= cut <= IDLE_TIMEOUT_S + 5,
          f"an idle keep-alive connection was closed after {cut:.1f} s; want about {IDLE_TIMEOUT_S} s")
    print(f"idle keep-alive connection closed after {cut:.1f} s (idle timeout {IDLE_TIMEOUT_S} s)")
    for key in ("headers", "body"):
        cut = results.get(key)
        check(cut is not None, f"the slow-loris client ({key}) was never cut off (20 s)")
        check(REQUEST_TIMEOUT_S - 0.5 <= cut <= REQUEST_TIMEOUT_S + 5,
              f"the slow-loris client ({key}) was cut after {cut:.1f} s; want about {REQUEST_TIMEOUT_S} s")
    check(served >= 3, f"only {served} requests of the other client were served meanwhile")
    print(f"slow-loris: headers cut after {results['headers']:.1f} s, body after {results['body']:.1f} s "
          f"(request timeout {REQUEST_TIMEOUT_S} s); {served} other requests served meanwhile")

    limit = MAX_REQUEST_BYTES + (1 << 20)
    # Announced too large: 413 before the body is sent, then closed.
    sock = socket.create_connection((server.host, server.port), timeout=TIMEOUT_S)
    sock.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (limit + 1))
    data, closed = read_all(sock, 10)
    sock.close()
    check(data.startswith(b"HTTP/1.1 413"), f"an over-limit Content-Length got {data[:100]!r}, want 413")
    check(b'"error"' in data and str(limit).encode() in data, f"the 413 does not name the limit: {data!r}")
    check(closed, "the connection stayed open after the 413")
    # Sent while the server answers: the client still gets its 413.
    conn = http.client.HTTPConnection(server.host, server.port, timeout=TIMEOUT_S)
    try:
        status, _, raw = http_post(conn, "/v2/models/mlp/infer", b"x" * (limit + 4096))
        expect(f"a whole over-limit body ({raw[:100]!r})", status, 413)
    except (BrokenPipeError, ConnectionResetError) as error:
        raise CheckFailed(f"an over-limit body was reset instead of answered 413: {error}")
    conn.close()
    # Chunked: no length announced, cut at the limit.
    sock = socket.create_connection((server.host, server.port), timeout=TIMEOUT_S)
    sock.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * 65536
    try:
        for _ in range(limit // len(chunk) + 4):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    except (BrokenPipeError, ConnectionResetError):
        pass
    line = read_status_line(sock, 10)
    sock.close()
    check(line.startswith(b"HTTP/1.1 413"), f"an over-limit chunked body got {line!r}, want 413")
    # A small gzip body that inflates past the limit (a zip bomb): 413.
    import gzip
    bomb = gzip.compress(b"0" * (limit + (1 << 20)))
    conn = http.client.HTTPConnection(server.host, server.port, timeout=TIMEOUT_S)
    status, _, raw = http_post(conn, "/v2/models/mlp/infer", bomb, {"Content-Encoding": "gzip"})
    conn.close()
    expect(f"a {len(bomb)}-byte gzip body inflating past the limit ({raw[:200]!r})", status, 413)
    check(b"inflates to more than" in raw, f"the 413 does not say why: {raw!r}")
    # Headers over the limit (8 KiB here; 10 KiB would pass the default 16): 431.
    for size, want in ((MAX_HEADER_BYTES - 1024, b"HTTP/1.1 200"), (MAX_HEADER_BYTES + 2048, b"HTTP/1.1 431")):
        sock = socket.create_connection((server.host, server.port), timeout=TIMEOUT_S)
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * size + b"\r\n\r\n")
        line = read_status_line(sock, 10)
        sock.close()
        check(line.startswith(want), f"{size} bytes of headers got {line!r}, want {want!r}")
    # Not HTTP at all: 400, closed.
    sock = socket.create_connection((server.host, server.port), timeout=TIMEOUT_S)
    sock.sendall(b"HELLO THERE\r\n\r\n")
    line = read_status_line(sock, 10)
    sock.close()
    check(line.startswith(b"HTTP/1.1 400"), f"a malformed request got {line!r}, want 400")
    expect("still serving after the limits", curl(f"http://{server.http}/v2/health/live")[0], 200)
    print("limits: 413 (announced, sent, chunked, inflated), 431 and 400 answered; others still served")

    # The connection cap (64 here): the ones past it are closed at once; the
    # others, and new ones once they are gone, are served. On a busy machine
    # (tests side by side) the closes can take a moment and connections
    # closed above can linger in the server's count: the closed ones are
    # polled for up to 10 s, and a crowd that met lingering ones (more than
    # 8 closed) is tried again after a second.
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1024 and hard >= 1024:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))

    def crowd():
        """Opens MAX_CONNECTIONS + 8 connections; (closed count, status line of the first)."""
        socks = [socket.create_connection((server.host, server.port), timeout=TIMEOUT_S)
                 for _ in range(MAX_CONNECTIONS + 8)]
        gone = set()
        deadline = time.monotonic() + 10
        settle = None  # once 8 are closed, half a second more for any excess
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            readable, _, _ = select.select([k for k in socks if k not in gone], [], [], 0.05)
            for sock in readable:
                try:
                    if sock.recv(16) == b"":
                        gone.add(sock)
                except ConnectionResetError:
                    gone.add(sock)
            if settle is None and len(gone) >= 8:
                settle = time.monotonic() + 0.5
        first = next(k for k in socks if k not in gone)
        first.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        status = read_status_line(first, 10)
        for sock in socks:
            sock.close()
        return len(gone), status

    for _ in range(3):
        time.sleep(1.0)  # the connections closed before are gone from the server's count
        closed, line = crowd()
        if closed <= 8:
            break
    expect("connections closed past the cap", closed, 8)
    check(line.startswith(b"HTTP/1.1 200"), f"a connection under the cap got {line!r}")
    time.sleep(0.5)
    expect("served after the crowd left", curl(f"http://{server.http}/v2/health/live")[0], 200)
    print(f"connections: {MAX_CONNECTIONS} served, the 8 past the cap closed at once")


def check_shared_memory(server):
    from multiprocessing import shared_memory
    base = f"http://{server.http}"
    pixels = image(1, seed=5)
    name_in, name_out = f"es_http_in_{os.getpid()}", f"es_http_out_{os.getpid()}"
    region_in = shared_memory.SharedMemory(name=name_in, create=True, size=784 * 4 + 64)
    region_out = shared_memory.SharedMemory(name=name_out, create=True, size=64)
    try:
        region_in.buf[64:64 + 784 * 4] = struct.pack("<784f", *pixels)
        for region, key, offset, size in (("in", name_in, 64, 784 * 4), ("out", name_out, 0, 64)):
            status, _, body = curl(f"{base}/v2/systemsharedmemory/region/{region}/register", method="POST",
                                   data=json.dumps({"key": "/" + key, "offset": offset, "byte_size": size}))
            expect(f"register {region} ({body!r})", status, 200)
        expect_error(f"{base}/v2/systemsharedmemory/region/in/register", 409, ["in"], "register twice",
                     method="POST", data=json.dumps({"key": "/" + name_in, "offset": 0, "byte_size": 8}))
        expect_error(f"{base}/v2/systemsharedmemory/region/x/register", 400, ["byte_size"], "register without size",
                     method="POST", data=json.dumps({"key": "/" + name_in}))
        regions = curl_json(f"{base}/v2/systemsharedmemory/status", 200, "shm status")
        expect("shm status", sorted((r["name"], r["key"], r["offset"], r["byte_size"]) for r in regions),
               [("in", "/" + name_in, 64, 784 * 4), ("out", "/" + name_out, 0, 64)])
        expect("one region's status", [r["name"] for r in
                                       curl_json(f"{base}/v2/systemsharedmemory/region/out/status", 200, "one")],
               ["out"])
        body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1, 28, 28],
                                       "parameters": {"shared_memory_region": "in",
                                                      "shared_memory_byte_size": 784 * 4}}],
                           "outputs": [{"name": "probabilities",
                                        "parameters": {"shared_memory_region": "out",
                                                       "shared_memory_byte_size": 40}}]})
        got = curl_json(f"{base}/v2/models/mlp/infer", 200, "infer through shared memory", method="POST", data=body)
        out = got["outputs"][0]
        check("data" not in out, f"a shared-memory output carried data: {out}")
        expect("output region", out["parameters"]["shared_memory_region"], "out")
        plain = curl_json(f"{base}/v2/models/mlp/infer", 200, "the same infer in JSON", method="POST",
                          data=json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                                       "shape": [1, 1, 28, 28], "data": pixels}]}))
        expect("shared-memory output", floats(bytes(region_out.buf[:40])), plain["outputs"][0]["data"])
        status, _, _ = curl(f"{base}/v2/systemsharedmemory/region/in/unregister", method="POST")
        expect("unregister in", status, 200)
        expect_error(f"{base}/v2/systemsharedmemory/region/in/status", 404, ["in"], "status after unregister")
        # A name that is not registered: not an error, as in Triton and over gRPC.
        status, _, _ = curl(f"{base}/v2/systemsharedmemory/region/in/unregister", method="POST")
        expect("unregister in again", status, 200)
        status, _, _ = curl(f"{base}/v2/systemsharedmemory/unregister", method="POST")
        expect("unregister all", status, 200)
        expect("status after unregister all", curl_json(f"{base}/v2/systemsharedmemory/status", 200, "s"), [])
    finally:
        for region in (region_in, region_out):
            region.close()
            region.unlink()
    print("shared memory: register, status, infer with input and output in regions, unregister")


def check_drain(server):
    """SIGTERM under HTTP load, with an idle keep-alive connection open: the
    calls in flight are answered 200, later ones 503, and the server exits 0."""
    idle = http.client.HTTPConnection(server.host, server.port, timeout=TIMEOUT_S)
    idle.request("GET", "/v2/health/live")
    idle.getresponse().read()
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [64, 1, 28, 28],
                                   "data": image(64, seed=9)}]})
    calls = []  # (start, end, status or the exception's name)
    lock = threading.Lock()

    def load():
        conn = http.client.HTTPConnection(server.host, server.port, timeout=TIMEOUT_S)
        while True:
            start = time.monotonic()
            try:
                status, _, raw = http_post(conn, "/v2/models/demo_ensemble/infer", body)
                if status == 503:
                    check("shutting down" in json.loads(raw)["error"], f"a 503 that is not the drain's: {raw!r}")
            except (OSError, http.client.HTTPException) as error:
                status = type(error).__name__
            with lock:
                calls.append((start, time.monotonic(), status))
            if status != 200:
                return

    loaders = [threading.Thread(target=load) for _ in range(4)]
    for t in loaders:
        t.start()
    time.sleep(1.0)
    signalled = time.monotonic()
    rc = server.stop()
    exited = time.monotonic() - signalled
    for t in loaders:
        t.join()
    idle.close()
    expect("exit status after SIGTERM under HTTP load", rc, 0)
    drained = [c for c in calls if c[0] < signalled < c[1] and c[2] == 200]
    refused = [c for c in calls if c[2] == 503]
    for start, end, status in calls:
        check(status in (200, 503) or start > signalled,
              f"a call sent {signalled - start:.2f} s before SIGTERM got {status} instead of an answer")
    check(len(drained) >= 1, f"no call in flight at SIGTERM was answered 200: {[c[2] for c in calls][-8:]}")
    print(f"drain: SIGTERM under HTTP load (and an idle keep-alive connection) -> exit 0 after {exited:.1f} s; "
          f"{len(drained)} call(s) in flight answered 200, {len(refused)} refused 503")


def make_certificates(work):
    def run(*cmd):
        done = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        if done.returncode != 0:
            raise CheckFailed(f"{' '.join(cmd)}: {done.stderr}")
    (work / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=es-http-test-ca")
    for who in ("server", "client"):
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out", f"{who}.csr",
            "-subj", f"/CN=es-http-{who}")
        run("openssl", "x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{who}.crt", "-days", "2", *(["-extfile", "san.ext"] if who == "server" else []))


def check_tls_and_tokens(args, work, repo):
    make_certificates(work)
    (work / "tokens").write_text("# role token\ninfer tok-infer-0123456789abcdef\nadmin tok-admin-0123456789abcdef\n")
    extra = (f"tls: {{cert: {work}/server.crt, key: {work}/server.key, client_ca: {work}/ca.crt}}\n"
             f"auth: {{tokens_file: {work}/tokens, open_health: true}}\n")
    config = work / "secure.yaml"
    config.write_text(SERVER_YAML.format(repo=repo, hosts=ONE_HOST, max_bytes=MAX_REQUEST_BYTES,
                                         http_limits=", http_request_timeout_ms: 60000", extra=extra))
    server = Server(args.server_bin, config, work / "secure.log",
                    ["--model-control-mode", "explicit", "--load-model", "mlp", "--http-request-timeout-secs", "2"])
    try:
        base = f"https://{server.http}"
        tls = ["--cacert", str(work / "ca.crt"), "--cert", str(work / "client.crt"), "--key", str(work / "client.key")]
        infer_token = ["Authorization: Bearer tok-infer-0123456789abcdef"]
        admin_token = ["Authorization: Bearer tok-admin-0123456789abcdef"]
        expect("open health probe over mTLS", curl(f"{base}/v2/health/ready", options=tls)[0], 200)
        expect_error(f"{base}/v2/models/mlp", 401, [], "metadata without a token", options=tls)
        expect("401 names its scheme", curl(f"{base}/v2/models/mlp", options=tls)[1].get("www-authenticate"),
               "Bearer")
        expect_error(f"{base}/v2/models/mlp", 401, [], "metadata with a wrong token", options=tls,
                     headers=["Authorization: Bearer tok-nope"])
        expect("metadata with the infer token", curl_json(f"{base}/v2/models/mlp", 200, "metadata", options=tls,
                                                          headers=infer_token)["name"], "mlp")
        body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1, 28, 28],
                                       "data": image(1)}]})
        expect_error(f"{base}/v2/models/mlp/infer", 401, [], "infer without a token", method="POST", data=body,
                     options=tls)
        got = curl_json(f"{base}/v2/models/mlp/infer", 200, "infer with the infer token", method="POST", data=body,
                        options=tls, headers=infer_token)
        expect("infer over TLS outputs", len(got["outputs"][0]["data"]), 10)
        expect_error(f"{base}/v2/repository/models/mlp/unload", 403, [], "unload with the infer token",
                     method="POST", options=tls, headers=infer_token)
        expect_error(f"{base}/v2/systemsharedmemory/status", 403, [], "shm status with the infer token",
                     options=tls, headers=infer_token)
        status, _, body_bytes = curl(f"{base}/v2/repository/models/mlp/unload", method="POST", options=tls,
                                     headers=admin_token)
        expect(f"unload with the admin token ({body_bytes!r})", status, 200)
        ready = curl(f"{base}/v2/models/mlp/ready", options=tls)[0]
        check(ready in (400, 404), f"mlp ready after unload: HTTP {ready}")
        status, _, body_bytes = curl(f"{base}/v2/repository/models/mlp/load", method="POST", options=tls,
                                     headers=admin_token)
        expect(f"load with the admin token ({body_bytes!r})", status, 200)
        expect("mlp ready after load", curl(f"{base}/v2/models/mlp/ready", options=tls)[0], 200)
        # No client certificate: the handshake fails (mTLS), nothing is answered.
        status, _, err = curl(f"{base}/v2/health/live", options=["--cacert", str(work / "ca.crt")])
        check(status is None or status == 0, f"a client without a certificate got HTTP {status}")
        # Plain HTTP to the TLS port is not answered as HTTP.
        status, _, err = curl(f"http://{server.http}/v2/health/live")
        check(status in (None, 0), f"plain HTTP on the TLS port got HTTP {status}")
        # A client that never starts the handshake: cut after the flag's 2 s, not the config's 60.
        sock = socket.create_connection((server.host, server.port), timeout=TIMEOUT_S)
        start = time.monotonic()
        _, closed = read_all(sock, 20)
        cut = time.monotonic() - start
        sock.close()
        check(closed and 1.5 <= cut <= 7, f"a silent client on the TLS port was cut after {cut:.1f} s "
              f"(closed: {closed}); want about 2 s (--http-request-timeout-secs)")
        expect("secure server exit status after SIGTERM", server.stop(), 0)
    except CheckFailed:
        print("---- secure server log (tail) ----\n" + server.log_tail(), file=sys.stderr)
        raise
    finally:
        server.kill()
    print("TLS + tokens: mTLS required, 401 without/with a wrong token, 403 for infer on admin routes, "
          f"open health, unload/load with the admin token; a client silent on the TLS port cut after {cut:.1f} s "
          "(--http-request-timeout-secs 2)")


def main():
    args = parse_args()
    sys.path.insert(0, args.stubs)
    import grpc
    from proto import grpc_service_pb2 as service
    from proto import grpc_service_pb2_grpc as service_grpc

    with tempfile.TemporaryDirectory(prefix="es_http.") as work:
        work = pathlib.Path(work)
        repo = work / "repo"
        made = subprocess.run([args.make_demo, "--out", str(repo), "--seed", "1"], capture_output=True, text=True)
        if made.returncode != 0:
            print(f"FAIL: ensemble-make-demo exited {made.returncode}: {made.stderr}", file=sys.stderr)
            return 1
        config = work / "server.yaml"
        config.write_text(SERVER_YAML.format(repo=repo, hosts=TWO_HOSTS, max_bytes=MAX_REQUEST_BYTES,
                                             http_limits=HTTP_LIMITS, extra=""))
        server = None
        try:
            server = Server(args.server_bin, config, work / "server.log")
            print(f"server: grpc {server.grpc}, http {server.http} (pid {server.proc.pid})")
            with grpc.insecure_channel(server.grpc) as channel:
                stub = service_grpc.GRPCInferenceServiceStub(channel)
                check_routes(server, stub, service)
                check_infer(server, stub, service)
            check_keep_alive(server)
            check_limits(server)
            check_shared_memory(server)
            check_drain(server)
            server = None
            check_tls_and_tokens(args, work, repo)
        except CheckFailed as failure:
            print(f"FAIL: {failure}", file=sys.stderr)
            if server is not None:
                print("---- server log (tail) ----\n" + server.log_tail(), file=sys.stderr)
            return 1
        finally:
            if server is not None:
                server.kill()
    print("PASS: HTTP/REST against ensemble-server")
    return 0


if __name__ == "__main__":
    sys.exit(main())
