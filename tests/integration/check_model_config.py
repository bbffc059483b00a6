#!/usr/bin/python3
"""ctest `python_model_config`: the ModelConfig RPC of a real ensemble-server.

    check_model_config.py --server-bin BIN --make-demo BIN --stubs DIR

Writes the demo repository into a temp dir and gives `mlp` dynamic batching,
two instances per host and version_policy `all`, and `wide_mlp` a `specific`
policy; starts ensemble-server on a free port (--grpc-port 0), then calls
inference.GRPCInferenceService/ModelConfig with grpcio stubs generated from
proto/ and checks every field we fill for mlp, wide_mlp, cnn and the ensemble,
plus NOT_FOUND for an unknown model and for a version the model does not
serve. Finally SIGTERMs the server and checks it exits 0. Everything it
writes is removed at the end. Exit 0 = pass; failures name the field.
"""
import argparse
import pathlib
import sys
import tempfile

from server_check import CheckFailed, add_server_args, expect, make_demo, run_with_server

TIMEOUT_S = 30  # per RPC

SERVER_YAML = """repository: {repo}
listen_address: 127.0.0.1
hosts:
  - {{name: cpu0, device: cpu, cpu_affinity: [0], threads: 1, executors: 1}}
  - {{name: cpu1, device: cpu, cpu_affinity: [1], threads: 1, executors: 1}}
limits: {{max_request_bytes: 1048576, heartbeat_timeout_ms: 5000, drain_timeout_ms: 5000}}
"""

MLP_EXTRA = """instances_per_host: 2
dynamic_batching:
  max_queue_delay_us: 500
  preferred_batch_sizes: [8, 16]
  max_queue_size: 100
  priority_levels: 3
  default_priority: 2
version_policy: {all: {}}
"""
WIDE_MLP_EXTRA = "version_policy: {specific: {versions: [1]}}\n"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_server_args(parser)
    return parser.parse_args()


def check_tensors(pb, config, kind):
    tensors = getattr(config, kind)
    expect(f"{config.name}.{kind} count", len(tensors), 1)
    want_name, want_dims = ("input", [1, 28, 28]) if kind == "input" else ("probabilities", [10])
    expect(f"{config.name}.{kind}[0].name", tensors[0].name, want_name)
    expect(f"{config.name}.{kind}[0].data_type", pb.DataType.Name(tensors[0].data_type), "TYPE_FP32")
    expect(f"{config.name}.{kind}[0].dims", list(tensors[0].dims), want_dims)  # no batch dim


def check_torchscript(pb, config, name, policy, groups_count):
    expect(f"{name}.name", config.name, name)
    expect(f"{name}.platform", config.platform, "pytorch_libtorch")
    expect(f"{name}.backend", config.backend, "pytorch")
    expect(f"{name}.max_batch_size", config.max_batch_size, 64)
    check_tensors(pb, config, "input")
    check_tensors(pb, config, "output")
    expect(f"{name}.version_policy", config.version_policy.WhichOneof("policy_choice"), policy)
    expect(f"{name}.instance_group count", len(config.instance_group), 1)
    group = config.instance_group[0]
    expect(f"{name}.instance_group[0].kind", pb.ModelInstanceGroup.Kind.Name(group.kind), "KIND_CPU")
    expect(f"{name}.instance_group[0].count", group.count, groups_count)


