#!/usr/bin/python3
"""ctest `python_drift`: the ensemble's own drift signal moves when the inputs shift.

    check_drift.py --server-bin BIN --make-demo BIN --stubs DIR

Writes the demo repository (its members trained on Fashion-MNIST), starts
ensemble-server and sends demo_ensemble 2000 Fashion-MNIST test images,
then the same images shifted: inverted (1 - x), then with heavy Gaussian
noise. After each phase it reads /metrics and takes that phase's mean of
ensemble_disagreement_ratio (members disagreeing per row) and
ensemble_answer_entropy_nats (the answer's uncertainty) from the
histograms' sums and counts. Checks: every row of every phase is observed
once in each histogram, and each shifted phase moves at least one of the
two means out of the band docker/monitoring/alerts.yaml alerts on (either
way: disagreement by half its mean on the test images, at least 0.02;
entropy by a quarter, at least 0.05 nats), the noisy phase both.
(Inverted images are a lesson: the members agree on them, confidently and
wrongly, so disagreement and entropy fall; the alerts fire both ways for
that reason.) Needs Debian's dataset-fashion-mnist. Exit 0 = pass.
"""
import argparse
import http.client
import os
import pathlib
import re
import sys
import tempfile

from server_check import CheckFailed, add_server_args, expect, make_demo, run_with_server

DATA = "/usr/share/datasets/fashion-mnist"
ROWS = 2000
BATCH = 50
TIMEOUT_S = 30

SERVER_YAML = """repository: {repo}
listen_address: 127.0.0.1
hosts:
  - {{name: cpu0, device: cpu, cpu_affinity: [0], threads: 1, executors: 1}}
  - {{name: cpu1, device: cpu, cpu_affinity: [1], threads: 1, executors: 1}}
"""


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_server_args(parser)
    return parser.parse_args()


def histogram_totals(metrics_address, family, model):
    """(sum, count) of `family`'s series for `model` in /metrics now."""
    conn = http.client.HTTPConnection(*metrics_address.split(":"), timeout=TIMEOUT_S)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    totals = []
    for part in ("sum", "count"):
        pattern = rf'^{family}_{part}\{{[^}}]*model="{model}"[^}}]*\}} (\S+)$'
        values = [float(v) for v in re.findall(pattern, text, re.M)]
        if not values:
            raise CheckFailed(f"/metrics has no {family}_{part} for {model}")
        totals.append(sum(values))
    return totals


def run_checks(grpc_address, http_address, metrics_address):
    import grpc
    import numpy as np
    from proto import grpc_service_pb2 as pb
    from proto import grpc_service_pb2_grpc as pb_grpc
    from kserve_client import fashion_mnist_test

    images, _ = fashion_mnist_test(DATA, 0, ROWS)
    images = np.ascontiguousarray(images, dtype=np.float32).reshape(-1, 1, 28, 28)
    rng = np.random.default_rng(7)
    phases = [("test images", images),
              ("inverted", 1.0 - images),
              ("noisy", np.clip(images + rng.normal(0, 0.5, images.shape), 0, 1).astype(np.float32))]
    families = ("ensemble_disagreement_ratio", "ensemble_answer_entropy_nats")
    means = {}
    with grpc.insecure_channel(grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        before = {f: histogram_totals(metrics_address, f, "demo_ensemble") for f in families}
        for name, data in phases:
            for i in range(0, ROWS, BATCH):
                request = pb.ModelInferRequest(model_name="demo_ensemble")
                request.inputs.add(name="input", datatype="FP32", shape=[BATCH, 1, 28, 28])
                request.raw_input_contents.append(np.ascontiguousarray(data[i:i + BATCH]).tobytes())
                stub.ModelInfer(request, timeout=TIMEOUT_S)
            after = {f: histogram_totals(metrics_address, f, "demo_ensemble") for f in families}
            for f in families:
                total, count = after[f][0] - before[f][0], after[f][1] - before[f][1]
                expect(f"{name}: rows observed in {f}", count, ROWS)
                means[(name, f)] = total / count
            before = after
            print(f"{name}: mean disagreement {means[(name, families[0])]:.4f}, "
                  f"mean entropy {means[(name, families[1])]:.4f} nats over {ROWS} rows")
    # The alerts' bands (docker/monitoring/alerts.yaml): relative share, floor.
    bands = {families[0]: (0.5, 0.02), families[1]: (0.25, 0.05)}
    for name in ("inverted", "noisy"):
        moved = []
        for f in families:
            usual = means[("test images", f)]
            share, floor = bands[f]
            change = means[(name, f)] - usual
            if abs(change) > max(share * usual, floor):
                moved.append(f"{f} {'+' if change > 0 else ''}{change:.4f}")
            elif name == "noisy":
                raise CheckFailed(f"noisy images did not move {f} out of its band: {means[(name, f)]:.4f} against "
                                  f"{usual:.4f}")
        if not moved:
            raise CheckFailed(f"{name} images moved neither signal out of the alerts' bands")
        print(f"{name}: out of the alerts' bands: {', '.join(moved)}")


def main():
    args = parse_args()
    sys.path[:0] = [args.stubs, str(pathlib.Path(__file__).resolve().parents[2] / "clients" / "python")]
    if not os.path.isdir(DATA):
        print(f"SKIP: {DATA} missing (Debian's dataset-fashion-mnist)")
        return 0
    with tempfile.TemporaryDirectory(prefix="es_drift.") as work:
        work = pathlib.Path(work)
        repo = work / "repo"

        def setup():
            make_demo(args.make_demo, repo, "--seed", "1")
            (work / "server.yaml").write_text(SERVER_YAML.format(repo=repo))

        rc = run_with_server(args.server_bin, work, setup, run_checks, (), ("grpc", "http", "metrics"))
    if rc == 0:
        print("PASS: the drift signal moves with the inputs")
    return rc


if __name__ == "__main__":
    sys.exit(main())
