// Fuzz target: the answer side of the HTTP client (es::client::
// DecodeHttpInferResponse, what `ensemble-cli --http` and the C++ HttpClient
// run on a server's infer answer). The first input byte chooses whether an
// Inference-Header-Content-Length is given (and the next two bytes its
// value); the rest is the body.
//
// Any bytes must give either a response or an INTERNAL error with a
// message; a response must be self-consistent: one raw_output_contents
// entry per output, and no more binary bytes taken than the body holds.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "clients/http_client.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  std::optional<uint64_t> header_length;
  if (data[0] & 1) header_length = static_cast<uint64_t>(data[1]) | (static_cast<uint64_t>(data[2]) << 8);
  const std::string_view body(reinterpret_cast<const char*>(data + 3), size - 3);
  inference::ModelInferResponse response;
  const es::client::Status status = es::client::DecodeHttpInferResponse(body, header_length, &response);
  if (!status.ok()) {
    FUZZ_CHECK(status.code() == grpc::StatusCode::INTERNAL, "code %d", static_cast<int>(status.code()));
    FUZZ_CHECK(!status.message().empty(), "an error without a message");
    return 0;
  }
  FUZZ_CHECK(response.raw_output_contents_size() == response.outputs_size(), "%d raw entries for %d outputs",
             response.raw_output_contents_size(), response.outputs_size());
  const uint64_t json_size = header_length.value_or(body.size());
  FUZZ_CHECK(json_size <= body.size(), "header length %llu past a body of %zu", static_cast<unsigned long long>(json_size),
             body.size());
  for (const auto& out : response.outputs()) {
    for (int64_t d : out.shape()) FUZZ_CHECK(d >= 0, "dim %lld accepted", static_cast<long long>(d));
  }
  return 0;
}
