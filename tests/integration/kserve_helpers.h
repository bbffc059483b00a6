// KServe v2 client helpers for the integration tests: building ModelInfer
// requests, decoding raw outputs, and unary calls that always carry a
// deadline (no test may wait on the server forever).
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "proto/grpc_service.grpc.pb.h"

namespace es::it {

using Stub = inference::GRPCInferenceService::Stub;

// Default deadline of every RPC the tests make.
constexpr std::chrono::milliseconds kRpcTimeout{30000};

// The demo models' input: FP32 [batch, 1, 28, 28].
constexpr int64_t kImageElements = 28 * 28;
constexpr int64_t kClasses = 10;
inline const std::vector<std::string> kDemoMembers = {"mlp", "wide_mlp", "cnn"};

void SetDeadline(grpc::ClientContext* ctx, std::chrono::milliseconds timeout = kRpcTimeout);

// `batch` images of uniform [0, 1) pixels, deterministic for a seed.
std::vector<float> RandomImages(int64_t batch, uint32_t seed);

// One FP32 input `input_name` of `shape`, `data` as raw_input_contents.
inference::ModelInferRequest RawRequest(const std::string& model, const std::vector<int64_t>& shape,
                                        const std::vector<float>& data, const std::string& input_name = "input");
// FP32 [batch, 1, 28, 28] images as raw_input_contents.
inference::ModelInferRequest ImageRequest(const std::string& model, const std::vector<float>& images);
void SetBoolParameter(inference::ModelInferRequest* request, const std::string& key, bool value);

struct InferResult {
  grpc::Status status;
  inference::ModelInferResponse response;
  std::chrono::microseconds latency{0};
};
InferResult Infer(Stub& stub, const inference::ModelInferRequest& request,
                  std::chrono::milliseconds timeout = kRpcTimeout);

// An FP32 output decoded from raw_output_contents.
struct Fp32Tensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
// Finds output `name`, checks it is FP32 with a raw payload of the size its
// shape says (failures are test failures naming the problem).
::testing::AssertionResult GetFp32Output(const inference::ModelInferResponse& response, const std::string& name,
                                         Fp32Tensor* out);
std::vector<std::string> OutputNames(const inference::ModelInferResponse& response);

// Succeeds when `status` has `code` and its message contains every needle.
::testing::AssertionResult HasError(const grpc::Status& status, grpc::StatusCode code,
                                    std::initializer_list<std::string> needles);
std::string CodeName(grpc::StatusCode code);
std::string Describe(const grpc::Status& status);

// Readiness probes with a short deadline; nullopt if the RPC itself failed.
std::optional<bool> ServerReady(Stub& stub, std::chrono::milliseconds timeout = std::chrono::milliseconds(1000));
std::optional<bool> ModelReady(Stub& stub, const std::string& model,
                               std::chrono::milliseconds timeout = std::chrono::milliseconds(1000));
// ModelStatistics of `model`: its first entry (the first version), or an
// empty message (after a failed expectation when the call itself failed).
inference::ModelStatistics ModelStats(Stub& stub, const std::string& model);
// RepositoryModelLoad of `model` (explicit model control), 60 s deadline.
grpc::Status LoadModel(Stub& stub, const std::string& model);

// Max |a - b| over two equally long vectors (infinity if the sizes differ).
double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b);

// Percentile (0..100, nearest rank) of the values.
int64_t Percentile(std::vector<int64_t> values, double percentile);

// Opens a connection to the HTTP/REST address `http_address`
// ("127.0.0.1:PORT") and sends one JSON inference request for `model` (one
// image of 0.5s), without reading the answer: for tests that then close the
// connection, or stop the server, while the request runs. Returns the
// socket (the caller closes it), or -1 after a failed expectation.
int SendHttpImageRequest(const std::string& http_address, const std::string& model);

}  // namespace es::it
