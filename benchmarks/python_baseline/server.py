#!/usr/bin/python3
"""A Python KServe v2 gRPC ensemble server: the baseline of benchmarks/run.sh.

Built the way the usual PyTorch advice says an ensemble should be served from
Python: a `grpcio` server (a ThreadPoolExecutor with about as many threads as
calls in flight), and one worker process per member started with
`torch.multiprocessing` (spawn), each running its TorchScript member
(`torch.jit.load`, eval, `inference_mode`, one intra-op thread). A request's
handler gives it a correlation id, puts the input on every member's queue,
waits for all members' outputs (one collector thread routes results from the
shared result queue to the waiting request by id), averages them and answers.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/python_baseline/server.py \
        --repository build/demo_repo --ensemble demo_ensemble --port 0

prints `listening on 127.0.0.1:PORT` once every member is loaded. It speaks
the same proto as ensemble-server (proto/grpc_service.proto; stubs from the
build target es_python_stubs under build/python): ServerLive, ServerReady,
ServerMetadata, ModelReady, ModelMetadata, ModelInfer (FP32 input as
raw_input_contents or typed fp32_contents; the answer in raw_output_contents,
named as the ensemble's output, e.g. `probabilities`). Other RPCs answer
UNIMPLEMENTED (ensemble-loadgen then shows no server-side stage times).
SIGTERM or SIGINT stops it: in-flight calls finish, then the workers exit.
Needs Debian's python3-torch, python3-grpcio, python3-numpy, python3-yaml.
"""
import argparse
import itertools
import os
import signal
import sys
import threading
from concurrent import futures

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_STUBS = os.path.normpath(os.path.join(HERE, "..", "..", "build", "python"))


def use_the_cpus_blas_kernels():
    """Names the CPU's kernel class to OpenBLAS before torch loads it.

    The same kernel classes as ensemble-server's hosts choose
    (torch_utils/blas_kernels.h): Debian 12's OpenBLAS falls back to its
    generic Prescott kernels on CPUs it does not know, which made a batch-1
    MLP forward about four times slower on the development VM. Python cannot
    ask OpenBLAS before torch loads it, so unlike the hosts (which only act
    when OpenBLAS picked Prescott) this always names the class the CPU's
    features allow; where OpenBLAS knows the CPU, that is the same class or
    one it derives from. Set in the environment, so the member workers
    (spawned) inherit it.
    """
    if "OPENBLAS_CORETYPE" in os.environ:
        return
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), [])
    except OSError:
        return
    flags = set(flags)
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "SKYLAKEX"
    elif {"avx2", "fma"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "HASWELL"
    elif "avx" in flags:
        os.environ["OPENBLAS_CORETYPE"] = "SANDYBRIDGE"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8001, help="gRPC port on 127.0.0.1 (0: a free one), default 8001")
    parser.add_argument("--repository", required=True, help="model repository (the layout ensemble-server reads)")
    parser.add_argument("--ensemble", required=True, help="the ensemble to serve (platform: ensemble in its config.yaml)")
    parser.add_argument("--threads", type=int, default=32,
                        help="gRPC handler threads (ThreadPoolExecutor max_workers): set it to the calls in flight; "
                             "default 32")
    parser.add_argument("--transport", choices=["pickle", "shared"], default="pickle",
                        help="how tensors cross the queues: pickle (numpy arrays pickled through the queue's pipe, "
                             "the default: faster for these sizes) or shared (torch tensors in shared memory, "
                             "torch.multiprocessing's reducers)")
    parser.add_argument("--stubs", default=DEFAULT_STUBS,
                        help="folder holding the generated `proto` package (default build/python)")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error("--port must be in [0, 65535]")
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    return args


class ConfigError(Exception):
    pass


def latest_version(model_dir):
    versions = [int(d) for d in os.listdir(model_dir) if d.isdigit() and
                os.path.isfile(os.path.join(model_dir, d, "model.pt"))]
    if not versions:
        raise ConfigError(f"{model_dir}: no <version>/model.pt")
    return max(versions)


def load_ensemble(repository, name):
    """Reads <repository>/<name>/config.yaml: members (model paths, weights), combine, inputs, outputs."""
    import yaml

    def read(model):
        path = os.path.join(repository, model, "config.yaml")
        try:
            with open(path, encoding="utf-8") as f:
                return yaml.safe_load(f) or {}
        except OSError as e:
            raise ConfigError(f"{path}: {e.strerror}") from e

    config = read(name)
    if config.get("platform") != "ensemble":
        raise ConfigError(f"{name}: platform is {config.get('platform')!r}, not ensemble")
    ensemble = config.get("ensemble") or {}
    combine = ensemble.get("combine", "mean")
    if combine not in ("mean", "weighted_mean"):
        raise ConfigError(f"{name}: combine {combine!r}: this baseline does mean and weighted_mean")
    members = []
    for entry in ensemble.get("members") or []:
        model = entry["model"]
        model_dir = os.path.join(repository, model)
        member_config = read(model)
        version = latest_version(model_dir)
        members.append({
            "name": model,
            "path": os.path.join(model_dir, str(version), "model.pt"),
            "weight": float(entry.get("weight", 1.0)) if combine == "weighted_mean" else 1.0,
            "config": member_config,
        })
    if not members:
        raise ConfigError(f"{name}: no members")
    first = members[0]["config"]
    inputs = config.get("inputs") or first.get("inputs")
    outputs = config.get("outputs") or first.get("outputs")
    if len(inputs) != 1 or inputs[0]["datatype"] != "FP32" or len(outputs) != 1:
        raise ConfigError(f"{name}: this baseline serves one FP32 input and one output")
    total = sum(m["weight"] for m in members)
    return {
        "name": name,
        "version": "1",
        "max_batch_size": int(config.get("max_batch_size", first.get("max_batch_size", 0))),
        "input": inputs[0],
        "output": outputs[0],
        "members": members,
        "weights": [m["weight"] / total for m in members],
    }


