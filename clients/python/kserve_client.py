#!/usr/bin/python3
"""A small KServe v2 gRPC client for ensemble-server, using the generated stubs.

It checks the server is live, reads a model's metadata, sends one ModelInfer
request with a batch of random Fashion-MNIST-shaped images (or, with --data,
real ones from the Fashion-MNIST test set), and prints the top class of each
row: for an ensemble with its uncertainty and each member's vote, and with
--data beside the image's true class.

Run it with Debian's python3-grpcio, python3-protobuf and python3-numpy, and
the stubs the build generates under build/python:

    PYTHONPATH=build/python /usr/bin/python3 clients/python/kserve_client.py \
        --server 127.0.0.1:8001 --model demo_ensemble --batch 4 \
        --data /usr/share/datasets/fashion-mnist

TLS and tokens: --ssl (or --ca FILE), --cert FILE --key FILE for mTLS, and
--token TOKEN or the environment variable ENSEMBLE_TOKEN (docs/security.md):

    ENSEMBLE_TOKEN=... PYTHONPATH=build/python /usr/bin/python3 clients/python/kserve_client.py \
        --server 127.0.0.1:8001 --ca ca.pem --cert client.pem --key client.key

Any KServe v2 client works the same way (Triton's tritonclient included): the
server speaks the standard `inference.GRPCInferenceService`.
"""
import argparse
import gzip
import os
import sys

import grpc
import numpy as np

from proto import grpc_service_pb2, grpc_service_pb2_grpc

TIMEOUT_S = 30  # every call carries a deadline
# Fashion-MNIST's classes, in label order (the demo models' 10 outputs).
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
           "Ankle boot"]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default="127.0.0.1:8001", help="HOST:PORT of ensemble-server's gRPC endpoint")
    parser.add_argument("--model", default="demo_ensemble", help="model to query")
    parser.add_argument("--batch", type=int, default=4, help="rows of random input to send")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random input")
    parser.add_argument("--data", help="a Fashion-MNIST folder (Debian: /usr/share/datasets/fashion-mnist): send its "
                        "test images from --first on instead of random input, and print their true classes")
    parser.add_argument("--first", type=int, default=0, help="with --data: the first test image sent (default 0)")
    # TLS and tokens (docs/security.md).
    parser.add_argument("--ssl", action="store_true", help="connect with TLS (implied by --ca and --cert)")
    parser.add_argument("--ca", help="PEM file of the CA that signed the server's certificate (default: the system's)")
    parser.add_argument("--cert", help="PEM client certificate, for servers that require one (mTLS)")
    parser.add_argument("--key", help="PEM private key of --cert")
    parser.add_argument("--token", default=os.environ.get("ENSEMBLE_TOKEN"),
                        help="bearer token sent as 'authorization: Bearer TOKEN' (default: the environment variable "
                        "ENSEMBLE_TOKEN, which unlike a flag is not visible in ps)")
    args = parser.parse_args(argv)
    if args.batch < 1:
        parser.error("--batch must be >= 1")
    if bool(args.cert) != bool(args.key):
        parser.error("--cert and --key go together")
    return args


def raw_output(response, name):
    """Returns output `name` of a ModelInferResponse as a numpy array.

    The server always answers in raw_output_contents, in the order of
    response.outputs."""
    for index, output in enumerate(response.outputs):
        if output.name == name:
            dtype = {"FP32": np.float32, "FP64": np.float64, "FP16": np.float16, "INT64": np.int64,
                     "INT32": np.int32, "INT16": np.int16, "INT8": np.int8, "UINT8": np.uint8,
                     "BOOL": np.bool_}[output.datatype]
            data = np.frombuffer(response.raw_output_contents[index], dtype=dtype)
            return data.reshape(tuple(output.shape))
    return None


