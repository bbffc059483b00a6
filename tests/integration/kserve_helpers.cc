#include "tests/integration/kserve_helpers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace es::it {

void SetDeadline(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) {
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
}

std::vector<float> RandomImages(int64_t batch, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> images(static_cast<size_t>(batch * kImageElements));
  for (float& v : images) v = pixel(gen);
  return images;
}

inference::ModelInferRequest RawRequest(const std::string& model, const std::vector<int64_t>& shape,
                                        const std::vector<float>& data, const std::string& input_name) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* input = request.add_inputs();
  input->set_name(input_name);
  input->set_datatype("FP32");
  for (int64_t d : shape) input->add_shape(d);
  request.add_raw_input_contents(std::string(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float)));
  return request;
}

inference::ModelInferRequest ImageRequest(const std::string& model, const std::vector<float>& images) {
  const int64_t batch = static_cast<int64_t>(images.size()) / kImageElements;
  return RawRequest(model, {batch, 1, 28, 28}, images);
}

void SetBoolParameter(inference::ModelInferRequest* request, const std::string& key, bool value) {
  (*request->mutable_parameters())[key].set_bool_param(value);
}

InferResult Infer(Stub& stub, const inference::ModelInferRequest& request, std::chrono::milliseconds timeout) {
  InferResult result;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  const auto start = std::chrono::steady_clock::now();
  result.status = stub.ModelInfer(&ctx, request, &result.response);
  result.latency = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
  return result;
}

std::vector<std::string> OutputNames(const inference::ModelInferResponse& response) {
  std::vector<std::string> names;
  for (const auto& o : response.outputs()) names.push_back(o.name());
  return names;
}

::testing::AssertionResult GetFp32Output(const inference::ModelInferResponse& response, const std::string& name,
                                         Fp32Tensor* out) {
  if (response.raw_output_contents_size() != response.outputs_size()) {
    return ::testing::AssertionFailure() << "response has " << response.outputs_size() << " outputs but "
                                         << response.raw_output_contents_size() << " raw_output_contents";
  }
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& o = response.outputs(i);
    if (o.name() != name) continue;
    if (o.datatype() != "FP32") {
      return ::testing::AssertionFailure() << "output '" << name << "' has datatype " << o.datatype();
    }
    out->shape.assign(o.shape().begin(), o.shape().end());
    int64_t elements = 1;
    for (int64_t d : out->shape) elements *= d;
    const std::string& raw = response.raw_output_contents(i);
    if (raw.size() != static_cast<size_t>(elements) * sizeof(float)) {
      return ::testing::AssertionFailure()
             << "output '" << name << "' has " << raw.size() << " raw bytes for " << elements << " FP32 elements";
    }
    out->values.resize(static_cast<size_t>(elements));
    std::memcpy(out->values.data(), raw.data(), raw.size());
    return ::testing::AssertionSuccess();
  }
  std::string names;
  for (const auto& n : OutputNames(response)) names += " '" + n + "'";
  return ::testing::AssertionFailure() << "no output named '" << name << "' (outputs:" << names << ")";
}

std::string CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK:
      return "OK";
    case grpc::CANCELLED:
      return "CANCELLED";
    case grpc::UNKNOWN:
      return "UNKNOWN";
    case grpc::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::ABORTED:
      return "ABORTED";
    case grpc::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::INTERNAL:
      return "INTERNAL";
    case grpc::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "code " + std::to_string(static_cast<int>(code));
  }
}

std::string Describe(const grpc::Status& status) {
  return CodeName(status.error_code()) + ": '" + status.error_message() + "'";
}

::testing::AssertionResult HasError(const grpc::Status& status, grpc::StatusCode code,
                                    std::initializer_list<std::string> needles) {
  if (status.error_code() != code) {
    return ::testing::AssertionFailure() << "expected " << CodeName(code) << ", got " << Describe(status);
  }
  for (const std::string& needle : needles) {
    if (status.error_message().find(needle) == std::string::npos) {
      return ::testing::AssertionFailure()
             << CodeName(code) << " message '" << status.error_message() << "' does not mention '" << needle << "'";
    }
  }
  return ::testing::AssertionSuccess();
}

std::optional<bool> ServerReady(Stub& stub, std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  inference::ServerReadyResponse resp;
  if (!stub.ServerReady(&ctx, inference::ServerReadyRequest(), &resp).ok()) return std::nullopt;
  return resp.ready();
}

std::optional<bool> ModelReady(Stub& stub, const std::string& model, std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  inference::ModelReadyRequest req;
  req.set_name(model);
  inference::ModelReadyResponse resp;
  if (!stub.ModelReady(&ctx, req, &resp).ok()) return std::nullopt;
  return resp.ready();
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, d);
  }
  return worst;
}

int64_t Percentile(std::vector<int64_t> values, double percentile) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(percentile / 100.0 * static_cast<double>(values.size()));
  const size_t index = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(values.size()))) - 1;
  return values[index];
}

inference::ModelStatistics ModelStats(Stub& stub, const std::string& model) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  inference::ModelStatisticsRequest req;
  req.set_name(model);
  inference::ModelStatisticsResponse resp;
  const grpc::Status status = stub.ModelStatistics(&ctx, req, &resp);
  EXPECT_TRUE(status.ok()) << Describe(status);
  return resp.model_stats_size() > 0 ? resp.model_stats(0) : inference::ModelStatistics();
}

grpc::Status LoadModel(Stub& stub, const std::string& model) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, std::chrono::milliseconds(60000));
  inference::RepositoryModelLoadRequest req;
  req.set_model_name(model);
  inference::RepositoryModelLoadResponse resp;
  return stub.RepositoryModelLoad(&ctx, req, &resp);
}

int SendHttpImageRequest(const std::string& http_address, const std::string& model) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(http_address.substr(http_address.rfind(':') + 1))));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ADD_FAILURE() << "cannot connect to " << http_address;
    close(fd);
    return -1;
  }
  std::string data;
  for (int64_t i = 0; i < kImageElements; ++i) data += (i ? ",0.5" : "0.5");
  const std::string body = R"({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": [)" +
                           data + "]}]}";
  const std::string post = "POST /v2/models/" + model + "/infer HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body;
  if (send(fd, post.data(), post.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(post.size())) {
    ADD_FAILURE() << "cannot send the request to " << http_address;
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace es::it