class _Pending:
    """One request in flight: its members' outputs, and an event set when all are in (or one failed)."""
    __slots__ = ("outputs", "remaining", "error", "done")

    def __init__(self, members):
        self.outputs = [None] * members
        self.remaining = members
        self.error = None
        self.done = threading.Event()


class EnsembleRunner:
    """The member worker processes, their queues, and the collector routing results to requests by id."""

    def __init__(self, spec, transport):
        import torch.multiprocessing as mp

        import member_worker

        self.spec = spec
        self.transport = transport
        self.members = len(spec["members"])
        ctx = mp.get_context("spawn")  # the safe start method with torch (no forked OpenMP/locks state)
        self.results = ctx.Queue()
        self.requests = [ctx.Queue() for _ in spec["members"]]
        dims = spec["input"]["dims"]
        self.processes = [
            ctx.Process(target=member_worker.run_member, name=f"member-{m['name']}", daemon=True,
                        args=(i, m["path"], dims, transport, self.requests[i], self.results))
            for i, m in enumerate(spec["members"])
        ]
        for p in self.processes:
            p.start()
        for _ in self.processes:  # wait until every member is loaded and warmed up
            tag, index, _, error = self.results.get()
            assert tag == "ready"
            if error is not None:
                self.stop()
                raise RuntimeError(f"member {spec['members'][index]['name']}: {error}")
        self._ids = itertools.count(1)
        self._pending = {}
        self._lock = threading.Lock()
        self._collector = threading.Thread(target=self._collect, name="collector", daemon=True)
        self._collector.start()

    def _collect(self):
        while True:
            message = self.results.get()
            if message is None:
                return
            request_id, index, y, error = message
            with self._lock:
                pending = self._pending.get(request_id)
            if pending is None:  # the request gave up (deadline) and left
                continue
            if error is not None:
                pending.error = f"member {self.spec['members'][index]['name']}: {error}"
                pending.done.set()
                continue
            pending.outputs[index] = y
            pending.remaining -= 1  # only this thread writes it
            if pending.remaining == 0:
                pending.done.set()

    def infer(self, x, timeout):
        """Runs every member on x (numpy float32, batch first) and returns their combined output, or raises."""
        import numpy as np
        import torch

        request_id = next(self._ids)  # itertools.count is atomic under the GIL
        pending = _Pending(self.members)
        with self._lock:
            self._pending[request_id] = pending
        try:
            # shared: moved into shared memory once here, before the queues' feeder threads pickle it for
            # every member (handles to the same storage, no copies)
            item = torch.from_numpy(np.array(x)).share_memory_() if self.transport == "shared" else x
            for q in self.requests:
                q.put((request_id, item))
            if not pending.done.wait(timeout):
                raise TimeoutError("deadline exceeded waiting for the members")
        finally:
            with self._lock:
                del self._pending[request_id]
        if pending.error is not None:
            raise RuntimeError(pending.error)
        outputs = pending.outputs
        if self.transport == "shared":
            outputs = [y.numpy() for y in outputs]
        weights = self.spec["weights"]
        combined = outputs[0] * np.float32(weights[0])
        for w, y in zip(weights[1:], outputs[1:]):
            combined += y * np.float32(w)
        return combined.astype(np.float32, copy=False)

    def stop(self):
        for q in self.requests:
            q.put(None)
        for p in self.processes:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        if getattr(self, "_collector", None) is not None:
            self.results.put(None)
            self._collector.join(timeout=5)


