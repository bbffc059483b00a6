// Fuzz target: es::DecodeHttpInferRequest, the HTTP/REST front end's gate for
// client infer bodies (JSON and Triton's binary tensor extension), and
// es::EncodeHttpInferResponse on what it accepted.
//
// The input is text: a first line with the Inference-Header-Content-Length
// ("-" or empty: none), then the body (corpus/http_infer/ has readable
// seeds). Whatever the input, decoding must not crash or throw, and when it
// answers OK:
//   - one raw_input_contents entry per input that names no shared-memory
//     region (Triton's indexing, which the request codec relies on);
//   - the HTTP-only parameters (binary_data_size, binary_data,
//     binary_data_output) never reach the proto;
//   - the raw bytes are at most 8 per body byte (a JSON element takes at
//     least one character, its item at most 8 bytes): no amplification;
//   - the proto then goes through es::DecodeInferRequest (fixed config)
//     without crashing;
//   - the inputs' bytes, answered back as outputs of the same datatype, encode
//     to a JSON that parses again with one element per item (or binary bytes
//     equal to the input's), unless a size is not a whole number of items.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/datatype.h"
#include "server/http/http_infer_codec.h"
#include "server/kserve/request_codec.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

es::ServerConfig MakeConfig() {
  es::ServerConfig config;
  config.hosts.push_back(es::HostConfig{.name = "h0"});
  es::ModelConfig m;
  m.name = "m";
  m.platform = "torchscript";
  m.max_batch_size = 8;
  m.inputs = {{"x", es::DataType::kFp32, {-1}}, {"y", es::DataType::kInt8, {2}}, {"b", es::DataType::kBool, {-1}}};
  m.outputs = {{"z", es::DataType::kFp32, {2}}};
  m.versions = {1};
  m.hosts = {"h0"};
  config.models["m"] = m;
  config.limits.max_request_bytes = 1 << 16;
  return config;
}

bool HasHttpOnlyParameter(const inference::ModelInferRequest& r) {
  if (r.parameters().count("binary_data_output")) return true;
  for (const auto& in : r.inputs()) {
    if (in.parameters().count("binary_data_size")) return true;
  }
  for (const auto& out : r.outputs()) {
    if (out.parameters().count("binary_data")) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const es::ServerConfig config = MakeConfig();
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nl = input.find('\n');
  if (nl == std::string_view::npos) return 0;
  const std::string_view first = input.substr(0, nl);
  const std::string_view body = input.substr(nl + 1);
  std::optional<uint64_t> header_length;
  if (!first.empty() && first != "-") {
    if (first.size() > 9 || first.find_first_not_of("0123456789") != std::string_view::npos) return 0;
    header_length = std::stoull(std::string(first));
  }
  inference::ModelInferRequest proto;
  es::HttpOutputPlan plan;
  const es::Status status = es::DecodeHttpInferRequest(body, header_length, "m", "", &proto, &plan);
  if (!status.ok()) {
    FUZZ_CHECK(!status.message().empty(), "an error without a message");
    return 0;
  }
  int in_message = 0;
  uint64_t raw_bytes = 0;
  for (const auto& in : proto.inputs()) in_message += in.parameters().count("shared_memory_region") ? 0 : 1;
  FUZZ_CHECK(proto.raw_input_contents_size() == in_message, "%d raw entries for %d inputs with data",
             proto.raw_input_contents_size(), in_message);
  for (const auto& raw : proto.raw_input_contents()) raw_bytes += raw.size();
  FUZZ_CHECK(raw_bytes <= 8 * static_cast<uint64_t>(body.size()) + 8, "%llu raw bytes from a %zu-byte body",
             static_cast<unsigned long long>(raw_bytes), body.size());
  FUZZ_CHECK(!HasHttpOnlyParameter(proto), "an HTTP-only parameter reached the proto");

  (void)es::DecodeInferRequest(proto, config);  // must not crash; its own fuzzer checks what it accepts

  // The inputs echoed back as outputs.
  inference::ModelInferResponse response;
  response.set_model_name("m");
  response.set_model_version("1");
  bool whole = true;
  int raw_index = 0;
  for (const auto& in : proto.inputs()) {
    if (in.parameters().count("shared_memory_region")) continue;
    const std::optional<es::DataType> type = es::ParseDataType(in.datatype());
    const std::string& raw = proto.raw_input_contents(raw_index++);
    if (!type || raw.size() % es::DataTypeSize(*type) != 0) whole = false;
    auto* out = response.add_outputs();
    out->set_name(in.name());
    out->set_datatype(in.datatype());
    *response.add_raw_output_contents() = raw;
  }
  es::StatusOr<es::HttpInferBody> encoded = es::EncodeHttpInferResponse(response, plan);
  if (!whole) {
    FUZZ_CHECK(!encoded.ok() || plan.all_binary || !plan.binary.empty(), "a partial item was encoded as JSON");
    return 0;
  }
  FUZZ_CHECK(encoded.ok(), "encoding whole items failed: %s", encoded.status().message().c_str());
  const std::string& text = encoded->body;
  const size_t json_length = encoded->header_length.value_or(text.size());
  FUZZ_CHECK(json_length <= text.size(), "header length past the body");
  const auto parsed = nlohmann::json::parse(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(json_length),
                                            nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!parsed.is_discarded(), "the answer is not JSON");
  const auto& outputs = parsed.at("outputs");
  FUZZ_CHECK(outputs.size() == static_cast<size_t>(response.outputs_size()), "output count changed");
  size_t offset = json_length;
  for (int i = 0; i < response.outputs_size(); ++i) {
    const std::string& raw = response.raw_output_contents(i);
    const auto& o = outputs.at(static_cast<size_t>(i));
    if (plan.IsBinary(response.outputs(i).name())) {
      const uint64_t n = o.at("parameters").at("binary_data_size").get<uint64_t>();
      FUZZ_CHECK(n == raw.size() && text.compare(offset, n, raw) == 0, "binary output %d differs", i);
      offset += n;
    } else {
      const size_t items = raw.size() / es::DataTypeSize(*es::ParseDataType(response.outputs(i).datatype()));
      FUZZ_CHECK(o.at("data").size() == items, "output %d: %zu JSON elements for %zu items", i, o.at("data").size(),
                 items);
    }
  }
  FUZZ_CHECK(offset == text.size(), "binary bytes left over");
  return 0;
}