def run_checks(address, stubs):
    import grpc
    from proto import grpc_service_pb2 as service
    from proto import grpc_service_pb2_grpc as service_grpc
    from proto import model_config_pb2 as pb

    with grpc.insecure_channel(address) as channel:
        stub = service_grpc.GRPCInferenceServiceStub(channel)

        def config_of(name, version=""):
            return stub.ModelConfig(service.ModelConfigRequest(name=name, version=version), timeout=TIMEOUT_S).config

        mlp = config_of("mlp")
        check_torchscript(pb, mlp, "mlp", "all", 2)  # instances_per_host 2 on one host
        expect("mlp.scheduling_choice", mlp.WhichOneof("scheduling_choice"), "dynamic_batching")
        b = mlp.dynamic_batching
        expect("mlp.dynamic_batching.preferred_batch_size", list(b.preferred_batch_size), [8, 16])
        expect("mlp.dynamic_batching.max_queue_delay_microseconds", b.max_queue_delay_microseconds, 500)
        expect("mlp.dynamic_batching.priority_levels", b.priority_levels, 3)
        expect("mlp.dynamic_batching.default_priority_level", b.default_priority_level, 2)
        expect("mlp.dynamic_batching.default_queue_policy.max_queue_size", b.default_queue_policy.max_queue_size,
               100)
        expect("mlp version 1", config_of("mlp", "1"), mlp)

        wide = config_of("wide_mlp")
        check_torchscript(pb, wide, "wide_mlp", "specific", 1)
        expect("wide_mlp.version_policy.specific.versions", list(wide.version_policy.specific.versions), [1])
        expect("wide_mlp.scheduling_choice", wide.WhichOneof("scheduling_choice"), None)

        cnn = config_of("cnn")
        check_torchscript(pb, cnn, "cnn", "latest", 1)
        expect("cnn.version_policy.latest.num_versions", cnn.version_policy.latest.num_versions, 1)

        ens = config_of("demo_ensemble")
        expect("demo_ensemble.platform", ens.platform, "ensemble")
        expect("demo_ensemble.backend", ens.backend, "")
        expect("demo_ensemble.max_batch_size", ens.max_batch_size, 64)
        check_tensors(pb, ens, "input")
        check_tensors(pb, ens, "output")
        expect("demo_ensemble.instance_group", len(ens.instance_group), 0)
        expect("demo_ensemble.scheduling_choice", ens.WhichOneof("scheduling_choice"), "ensemble_scheduling")
        steps = ens.ensemble_scheduling.step
        expect("demo_ensemble steps", [s.model_name for s in steps], ["mlp", "wide_mlp", "cnn"])
        for s in steps:
            expect(f"step {s.model_name}.model_version", s.model_version, -1)
            expect(f"step {s.model_name}.input_map", dict(s.input_map), {"input": "input"})
            expect(f"step {s.model_name}.output_map", dict(s.output_map), {"probabilities": "probabilities"})

        for name, version, needle in [("no_such_model", "", "no_such_model"), ("mlp", "9", "'9'")]:
            try:
                config_of(name, version)
            except grpc.RpcError as error:
                expect(f"ModelConfig({name!r}, {version!r}) status", error.code(), grpc.StatusCode.NOT_FOUND)
                if needle not in error.details():
                    raise CheckFailed(f"ModelConfig({name!r}, {version!r}) error does not name {needle}: "
                                      f"{error.details()!r}")
            else:
                raise CheckFailed(f"ModelConfig({name!r}, {version!r}) succeeded; want NOT_FOUND")

        meta = stub.ServerMetadata(service.ServerMetadataRequest(), timeout=TIMEOUT_S)
        if "model_configuration" not in meta.extensions:
            raise CheckFailed(f"ServerMetadata.extensions lacks model_configuration: {list(meta.extensions)}")
        print("ModelConfig checked for mlp, wide_mlp, cnn, demo_ensemble; NOT_FOUND for unknown model/version")


def main():
    args = parse_args()
    sys.path.insert(0, args.stubs)
    with tempfile.TemporaryDirectory(prefix="es_model_config.") as work:
        work = pathlib.Path(work)
        repo = work / "repo"

        def setup():
            make_demo(args.make_demo, repo, "--seed", "1")
            with open(repo / "mlp" / "config.yaml", "a") as f:
                f.write(MLP_EXTRA)
            with open(repo / "wide_mlp" / "config.yaml", "a") as f:
                f.write(WIDE_MLP_EXTRA)
            (work / "server.yaml").write_text(SERVER_YAML.format(repo=repo))

        rc = run_with_server(args.server_bin, work, setup, lambda address: run_checks(address, args.stubs))
    if rc == 0:
        print("PASS: ModelConfig against ensemble-server")
    return rc


if __name__ == "__main__":
    sys.exit(main())