def make_servicer(pb2, pb2_grpc, grpc, spec, runner):
    import numpy as np

    name = spec["name"]
    in_spec, out_spec = spec["input"], spec["output"]
    in_dims = [int(d) for d in in_spec["dims"]]
    row_elems = int(np.prod(in_dims)) if in_dims else 1
    max_batch = spec["max_batch_size"]

    def find_model(request_name, version, context):
        if request_name != name:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model '{request_name}'")
        if version and version != spec["version"]:
            context.abort(grpc.StatusCode.NOT_FOUND, f"model '{name}' has no served version '{version}'")

    def invalid(context, message):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"model '{name}' {message}")

    class Servicer(pb2_grpc.GRPCInferenceServiceServicer):
        def ServerLive(self, request, context):
            return pb2.ServerLiveResponse(live=True)

        def ServerReady(self, request, context):
            return pb2.ServerReadyResponse(ready=True)

        def ServerMetadata(self, request, context):
            import torch
            return pb2.ServerMetadataResponse(name="python-baseline", version=f"torch {torch.__version__}")

        def ModelReady(self, request, context):
            find_model(request.name, request.version, context)
            return pb2.ModelReadyResponse(ready=True)

        def ModelMetadata(self, request, context):
            find_model(request.name, request.version, context)
            resp = pb2.ModelMetadataResponse(name=name, versions=[spec["version"]], platform="ensemble")
            batch = [-1] if max_batch > 0 else []
            resp.inputs.add(name=in_spec["name"], datatype=in_spec["datatype"], shape=batch + in_dims)
            resp.outputs.add(name=out_spec["name"], datatype=out_spec["datatype"],
                             shape=batch + [int(d) for d in out_spec["dims"]])
            return resp

        def ModelInfer(self, request, context):
            find_model(request.model_name, request.model_version, context)
            if len(request.inputs) != 1 or request.inputs[0].name != in_spec["name"]:
                invalid(context, f"expects one input '{in_spec['name']}', got "
                                 f"{[t.name for t in request.inputs]}")
            tensor = request.inputs[0]
            if tensor.datatype != "FP32":
                invalid(context, f"input '{tensor.name}': datatype {tensor.datatype}, expected FP32")
            shape = list(tensor.shape)
            if len(shape) != len(in_dims) + 1 or shape[1:] != in_dims:
                invalid(context, f"input '{tensor.name}': shape {shape}, expected [-1, {in_dims}]")
            rows = shape[0]
            if not 1 <= rows <= max_batch:
                invalid(context, f"input '{tensor.name}': batch size {rows} is outside [1, {max_batch}]")
            count = rows * row_elems
            typed = tensor.contents.fp32_contents
            if request.raw_input_contents:
                if len(typed) > 0:
                    invalid(context, f"input '{tensor.name}': both raw and typed contents")
                raw = request.raw_input_contents[0]
                if len(raw) != 4 * count:
                    invalid(context, f"input '{tensor.name}': {len(raw)} bytes, shape {shape} needs {4 * count}")
                x = np.frombuffer(raw, dtype=np.float32).reshape(shape)
            else:
                if len(typed) != count:
                    invalid(context, f"input '{tensor.name}': {len(typed)} values, shape {shape} needs {count}")
                x = np.asarray(typed, dtype=np.float32).reshape(shape)
            for wanted in request.outputs:
                if wanted.name != out_spec["name"]:
                    invalid(context, f"has no output '{wanted.name}'")
            remaining = context.time_remaining()
            try:
                y = runner.infer(x, timeout=remaining)
            except TimeoutError as e:
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"model '{name}': {e}")
            except RuntimeError as e:
                context.abort(grpc.StatusCode.INTERNAL, f"model '{name}': {e}")
            resp = pb2.ModelInferResponse(model_name=name, model_version=spec["version"], id=request.id)
            resp.outputs.add(name=out_spec["name"], datatype="FP32", shape=list(y.shape))
            resp.raw_output_contents.append(y.tobytes())
            return resp

    return Servicer()


def main(argv):
    use_the_cpus_blas_kernels()
    args = parse_args(argv)
    sys.path.insert(0, HERE)  # member_worker (the spawned workers inherit sys.path)
    sys.path.insert(0, args.stubs)
    try:
        import grpc
        from proto import grpc_service_pb2 as pb2
        from proto import grpc_service_pb2_grpc as pb2_grpc
    except ImportError as e:
        print(f"server.py: {e} (stubs: cmake --build build --target es_python_stubs; "
              "run with /usr/bin/python3 for Debian's python3-grpcio)", file=sys.stderr)
        return 1
    try:
        spec = load_ensemble(args.repository, args.ensemble)
    except (ConfigError, KeyError, TypeError) as e:
        print(f"server.py: {e}", file=sys.stderr)
        return 1

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    runner = EnsembleRunner(spec, args.transport)  # workers first: spawn before gRPC starts its threads
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.threads),
                         options=[("grpc.max_receive_message_length", 64 << 20),
                                  ("grpc.max_send_message_length", 64 << 20),
                                  ("grpc.so_reuseport", 0)])
    pb2_grpc.add_GRPCInferenceServiceServicer_to_server(make_servicer(pb2, pb2_grpc, grpc, spec, runner), server)
    port = server.add_insecure_port(f"127.0.0.1:{args.port}")
    if port == 0:
        print(f"server.py: cannot listen on 127.0.0.1:{args.port}", file=sys.stderr)
        runner.stop()
        return 1
    server.start()
    members = ", ".join(m["name"] for m in spec["members"])
    print(f"listening on 127.0.0.1:{port}", flush=True)
    print(f"serving {spec['name']} (members {members}; {args.threads} handler threads, "
          f"transport {args.transport})", flush=True)
    while not stop.wait(1.0):
        if not all(p.is_alive() for p in runner.processes):
            print("server.py: a member worker died", file=sys.stderr)
            break
    server.stop(grace=5).wait()
    runner.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
