#!/usr/bin/python3
"""ctest `python_experiments`: shadow and canary experiments on a real server.

    check_experiments.py --server-bin BIN --make-demo BIN --stubs DIR

Writes the demo repository (untrained: fast) with two candidates for mlp:
`mlp_twin` (mlp's own model file: every answer agrees) and `mlp_broken` (a
TorchScript model that always raises), gives mlp a shadow experiment in its
config.yaml (candidate mlp_twin, 50%, gate: promote after 200 compared
requests at agreement 0.99 or more), starts ensemble-server (bearer
tokens) and, with 16 client threads over gRPC:
  - until the gate promotes, every answer is mlp's own (no `served_by`),
    and the comparison reads agreement 1, KL 0; the promotion is in the
    status (HTTP GET /v2/models/mlp/experiment) with the figures that made
    it; after it, answers say served_by mlp_twin; no request fails;
  - POST (admin; the infer token is refused 403) a canary of wide_mlp to
    mlp_broken at 30%: the candidate's errors abort it within its window,
    the status says aborted and why, and after the abort no request fails;
  - a shadow of wide_mlp to mlp_broken at 50%: no client request fails
    (the shadow's errors are the candidate's, counted, never the client's),
    and the gate aborts it within its window;
  - bad bodies are refused 400 naming the field; an unknown model 404;
  - the same over gRPC (ensemble_serve.v1.ExperimentService);
  - a 50% canary sticky by header x-user keeps each of 16 callers on one
    side, over gRPC metadata and HTTP headers alike;
  - /metrics has the figures and decisions.
Exit 0 = pass.
"""
import argparse
import http.client
import json
import pathlib
import shutil
import sys
import tempfile
import threading

from server_check import CheckFailed, add_server_args, expect, make_demo, run_with_server

TIMEOUT_S = 30
ADMIN = "admin-ex-7a3c9e1f5b2d4068"
INFER = "infer-ex-3e8b1d6f2a9c5047"

SERVER_YAML = """repository: {repo}
listen_address: 127.0.0.1
hosts:
  - {{name: cpu0, device: cpu, cpu_affinity: [0], threads: 1, executors: 2}}
  - {{name: cpu1, device: cpu, cpu_affinity: [1], threads: 1, executors: 2}}
auth: {{tokens_file: tokens.txt, open_health: true}}
"""

MLP_EXPERIMENT = """experiment:
  candidate: mlp_twin
  mode: shadow
  percent: 50
  window: 400
  gate: {min_compared: 200, min_agreement: 0.99, max_latency_ratio: 100}
"""


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_server_args(parser)
    return parser.parse_args()


