#!/usr/bin/python3
"""ctest `python_model_upload`: models uploaded through the load API.

    check_model_upload.py --server-bin BIN --make-demo BIN --stubs DIR

Starts ensemble-server (explicit mode, bearer tokens, `model_upload_dir` in
its temp dir) on the demo repository and does what tritonclient's
load_model(name, config=..., files=...) does: RepositoryModelLoad with a
`config` string parameter (a model config as JSON: mlp's own, read back with
ModelConfig and json_format, as get_model_config(as_json=True) gives it)
and `file:1/model.pt` bytes parameters; over HTTP the same with the files
as base64. Checks that:
  - the upload serves the answers of the model file uploaded (mlp's, then
    wide_mlp's after a second upload under the same name), and only the
    newest upload's folder is kept;
  - the infer token is refused PERMISSION_DENIED;
  - a bad config, a model file that does not load, file paths that climb
    out (../, absolute), files without a config, are refused with errors
    naming what is wrong, nothing is written outside the upload folder, and
    the previous upload keeps serving;
  - a config alone overrides a repository model's config (dynamic batching
    on wide_mlp, seen in ModelConfig);
  - unload removes the upload's folder; at exit (SIGTERM, status 0) the
    upload folder is empty.
Everything it writes is removed at the end. Exit 0 = pass.
"""
import argparse
import base64
import http.client
import json
import pathlib
import sys
import tempfile

from server_check import CheckFailed, add_server_args, expect, make_demo, run_with_server

TIMEOUT_S = 60  # per RPC (a load reads and warms up a model)
ADMIN = "admin-up-5b1e9c3a7d2f4068"
INFER = "infer-up-2c8f4a6e1b9d3057"

SERVER_YAML = """repository: {repo}
listen_address: 127.0.0.1
model_control_mode: explicit
model_upload_dir: uploads
hosts:
  - {{name: cpu0, device: cpu, cpu_affinity: [0], threads: 1, executors: 1}}
  - {{name: cpu1, device: cpu, cpu_affinity: [1], threads: 1, executors: 1}}
auth: {{tokens_file: tokens.txt, open_health: true}}
"""


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_server_args(parser)
    return parser.parse_args()


def upload_folders(uploads):
    """The upload-* folders under the server's upload folder, sorted."""
    return sorted(p.name for p in uploads.iterdir()) if uploads.exists() else []


