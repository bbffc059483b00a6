#!/usr/bin/python3
"""Accuracy, NLL and throughput of served models on the whole Fashion-MNIST test set.

For benchmarks/run_cascade.sh: the best single member, the full
mean ensemble and its cascade variant, each measured through ensemble-server
on the same 10,000 test images, at the same concurrency, one after the other
and interleaved over the rounds (round 1: every model, round 2: every model,
...) so that a drift of the shared machine's speed hits them alike.

Each pass sends the test set in requests of --batch rows from --concurrency
client threads (one channel each, a shared queue of requests); rows/s is
10,000 over the pass's wall time, the median over --rounds timed passes
after one warm-up pass. Accuracy and NLL come from the answers of the first
timed pass. For a cascade, output `exit_stage` is asked for too and the
rows leaving at each stage are counted.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/cascade/measure.py \
        --server 127.0.0.1:8001 --models convnet_2 fmnist_cascade_ensemble fmnist_cascade_ensemble_cascade \
        --json out.json

Prints one line per pass (progress) and the summary; --json writes it.
"""
import argparse
import json
import os
import queue
import statistics
import sys
import threading
import time

import grpc
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
from kserve_client import fashion_mnist_test, raw_output  # noqa: E402
from proto import grpc_service_pb2, grpc_service_pb2_grpc  # noqa: E402

TIMEOUT_S = 60


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server", required=True, help="HOST:PORT of ensemble-server's gRPC endpoint")
    p.add_argument("--models", nargs="+", required=True, help="models to measure, in this order each round")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="Fashion-MNIST folder (gzip IDX)")
    p.add_argument("--batch", type=int, default=64, help="rows per request (default 64)")
    p.add_argument("--concurrency", type=int, default=4, help="client threads, one request in flight each")
    p.add_argument("--rounds", type=int, default=3, help="timed passes per model (default 3)")
    p.add_argument("--json", help="write the summary here")
    args = p.parse_args(argv)
    if args.batch < 1 or args.concurrency < 1 or args.rounds < 1:
        p.error("--batch, --concurrency and --rounds must be >= 1")
    return args


def request_for(model, images, cascade):
    r = grpc_service_pb2.ModelInferRequest(model_name=model)
    t = r.inputs.add(name="input", datatype="FP32", shape=[len(images), 1, 28, 28])
    del t  # shape and type only: the bytes go in raw_input_contents
    r.raw_input_contents.append(np.ascontiguousarray(images, dtype=np.float32).tobytes())
    if cascade:
        r.outputs.add(name="probabilities")
        r.outputs.add(name="exit_stage")
    return r


def one_pass(stubs, requests):
    """Sends every request once; returns (wall seconds, answers by request index)."""
    work = queue.Queue()
    for i in range(len(requests)):
        work.put(i)
    answers = [None] * len(requests)
    errors = []

    def client(stub):
        while True:
            try:
                i = work.get_nowait()
            except queue.Empty:
                return
            try:
                answers[i] = stub.ModelInfer(requests[i], timeout=TIMEOUT_S)
            except grpc.RpcError as e:  # noqa: PERF203 - one failure stops the benchmark
                errors.append(f"request {i}: {e.code().name}: {e.details()}")
                return

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(s,)) for s in stubs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise SystemExit("measure.py: " + errors[0])
    return wall, answers


def score(answers, labels, cascade):
    probs = np.concatenate([raw_output(a, "probabilities") for a in answers]).astype(np.float64)
    accuracy = float(np.mean(np.argmax(probs, axis=1) == labels))
    nll = float(np.mean(-np.log(np.maximum(probs[np.arange(len(labels)), labels], 1e-12))))
    out = {"accuracy": accuracy, "nll": nll}
    if cascade:
        exits = np.concatenate([raw_output(a, "exit_stage") for a in answers])
        out["exits_per_stage"] = [int(n) for n in np.bincount(exits)]
    return out


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    images, labels = fashion_mnist_test(args.data, 0, 10000)
    images = images.reshape(-1, 1, 28, 28)
    channels = [grpc.insecure_channel(args.server, options=[("grpc.max_receive_message_length", 64 << 20)])
                for _ in range(args.concurrency)]
    stubs = [grpc_service_pb2_grpc.GRPCInferenceServiceStub(c) for c in channels]
    plans = {}
    for model in args.models:
        cascade = model.endswith("_cascade")
        plans[model] = (cascade, [request_for(model, images[i:i + args.batch], cascade)
                                  for i in range(0, len(labels), args.batch)])
    results = {m: {"rows_per_s": []} for m in args.models}
    for model, (cascade, requests) in plans.items():  # warm-up
        wall, _ = one_pass(stubs, requests)
        print(f"warm-up {model}: {len(labels) / wall:,.0f} rows/s", flush=True)
    for r in range(args.rounds):
        for model, (cascade, requests) in plans.items():
            wall, answers = one_pass(stubs, requests)
            results[model]["rows_per_s"].append(len(labels) / wall)
            if r == 0:
                results[model].update(score(answers, labels, cascade))
            print(f"round {r + 1}/{args.rounds} {model}: {len(labels) / wall:,.0f} rows/s", flush=True)
    for model in args.models:
        results[model]["median_rows_per_s"] = statistics.median(results[model]["rows_per_s"])
    summary = {"batch": args.batch, "concurrency": args.concurrency, "rounds": args.rounds, "models": results}
    for model, m in results.items():
        extra = f", exits per stage {m['exits_per_stage']}" if "exits_per_stage" in m else ""
        print(f"{model}: accuracy {100 * m['accuracy']:.2f}%, NLL {m['nll']:.4f}, "
              f"{m['median_rows_per_s']:,.0f} rows/s (median of {args.rounds}){extra}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