def open_channel(args):
    """A TLS channel (grpc.ssl_channel_credentials) with --ssl/--ca/--cert, else plaintext."""
    if not (args.ssl or args.ca or args.cert):
        return grpc.insecure_channel(args.server)

    def read(path):
        if not path:
            return None
        with open(path, "rb") as f:
            return f.read()

    credentials = grpc.ssl_channel_credentials(root_certificates=read(args.ca), private_key=read(args.key),
                                               certificate_chain=read(args.cert))
    return grpc.secure_channel(args.server, credentials)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # The token goes with every call as metadata (gRPC's per-call headers).
    auth = (("authorization", f"Bearer {args.token}"),) if args.token else ()
    with open_channel(args) as channel:
        stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)

        live = stub.ServerLive(grpc_service_pb2.ServerLiveRequest(), timeout=TIMEOUT_S, metadata=auth)
        print(f"server live: {live.live}")

        meta = stub.ModelMetadata(grpc_service_pb2.ModelMetadataRequest(name=args.model), timeout=TIMEOUT_S,
                                  metadata=auth)
        tensor = meta.inputs[0]
        print(f"model {meta.name} (platform {meta.platform}, versions {list(meta.versions)}): "
              f"input {tensor.name} {tensor.datatype} {list(tensor.shape)}, "
              f"outputs {[o.name for o in meta.outputs]}")

        # Input shape from the metadata: -1 (the batch dimension) becomes --batch.
        shape = [args.batch if d == -1 else d for d in tensor.shape]
        labels = None
        if args.data:
            images, labels = fashion_mnist_test(args.data, args.first, args.batch)
            images = images.reshape(shape)
        else:
            images = np.random.default_rng(args.seed).random(shape, dtype=np.float32)

        request = grpc_service_pb2.ModelInferRequest(model_name=args.model, id="kserve_client-1")
        request.inputs.add(name=tensor.name, datatype="FP32", shape=shape)
        request.raw_input_contents.append(images.tobytes())
        if meta.platform == "ensemble":
            # Ask the ensemble for its per-row uncertainty and its members' outputs as well.
            request.parameters["return_uncertainty"].bool_param = True
            request.parameters["return_member_outputs"].bool_param = True

        response = stub.ModelInfer(request, timeout=TIMEOUT_S, metadata=auth)
        first = raw_output(response, meta.outputs[0].name)
        entropy = raw_output(response, "entropy")
        disagreement = raw_output(response, "disagreement")
        print(f"response: model {response.model_name} version {response.model_version} id {response.id}")
        if first.ndim == 2 and first.shape[1] > 1:
            suffix = "." + meta.outputs[0].name
            votes = {o.name[:-len(suffix)]: raw_output(response, o.name)
                     for o in response.outputs if o.name.endswith(suffix)}
            print_classes(first, entropy, disagreement, votes, labels)
        else:
            print_plain(meta.outputs[0].name, first)
    return 0


def class_name(index, classes):
    return f" {CLASSES[index]}" if classes == len(CLASSES) else ""


def print_classes(probabilities, entropy, disagreement, votes, labels):
    """A classifier's output [batch, classes]: each row's top class, the
    members' votes when an ensemble sent them, the true class when known."""
    classes = probabilities.shape[1]
    for row in range(probabilities.shape[0]):
        top = int(np.argmax(probabilities[row]))
        line = f"row {row}: top class {top}{class_name(top, classes)} (p={probabilities[row, top]:.4f})"
        if entropy is not None:
            line += f" entropy={entropy[row]:.4f} disagreement={disagreement[row]:.2f}"
        if labels is not None:
            truth = int(labels[row])
            line += f" | true class {truth}{class_name(truth, classes)} ({'right' if truth == top else 'wrong'})"
        print(line)
        if votes:
            print("    votes: " + ", ".join(f"{member}{class_name(int(np.argmax(p[row])), classes)}"
                                          for member, p in votes.items()))


def read_idx(path):
    """A gzip-compressed IDX file (Fashion-MNIST's format) as a numpy array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def fashion_mnist_test(folder, first, count):
    """`count` test images from `first` on, as float32 in [0, 1], and their labels."""
    images = read_idx(os.path.join(folder, "t10k-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(folder, "t10k-labels-idx1-ubyte.gz"))
    if first < 0 or first + count > len(labels):
        raise SystemExit(f"kserve_client: --first {first} with --batch {count} is outside the {len(labels)} test images")
    return images[first:first + count].astype(np.float32) / 255.0, labels[first:first + count]


def print_plain(name, values):
    """Any other output: each row's shape, a summary and its first values."""
    rows = values if values.ndim > 1 else values.reshape(1, -1)
    for row in range(rows.shape[0]):
        flat = rows[row].ravel()
        head = ", ".join(f"{v:.4g}" if np.issubdtype(flat.dtype, np.floating) else str(v) for v in flat[:6])
        more = ", ..." if flat.size > 6 else ""
        print(f"row {row}: {name} {list(rows[row].shape)} min={flat.min():.4g} max={flat.max():.4g} "
              f"values [{head}{more}]")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except grpc.RpcError as error:
        print(f"kserve_client: {error.code().name}: {error.details()}", file=sys.stderr)
        sys.exit(1)
