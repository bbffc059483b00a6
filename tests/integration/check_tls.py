#!/usr/bin/python3
"""ctest `python_tls`: TLS, mTLS and bearer tokens from Python grpcio.

    check_tls.py --server-bin BIN --make-demo BIN --stubs DIR --certs-script SH --client-py PY

Makes test certificates with make_test_certs.sh (Debian's openssl) and a
tokens file in a temp dir, starts ensemble-server on the demo repository with
`tls: {cert, key, client_ca}` (mTLS), `auth: {tokens_file}` (health open) and
explicit model control (mlp loaded), and checks with
grpc.secure_channel(grpc.ssl_channel_credentials(...)) and call metadata:
  - mTLS with the CA's client certificate works (live, infer);
  - a plaintext channel, no client certificate, a client certificate of
    another CA and an expired one are refused (UNAVAILABLE);
  - tokens: none or unknown -> UNAUTHENTICATED; the infer token on
    RepositoryModelLoad -> PERMISSION_DENIED; the admin token loads a model;
    ServerLive without a token answers (open_health);
  - clients/python/kserve_client.py with --ca/--cert/--key and ENSEMBLE_TOKEN;
  - the HTTP/REST front end with curl: https with the client certificate,
    401 without or with an unknown token, 403 for the infer token on a load,
    the admin's unload; refused without a certificate, with another CA's or
    an expired one, and over plain http;
  - no token appears in the server's log (run at --log-level debug).
Then SIGTERMs the server and checks it exits 0. Exit 0 = pass.
"""
import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from server_check import CheckFailed, add_server_args, expect, kill_server, start_server, stop_server

TIMEOUT_S = 30
ADMIN = "admin-py-4c2e8a1f9b7d3065"
INFER = "infer-py-8d1f3b5c7e9a2046"
UNKNOWN = "unknown-py-0a1b2c3d4e5f6789"

SERVER_YAML = """repository: {repo}
listen_address: 127.0.0.1
hosts:
  - {{name: cpu0, device: cpu, cpu_affinity: [0], threads: 1, executors: 1}}
  - {{name: cpu1, device: cpu, cpu_affinity: [1], threads: 1, executors: 1}}
tls: {{cert: certs/server.pem, key: certs/server.key, client_ca: certs/ca.pem}}
auth: {{tokens_file: tokens.txt, open_health: true}}
"""