def run_checks(grpc_address, http_address, work, repo):
    import grpc
    import numpy as np
    from google.protobuf import json_format
    from proto import grpc_service_pb2 as pb
    from proto import grpc_service_pb2_grpc as pb_grpc

    uploads = work / "uploads"
    admin = (("authorization", f"Bearer {ADMIN}"),)
    infer_only = (("authorization", f"Bearer {INFER}"),)
    images = np.random.default_rng(3).random((2, 1, 28, 28), dtype=np.float32)

    with grpc.insecure_channel(grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)

        def infer(model):
            request = pb.ModelInferRequest(model_name=model)
            request.inputs.add(name="input", datatype="FP32", shape=images.shape)
            request.raw_input_contents.append(images.tobytes())
            response = stub.ModelInfer(request, timeout=TIMEOUT_S, metadata=admin)
            return np.frombuffer(response.raw_output_contents[0], dtype=np.float32)

        def load(name, config=None, files=None, metadata=admin):
            """tritonclient.grpc's load_model: config as string_param, files as bytes_param."""
            request = pb.RepositoryModelLoadRequest(model_name=name)
            if config is not None:
                request.parameters["config"].string_param = config
            for path, content in (files or {}).items():
                request.parameters[path].bytes_param = content
            try:
                stub.RepositoryModelLoad(request, timeout=TIMEOUT_S, metadata=metadata)
            except grpc.RpcError as error:
                return error.code(), error.details()
            return grpc.StatusCode.OK, ""

        def expect_refused(what, result, code, needle):
            expect(f"{what}: status", result[0], code)
            if needle not in result[1]:
                raise CheckFailed(f"{what}: the error does not name {needle!r}: {result[1]!r}")

        def config_json(name, as_name):
            config = stub.ModelConfig(pb.ModelConfigRequest(name=name), timeout=TIMEOUT_S, metadata=admin).config
            as_dict = json_format.MessageToDict(config, preserving_proto_field_name=True)
            as_dict["name"] = as_name
            return json.dumps(as_dict)

        mlp_file = (repo / "mlp" / "1" / "model.pt").read_bytes()
        wide_file = (repo / "wide_mlp" / "1" / "model.pt").read_bytes()
        want_mlp = infer("mlp")

        # An upload of mlp's file under a new name, with mlp's config as JSON.
        up_config = config_json("mlp", "mlp_up")
        expect("upload of mlp_up", load("mlp_up", up_config, {"file:1/model.pt": mlp_file}),
               (grpc.StatusCode.OK, ""))
        np.testing.assert_array_equal(infer("mlp_up"), want_mlp)
        first = upload_folders(uploads)
        expect("upload folders after the first upload", len(first), 1)
        stored = uploads / first[0] / "mlp_up"
        expect("uploaded model.pt", (stored / "1" / "model.pt").read_bytes(), mlp_file)
        print(f"mlp_up uploaded into {stored.relative_to(work)}: answers as mlp")

        expect_refused("upload with the infer token",
                       load("other", up_config.replace("mlp_up", "other"), {"file:1/model.pt": mlp_file},
                            metadata=infer_only), grpc.StatusCode.PERMISSION_DENIED, "")

        # A second upload under the same name replaces the first.
        expect("second upload of mlp_up", load("mlp_up", up_config, {"file:1/model.pt": wide_file}),
               (grpc.StatusCode.OK, ""))
        expect("mlp_up answers with wide_mlp's weights", bool(np.array_equal(infer("mlp_up"), want_mlp)), False)
        load("wide_mlp")
        want_wide = infer("wide_mlp")
        np.testing.assert_array_equal(infer("mlp_up"), want_wide)
        second = upload_folders(uploads)
        expect("upload folders after the second upload", len(second), 1)
        if second == first:
            raise CheckFailed("the second upload reused the first one's folder")
        print("second upload of mlp_up serves wide_mlp's weights; the first upload's folder is gone")

        # Refusals: each names what is wrong, and mlp_up keeps serving.
        bad_type = up_config.replace("TYPE_FP32", "TYPE_COMPLEX", 1)
        refusals = [
            ("a config that is not JSON", load("mlp_up", "{not json", {"file:1/model.pt": mlp_file}),
             grpc.StatusCode.INVALID_ARGUMENT, "load parameter 'config' is not valid JSON"),
            ("an unknown data type", load("mlp_up", bad_type, {"file:1/model.pt": mlp_file}),
             grpc.StatusCode.INVALID_ARGUMENT, "COMPLEX"),
            ("a field this server lacks", load("mlp_up", json.dumps(
                {**json.loads(up_config), "optimization": {"priority": "PRIORITY_MAX"}}),
                {"file:1/model.pt": mlp_file}), grpc.StatusCode.INVALID_ARGUMENT, "optimization"),
            ("a model file that does not load", load("mlp_up", up_config, {"file:1/model.pt": b"not torchscript"}),
             None, "mlp_up"),
            ("a path that climbs out", load("mlp_up", up_config, {"file:1/model.pt": mlp_file,
                                                                  "file:../escaped.pt": b"x"}),
             grpc.StatusCode.INVALID_ARGUMENT, "../escaped.pt"),
            ("an absolute path", load("mlp_up", up_config, {"file:/tmp/escaped.pt": b"x"}),
             grpc.StatusCode.INVALID_ARGUMENT, "relative"),
            ("files without a config", load("mlp_up", None, {"file:1/model.pt": mlp_file}),
             grpc.StatusCode.INVALID_ARGUMENT, "config"),
            ("an ensemble", load("ens_up", json.dumps({"name": "ens_up", "platform": "ensemble"}), {}),
             grpc.StatusCode.INVALID_ARGUMENT, "ensemble"),
        ]
        for what, result, code, needle in refusals:
            print(f"  {what}: {result[0].name}: {result[1]}")
            if code is None:
                if result[0] == grpc.StatusCode.OK:
                    raise CheckFailed(f"{what}: the load succeeded")
                if needle not in result[1]:
                    raise CheckFailed(f"{what}: the error does not name {needle!r}: {result[1]!r}")
            else:
                expect_refused(what, result, code, needle)
            np.testing.assert_array_equal(infer("mlp_up"), want_wide)
            expect(f"upload folders after {what}", upload_folders(uploads), second)
        if (work / "escaped.pt").exists() or pathlib.Path("/tmp/escaped.pt").exists():
            raise CheckFailed("a file was written outside the upload folder")
        print(f"{len(refusals)} bad uploads refused, each naming what is wrong; mlp_up served throughout")

        # A config alone overrides a repository model's config.
        override = json.loads(config_json("wide_mlp", "wide_mlp"))
        override["dynamic_batching"] = {"max_queue_delay_microseconds": 700, "preferred_batch_size": [4]}
        expect("config-only load of wide_mlp", load("wide_mlp", json.dumps(override)), (grpc.StatusCode.OK, ""))
        batching = stub.ModelConfig(pb.ModelConfigRequest(name="wide_mlp"), timeout=TIMEOUT_S,
                                    metadata=admin).config.dynamic_batching
        expect("wide_mlp's max_queue_delay_microseconds", batching.max_queue_delay_microseconds, 700)
        np.testing.assert_array_equal(infer("wide_mlp"), want_wide)
        print("a config alone overrides wide_mlp's (dynamic batching), with the repository's files")

        # Over HTTP: the files as base64 in the JSON body.
        conn = http.client.HTTPConnection(*http_address.split(":"), timeout=TIMEOUT_S)
        headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}

        def http_load(name, parameters):
            conn.request("POST", f"/v2/repository/models/{name}/load", body=json.dumps({"parameters": parameters}),
                         headers=headers)
            response = conn.getresponse()
            return response.status, response.read().decode(errors="replace")

        encoded = base64.b64encode(mlp_file).decode()
        status, body = http_load("mlp_http", {"config": config_json("mlp", "mlp_http"), "file:1/model.pt": encoded})
        expect(f"HTTP upload of mlp_http ({body})", status, 200)
        np.testing.assert_array_equal(infer("mlp_http"), want_mlp)
        status, body = http_load("mlp_http", {"config": config_json("mlp", "mlp_http"),
                                              "file:1/model.pt": encoded[:-3] + "!=="})
        expect("HTTP upload with bad base64", status, 400)
        if "base64" not in body:
            raise CheckFailed(f"HTTP upload with bad base64: the error does not say base64: {body}")
        np.testing.assert_array_equal(infer("mlp_http"), want_mlp)
        print("HTTP upload of mlp_http (base64 files) serves; bad base64 refused with 400")

        # Unload removes an upload's folder.
        before = upload_folders(uploads)
        stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="mlp_up"), timeout=TIMEOUT_S,
                                   metadata=admin)
        after = upload_folders(uploads)
        expect("upload folders removed by the unload of mlp_up", len(before) - len(after), 1)
        print(f"unload of mlp_up removed its folder ({len(after)} upload folder(s) left)")


def main():
    args = parse_args()
    sys.path.insert(0, args.stubs)
    with tempfile.TemporaryDirectory(prefix="es_model_upload.") as work:
        work = pathlib.Path(work)
        repo = work / "repo"

        def setup():
            make_demo(args.make_demo, repo, "--seed", "1")
            (work / "tokens.txt").write_text(f"# role token\nadmin {ADMIN}\ninfer {INFER}\n")
            (work / "server.yaml").write_text(SERVER_YAML.format(repo=repo))

        def after_stop():
            expect("upload folders left at exit", upload_folders(work / "uploads"), [])

        rc = run_with_server(args.server_bin, work, setup,
                             lambda grpc_address, http_address: run_checks(grpc_address, http_address, work, repo),
                             ("--load-model", "mlp"), ("grpc", "http"), after_stop)
    if rc == 0:
        print("PASS: model uploads through the load API")
    return rc


if __name__ == "__main__":
    sys.exit(main())