def write_broken_model(repo):
    """mlp_broken: mlp's inputs and outputs, a forward that raises on any real input (the host's warm-up
    runs it on zeros, which it passes)."""
    import torch

    class Broken(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if bool(x.abs().sum() > 0):
                raise RuntimeError("mlp_broken fails")
            return x.reshape(x.shape[0], -1)[:, :10]

    folder = repo / "mlp_broken"
    (folder / "1").mkdir(parents=True)
    torch.jit.script(Broken()).save(str(folder / "1" / "model.pt"))
    (folder / "config.yaml").write_text((repo / "mlp" / "config.yaml").read_text())


def run_checks(grpc_address, http_address, metrics_address):
    import grpc
    import numpy as np
    from proto import grpc_service_pb2 as pb
    from proto import grpc_service_pb2_grpc as pb_grpc

    metadata = (("authorization", f"Bearer {ADMIN}"),)
    rng = np.random.default_rng(5)
    images = [rng.random((1, 1, 28, 28), dtype=np.float32) for _ in range(8)]

    def http_call(method, path, body=None, token=ADMIN):
        conn = http.client.HTTPConnection(*http_address.split(":"), timeout=TIMEOUT_S)
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        response = conn.getresponse()
        text = response.read().decode(errors="replace")
        conn.close()
        return response.status, text

    def status(model):
        code, text = http_call("GET", f"/v2/models/{model}/experiment")
        expect(f"GET experiment of {model} ({text})", code, 200)
        return json.loads(text)

    with grpc.insecure_channel(grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)

        def infer(model, i):
            request = pb.ModelInferRequest(model_name=model)
            request.inputs.add(name="input", datatype="FP32", shape=[1, 1, 28, 28])
            request.raw_input_contents.append(images[i % len(images)].tobytes())
            response = stub.ModelInfer(request, timeout=TIMEOUT_S, metadata=metadata)
            served_by = response.parameters["served_by"].string_param if "served_by" in response.parameters else ""
            return np.frombuffer(response.raw_output_contents[0], dtype=np.float32), served_by

        def load(model, requests_per_thread, threads=16):
            """16 clients; every answer (model, input index, probabilities, served_by), or the failures."""
            answers, failures, lock = [], [], threading.Lock()

            def client(t):
                for k in range(requests_per_thread):
                    i = t * requests_per_thread + k
                    try:
                        p, served_by = infer(model, i)
                        with lock:
                            answers.append((i % len(images), p, served_by))
                    except grpc.RpcError as error:
                        with lock:
                            failures.append(f"{error.code().name}: {error.details()}")

            workers = [threading.Thread(target=client, args=(t,)) for t in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            return answers, failures

        own = [infer("mlp", i)[0] for i in range(len(images))]

        # 1. Shadow to the twin, promoted by the gate. Rounds of 640 requests
        # until the gate decides (at most six): on a busy machine the server
        # skips shadows while the candidate's are in flight (by design), and
        # one round compared only 188 of the gate's 200 in a CI run. Then a
        # few more, answered after the promotion.
        answers, failures = [], []

        def send(count):
            more, more_failures = load("mlp", count)
            answers.extend(more)
            failures.extend(more_failures)

        rounds = 0
        while rounds == 0 or (status("mlp")["state"] == "running" and rounds < 6):
            send(40)
            rounds += 1
        send(2)
        expect("failed requests during the shadow", failures[:3], [])
        served = {s for _, _, s in answers}
        s = status("mlp")
        print(f"shadow mlp -> mlp_twin: {len(answers)} answers in {rounds} round(s) and one after, served_by "
              f"{sorted(served)}; state {s['state']}; window {json.dumps(s['figures']['window'])}")
        expect("mlp's experiment state", s["state"], "promoted")
        expect("mlp's decisions", len(s["decisions"]), 1)
        if "agreement 1.0000" not in s["decisions"][0]:
            raise CheckFailed(f"the promotion does not give its figures: {s['decisions'][0]!r}")
        total = s["figures"]["total"]
        if total["compared_requests"] < 200:
            raise CheckFailed(f"promoted after {total['compared_requests']} compared requests (gate: 200)")
        expect("agreement with an identical twin", total["agreement"], 1.0)
        if total["mean_kl"] > 1e-6 or total["mean_abs_diff"] > 1e-6:
            raise CheckFailed(f"an identical twin differs: {total}")
        if served != {"", "mlp_twin"}:
            raise CheckFailed(f"answers before and after the promotion: served_by {served}")
        for i, p, _ in answers:
            np.testing.assert_allclose(p, own[i], rtol=0, atol=1e-6)
        _, after = infer("mlp", 0)
        expect("served_by after the promotion", after, "mlp_twin")
        print("gate promoted mlp_twin (agreement 1, KL 0); answers unchanged; no request failed")

        # 2. A canary that errors is aborted.
        code, text = http_call("POST", "/v2/models/wide_mlp/experiment",
                               {"candidate": "mlp_broken", "mode": "canary", "percent": 30, "window": 50},
                               token=INFER)
        expect(f"POST experiment with the infer token ({text})", code, 403)
        code, text = http_call("POST", "/v2/models/wide_mlp/experiment",
                               {"candidate": "mlp_broken", "mode": "canary", "percent": 30, "window": 50,
                                "gate": {"abort_error_rate": 0.1}})
        expect(f"POST canary of wide_mlp ({text})", code, 200)
        expect("the canary's state", json.loads(text)["state"], "running")
        answers, failures = load("wide_mlp", 10)
        s = status("wide_mlp")
        if s["state"] != "aborted":
            raise CheckFailed(f"the canary is {s['state']} after {len(failures)} failures: {json.dumps(s)}")
        if "above abort_error_rate" not in s["decisions"][0]:
            raise CheckFailed(f"the abort does not say why: {s['decisions']}")
        canaried = s["canaried"]
        if len(failures) != canaried:
            raise CheckFailed(f"{len(failures)} failures for {canaried} requests given to the broken canary")
        answers, failures = load("wide_mlp", 5)
        expect("failures after the abort", failures[:3], [])
        print(f"canary wide_mlp -> mlp_broken aborted after {canaried} of its requests failed: {s['decisions'][0]}")

        # 3. A shadow that errors never fails a client, and is aborted within its window.
        code, text = http_call("POST", "/v2/models/wide_mlp/experiment",
                               {"candidate": "mlp_broken", "mode": "shadow", "percent": 50, "window": 100})
        expect(f"POST shadow of wide_mlp ({text})", code, 200)
        answers, failures = load("wide_mlp", 10)
        expect("client failures while the shadow fails", failures[:3], [])
        s = status("wide_mlp")
        expect("the failing shadow's state", s["state"], "aborted")
        cand = s["figures"]["total"]["candidate"]
        if cand["errors"] == 0 or cand["errors"] != cand["requests"] or cand["requests"] > 100:
            raise CheckFailed(f"the broken shadow was not aborted within its window of 100: {cand}")
        expect("compared requests of a shadow that always fails", s["figures"]["total"]["compared_requests"], 0)
        print(f"shadow wide_mlp -> mlp_broken: {len(answers)} answers, none failed; aborted after the candidate's "
              f"{cand['errors']} errors (shadowed {s['shadowed']}, skipped {s['skipped']})")

        # 4. Refusals.
        for body, needle in [({"candidate": "mlp_twin", "mode": "sideways"}, "unknown mode 'sideways'"),
                             ({"candidate": "mlp_twin", "percent": 120}, "percent"),
                             ({"mode": "shadow"}, "candidate"),
                             ({"candidate": "cnn_nope", "mode": "shadow"}, "'cnn_nope' is not loaded"),
                             ({"candidate": "wide_mlp", "mode": "shadow"}, "its own candidate"),
                             ({"candidate": "mlp_twin", "mode": "shadow", "sticky_by": "user"}, "only a canary")]:
            code, text = http_call("POST", "/v2/models/wide_mlp/experiment", body)
            if code not in (400, 404) or needle not in text:
                raise CheckFailed(f"POST {body}: {code} {text} (want 400/404 naming {needle!r})")
        code, text = http_call("GET", "/v2/models/no_such_model/experiment")
        expect(f"GET experiment of an unknown model ({text})", code, 404)
        print("bad experiments refused, each naming what is wrong")

        # 5. The gRPC side (our extension, proto/experiments.proto): the same status and setting.
        from proto import experiments_pb2 as xp
        from proto import experiments_pb2_grpc as xp_grpc
        experiments = xp_grpc.ExperimentServiceStub(channel)
        got = json.loads(experiments.Experiment(xp.ExperimentRequest(model="mlp"), timeout=TIMEOUT_S,
                                                metadata=metadata).status_json)
        expect("gRPC status of mlp's experiment", (got["state"], got["candidate"]), ("promoted", "mlp_twin"))
        try:
            experiments.Experiment(xp.ExperimentRequest(model="cnn", spec_json='{"candidate": "wide_mlp"}'),
                                   timeout=TIMEOUT_S, metadata=(("authorization", f"Bearer {INFER}"),))
            raise CheckFailed("setting an experiment over gRPC with the infer token succeeded")
        except grpc.RpcError as error:
            expect("gRPC set with the infer token", error.code(), grpc.StatusCode.PERMISSION_DENIED)
        got = json.loads(experiments.Experiment(
            xp.ExperimentRequest(model="cnn", spec_json='{"candidate": "wide_mlp", "mode": "canary", "percent": 100}'),
            timeout=TIMEOUT_S, metadata=metadata).status_json)
        expect("gRPC set: the answer's state", (got["state"], got["source"]), ("running", "endpoint"))
        _, by = infer("cnn", 0)
        expect("served_by after a gRPC canary of cnn at 100%", by, "wide_mlp")
        try:
            experiments.Experiment(xp.ExperimentRequest(model="cnn", spec_json='{"mode": "sideways"}'),
                                   timeout=TIMEOUT_S, metadata=metadata)
            raise CheckFailed("a bad experiment over gRPC was taken")
        except grpc.RpcError as error:
            expect("gRPC bad experiment", error.code(), grpc.StatusCode.INVALID_ARGUMENT)
            if "spec_json:1: mode: unknown mode 'sideways'" not in error.details():
                raise CheckFailed(f"the gRPC error does not name the field: {error.details()!r}")
        print("gRPC ExperimentService: status, setting (admin only), refusals naming the field")

        # 6. A canary sticky by a header: gRPC metadata or an HTTP header keeps each caller on one side.
        code, text = http_call("POST", "/v2/models/cnn/experiment",
                               {"candidate": "wide_mlp", "mode": "canary", "percent": 50, "sticky_by": "x-user"})
        expect(f"POST a sticky canary of cnn ({text})", code, 200)

        def side_over_grpc(user):
            request = pb.ModelInferRequest(model_name="cnn")
            request.inputs.add(name="input", datatype="FP32", shape=[1, 1, 28, 28])
            request.raw_input_contents.append(images[0].tobytes())
            response = stub.ModelInfer(request, timeout=TIMEOUT_S, metadata=metadata + (("x-user", user),))
            return response.parameters["served_by"].string_param if "served_by" in response.parameters else ""

        def side_over_http(user):
            body = {"inputs": [{"name": "input", "shape": [1, 1, 28, 28], "datatype": "FP32",
                                "data": images[0].reshape(-1).tolist()}]}
            conn = http.client.HTTPConnection(*http_address.split(":"), timeout=TIMEOUT_S)
            conn.request("POST", "/v2/models/cnn/infer", body=json.dumps(body),
                         headers={"Authorization": f"Bearer {ADMIN}", "X-User": user})
            response = conn.getresponse()
            answer = json.loads(response.read())
            conn.close()
            expect(f"HTTP infer as {user}", response.status, 200)
            return answer.get("parameters", {}).get("served_by", "")

        sides = {}
        for user in [f"user-{k}" for k in range(16)]:
            seen = {side_over_grpc(user) for _ in range(3)} | {side_over_http(user) for _ in range(2)}
            if len(seen) != 1:
                raise CheckFailed(f"{user} moved between sides: {seen}")
            sides[user] = seen.pop()
        on_candidate = sum(1 for side in sides.values() if side == "wide_mlp")
        if not 0 < on_candidate < len(sides):
            raise CheckFailed(f"a 50% sticky canary put {on_candidate} of {len(sides)} callers on the candidate")
        print(f"sticky canary by header x-user: {on_candidate} of {len(sides)} callers on the candidate, "
              "each on one side over gRPC metadata and HTTP headers alike")

        # 7. /metrics: the figures and decisions, labelled model and candidate.
        conn = http.client.HTTPConnection(*metrics_address.split(":"), timeout=TIMEOUT_S)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        for line in ['ensemble_experiment_decisions_total{model="mlp",candidate="mlp_twin",decision="promote"} 1',
                     'ensemble_experiment_decisions_total{model="wide_mlp",candidate="mlp_broken",decision="abort"} 2',
                     'ensemble_experiment_agreement{model="mlp",candidate="mlp_twin"} 1',
                     'ensemble_experiment_state{model="mlp",candidate="mlp_twin",state="promoted"} 1',
                     'ensemble_experiment_error_rate{model="wide_mlp",candidate="mlp_broken",side="candidate"} 1']:
            if line not in text:
                raise CheckFailed(f"/metrics lacks {line!r}:\n" + "\n".join(
                    m for m in text.splitlines() if m.startswith("ensemble_experiment")))
        print("/metrics shows the experiments' figures and decisions")


def main():
    args = parse_args()
    sys.path.insert(0, args.stubs)
    with tempfile.TemporaryDirectory(prefix="es_experiments.") as work:
        work = pathlib.Path(work)
        repo = work / "repo"

        def setup():
            make_demo(args.make_demo, repo, "--seed", "1", "--train-steps", "0")
            shutil.copytree(repo / "mlp", repo / "mlp_twin")
            write_broken_model(repo)
            with open(repo / "mlp" / "config.yaml", "a") as f:
                f.write(MLP_EXPERIMENT)
            (work / "tokens.txt").write_text(f"# role token\nadmin {ADMIN}\ninfer {INFER}\n")
            (work / "server.yaml").write_text(SERVER_YAML.format(repo=repo))

        rc = run_with_server(args.server_bin, work, setup, run_checks, (), ("grpc", "http", "metrics"))
    if rc == 0:
        print("PASS: experiments (shadow, canary, gate) against ensemble-server")
    return rc


if __name__ == "__main__":
    sys.exit(main())