def run_checks(address, certs, client_py, stubs):
    import grpc
    import numpy as np
    from proto import grpc_service_pb2 as pb
    from proto import grpc_service_pb2_grpc as pb_grpc

    def read(name):
        return (certs / name).read_bytes()

    def channel(client=None, ca="ca.pem"):
        creds = grpc.ssl_channel_credentials(root_certificates=read(ca),
                                             private_key=read(client + ".key") if client else None,
                                             certificate_chain=read(client + ".pem") if client else None)
        return grpc.secure_channel(address, creds)

    def bearer(token):
        return (("authorization", f"Bearer {token}"),) if token else ()

    def code_of(call):
        try:
            call()
        except grpc.RpcError as error:
            return error.code(), error.details()
        return grpc.StatusCode.OK, ""

    images = np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32)
    infer_request = pb.ModelInferRequest(model_name="mlp")
    infer_request.inputs.add(name="input", datatype="FP32", shape=images.shape)
    infer_request.raw_input_contents.append(images.tobytes())

    with channel("client") as ch:
        stub = pb_grpc.GRPCInferenceServiceStub(ch)
        # Health is open: no token needed. mlp becomes ready shortly after start.
        live = stub.ServerLive(pb.ServerLiveRequest(), timeout=TIMEOUT_S)
        expect("ServerLive over mTLS without a token", live.live, True)
        for _ in range(600):
            if stub.ModelReady(pb.ModelReadyRequest(name="mlp"), timeout=TIMEOUT_S).ready:
                break
            time.sleep(0.1)
        response = stub.ModelInfer(infer_request, timeout=TIMEOUT_S, metadata=bearer(INFER))
        expect("ModelInfer with the infer token: model", response.model_name, "mlp")
        print("mTLS + infer token: ModelInfer ok")

        for token, what in [(None, "no token"), (UNKNOWN, "unknown token")]:
            code, _ = code_of(lambda: stub.ModelInfer(infer_request, timeout=TIMEOUT_S, metadata=bearer(token)))
            expect(f"ModelInfer with {what}", code, grpc.StatusCode.UNAUTHENTICATED)
            code, _ = code_of(lambda: stub.ModelMetadata(pb.ModelMetadataRequest(name="mlp"), timeout=TIMEOUT_S,
                                                         metadata=bearer(token)))
            expect(f"ModelMetadata with {what}", code, grpc.StatusCode.UNAUTHENTICATED)
        print("no token / unknown token: UNAUTHENTICATED")

        load = pb.RepositoryModelLoadRequest(model_name="wide_mlp")
        code, details = code_of(lambda: stub.RepositoryModelLoad(load, timeout=TIMEOUT_S, metadata=bearer(INFER)))
        expect("RepositoryModelLoad with the infer token", code, grpc.StatusCode.PERMISSION_DENIED)
        if INFER in details:
            raise CheckFailed(f"the PERMISSION_DENIED message shows the token: {details!r}")
        code, details = code_of(lambda: stub.RepositoryModelLoad(load, timeout=60, metadata=bearer(ADMIN)))
        expect(f"RepositoryModelLoad with the admin token ({details})", code, grpc.StatusCode.OK)
        ready = stub.ModelReady(pb.ModelReadyRequest(name="wide_mlp"), timeout=TIMEOUT_S, metadata=bearer(ADMIN))
        expect("wide_mlp ready after the admin's load", ready.ready, True)
        print("infer token on load: PERMISSION_DENIED; admin token: loaded wide_mlp")

    # Refused connections: each gets UNAVAILABLE (the handshake fails).
    refused = {
        "plaintext": grpc.insecure_channel(address),
        "no client certificate": channel(None),
        "client certificate of another CA": channel("other_client"),
        "expired client certificate": channel("expired_client"),
        "server not trusted (other CA as roots)": channel("client", ca="other_ca.pem"),
    }
    for what, ch in refused.items():
        with ch:
            stub = pb_grpc.GRPCInferenceServiceStub(ch)
            code, details = code_of(lambda: stub.ServerLive(pb.ServerLiveRequest(), timeout=TIMEOUT_S,
                                                            metadata=bearer(INFER)))
            expect(f"{what}: ServerLive", code, grpc.StatusCode.UNAVAILABLE)
    print("refused: " + ", ".join(refused))

    env = dict(os.environ, PYTHONPATH=stubs, ENSEMBLE_TOKEN=INFER)
    run = subprocess.run(["/usr/bin/python3", client_py, "--server", address, "--model", "mlp", "--batch", "2",
                          "--ca", str(certs / "ca.pem"), "--cert", str(certs / "client.pem"),
                          "--key", str(certs / "client.key")], capture_output=True, text=True, env=env,
                         timeout=120)
    if run.returncode != 0 or "response: model mlp" not in run.stdout:
        raise CheckFailed(f"kserve_client.py over mTLS exited {run.returncode}: {run.stdout}{run.stderr}")
    env.pop("ENSEMBLE_TOKEN")
    run = subprocess.run(["/usr/bin/python3", client_py, "--server", address, "--model", "mlp",
                          "--ca", str(certs / "ca.pem"), "--cert", str(certs / "client.pem"),
                          "--key", str(certs / "client.key")], capture_output=True, text=True, env=env,
                         timeout=120)
    if run.returncode == 0 or "UNAUTHENTICATED" not in run.stderr:
        raise CheckFailed(f"kserve_client.py without a token: exit {run.returncode}, stderr {run.stderr!r}")
    print("kserve_client.py: --ca/--cert/--key with ENSEMBLE_TOKEN works, refused without it")


def curl(url, certs, client="client", token=None, method="GET"):
    """(curl's exit code, HTTP status) of one request with `curl`; status 0
    when no HTTP answer came (a refused handshake)."""
    command = ["curl", "--silent", "--show-error", "--max-time", "30", "--output", "/dev/null",
               "--write-out", "%{http_code}", "--request", method, "--cacert", str(certs / "ca.pem")]
    if client:
        command += ["--cert", str(certs / f"{client}.pem"), "--key", str(certs / f"{client}.key")]
    if token:
        # From stdin (-H @-), not argv: the token stays out of `ps`, as a user's should.
        command += ["--header", "@-"]
    run = subprocess.run(command + [url], input=f"Authorization: Bearer {token}\n" if token else "",
                         capture_output=True, text=True, timeout=60)
    return run.returncode, int(run.stdout or "0")


def check_https(http_address, certs):
    """The HTTP/REST front end serves the same TLS, mTLS and tokens (curl)."""
    base = f"https://{http_address}"
    checks = [
        ("live without a token (open health)", curl(f"{base}/v2/health/live", certs), 200),
        ("model metadata with the infer token", curl(f"{base}/v2/models/mlp", certs, token=INFER), 200),
        ("model metadata without a token", curl(f"{base}/v2/models/mlp", certs), 401),
        ("model metadata with an unknown token", curl(f"{base}/v2/models/mlp", certs, token=UNKNOWN), 401),
        ("load with the infer token", curl(f"{base}/v2/repository/models/cnn/load", certs, token=INFER,
                                           method="POST"), 403),
        ("unload with the admin token", curl(f"{base}/v2/repository/models/wide_mlp/unload", certs, token=ADMIN,
                                             method="POST"), 200),
    ]
    for what, (rc, status), want in checks:
        expect(f"https {what}: HTTP status (curl exit {rc})", status, want)
    for what, client in [("no client certificate", None), ("client certificate of another CA", "other_client"),
                         ("expired client certificate", "expired_client")]:
        rc, status = curl(f"{base}/v2/health/live", certs, client=client)
        if rc == 0 or status != 0:
            raise CheckFailed(f"https with {what}: curl exit {rc}, HTTP {status}; want a refused handshake")
    run = subprocess.run(["curl", "--silent", "--max-time", "30", "--output", "/dev/null", "--write-out",
                          "%{http_code}", f"http://{http_address}/v2/health/live"], capture_output=True, text=True,
                         timeout=60)
    if run.stdout.strip() == "200":
        raise CheckFailed("plain http:// to the TLS port answered 200")
    print("https (curl): open health 200, no/unknown token 401, infer token on load 403, admin unload 200; "
          "no/other-CA/expired client certificate and plain http refused")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_server_args(parser)
    parser.add_argument("--certs-script", required=True)
    parser.add_argument("--client-py", required=True)
    args = parser.parse_args()
    sys.path.insert(0, args.stubs)
    with tempfile.TemporaryDirectory(prefix="es_python_tls.") as work:
        work = pathlib.Path(work)
        steps = [[args.make_demo, "--out", str(work / "repo"), "--train-steps", "0"],
                 ["/bin/bash", args.certs_script, str(work / "certs")]]
        for step in steps:
            made = subprocess.run(step, capture_output=True, text=True)
            if made.returncode != 0:
                print(f"FAIL: {step[0]} exited {made.returncode}: {made.stderr}", file=sys.stderr)
                return 1
        (work / "tokens.txt").write_text(f"# role token\nadmin {ADMIN}\ninfer {INFER}\n")
        (work / "server.yaml").write_text(SERVER_YAML.format(repo=work / "repo"))
        log_path = work / "server.log"
        proc = None
        try:
            proc, (address, http_address) = start_server(
                args.server_bin, work / "server.yaml", log_path,
                ("--model-control-mode", "explicit", "--load-model", "mlp", "--log-level", "debug"), ("grpc", "http"))
            print(f"server at {address}, http {http_address} (pid {proc.pid})")
            run_checks(address, work / "certs", args.client_py, args.stubs)
            check_https(http_address, work / "certs")
            rc = stop_server(proc)
            proc = None
            expect("ensemble-server exit status after SIGTERM", rc, 0)
            log = log_path.read_text(errors="replace")
            if " debug " not in log:
                raise CheckFailed("the server's log has no debug lines (--log-level debug)")
            for token in (ADMIN, INFER, UNKNOWN):
                if token in log:
                    raise CheckFailed(f"token {token} appears in the server's log")
            print("no token in the server's log")
        except Exception as error:  # any failure (CheckFailed, grpc.RpcError...) ends the test with the log
            print(f"FAIL: {error}", file=sys.stderr)
            print("---- server log (tail) ----", file=sys.stderr)
            if log_path.exists():
                print(log_path.read_text(errors="replace")[-6000:], file=sys.stderr)
            return 1
        finally:
            kill_server(proc)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
