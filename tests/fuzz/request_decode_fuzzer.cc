// Fuzz target: es::DecodeInferRequest, the router's gate for client requests.
//
// The input is a ModelInferRequest in protobuf text format (so that the
// mutator edits shapes, names and contents rather than wire-format lengths;
// corpus/request_decode/ has readable seeds), decoded against a fixed
// ServerConfig built below. Whatever the input, decoding must not crash, and
// when it answers OK the request must be what the rest of the router trusts
// it to be: every input present once with the declared datatype and a shape
// that fits the declaration, its byte count exactly the product of its dims
// times the item size (computed exactly in 128 bits, fuzz_math.h, so a
// wrapped product cannot pass), all inputs within max_request_bytes, the data readable for
// that many bytes, typed small integers within their type's range, and no
// requested output named twice.
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>

#include "server/kserve/request_codec.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_math.h"

namespace {

using es::DataType;
using es::ModelConfig;
using es::TensorSpec;

// Parse errors of fuzz inputs are expected; printing them would drown the log.
class SilentErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
};

ModelConfig Model(const std::string& name, int64_t max_batch_size, std::vector<TensorSpec> inputs,
                  std::vector<TensorSpec> outputs) {
  ModelConfig m;
  m.name = name;
  m.platform = "torchscript";
  m.max_batch_size = max_batch_size;
  m.inputs = std::move(inputs);
  m.outputs = std::move(outputs);
  m.versions = {1, 3};
  m.hosts = {"h0"};
  return m;
}

// Batched and not, fixed and variable dims, every datatype with a typed
// field (and FP16, which has none), several inputs, and an ensemble.
es::ServerConfig MakeConfig() {
  es::ServerConfig config;
  config.hosts.push_back(es::HostConfig{.name = "h0"});
  config.limits.max_request_bytes = 1 << 20;
  auto add = [&config](ModelConfig m) { config.models[m.name] = std::move(m); };

  ModelConfig mlp = Model("mlp", 8, {{"input", DataType::kFp32, {2, 3}}}, {{"probabilities", DataType::kFp32, {10}}});
  mlp.dynamic_batching.enabled = true;
  mlp.dynamic_batching.priority_levels = 3;
  mlp.dynamic_batching.default_priority = 2;
  add(mlp);
  add(Model("fixed", 0, {{"x", DataType::kFp32, {4}}, {"ids", DataType::kInt64, {2}}},
            {{"y", DataType::kFp32, {4}}}));
  add(Model("wide", 4, {{"x", DataType::kFp32, {-1, -1}}}, {{"y", DataType::kFp32, {-1}}}));
  add(Model("anyshape", 0, {{"x", DataType::kFp64, {-1, -1, -1}}}, {{"y", DataType::kFp64, {-1}}}));
  add(Model("types", 0,
            {{"b", DataType::kBool, {-1}},
             {"u8", DataType::kUint8, {-1}},
             {"i8", DataType::kInt8, {-1}},
             {"i16", DataType::kInt16, {-1}},
             {"i32", DataType::kInt32, {2, -1}}},
            {{"out", DataType::kInt64, {1}}}));
  // FP16 has no typed field: raw contents only.
  add(Model("half", 2, {{"h", DataType::kFp16, {-1}}}, {{"out", DataType::kFp16, {-1}}}));
  add(Model("member_a", 4, {{"input", DataType::kFp32, {3}}}, {{"probabilities", DataType::kFp32, {5}}}));
  add(Model("member_b", 4, {{"input", DataType::kFp32, {3}}}, {{"probabilities", DataType::kFp32, {5}}}));
  ModelConfig ens = Model("ens", 4, {{"input", DataType::kFp32, {3}}}, {{"probabilities", DataType::kFp32, {5}}});
  ens.platform = "ensemble";
  ens.versions = {};
  ens.hosts = {};
  ens.ensemble.members = {{"member_a", 1.0}, {"member_b", 2.0}};
  add(ens);
  return config;
}

// The range a typed int/uint value must lie in for a narrow datatype.
bool TypedValueFits(DataType type, int64_t v) {
  switch (type) {
    case DataType::kUint8: return v >= 0 && v <= 255;
    case DataType::kInt8: return v >= -128 && v <= 127;
    case DataType::kInt16: return v >= -32768 && v <= 32767;
    default: return true;
  }
}

void CheckDecoded(const inference::ModelInferRequest& proto, const es::ServerConfig& config,
                  const es::InferRequest& request) {
  const ModelConfig* model = config.FindModel(proto.model_name());
  FUZZ_CHECK(model != nullptr && request.model == model, "decoded a request for unknown model '%s'",
             proto.model_name().c_str());
  FUZZ_CHECK(request.inputs.size() == model->inputs.size(), "%zu inputs decoded, model has %zu",
             request.inputs.size(), model->inputs.size());
  const bool raw = proto.raw_input_contents_size() > 0;
  unsigned __int128 total = 0;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const es::InferInput& in = request.inputs[i];
    const TensorSpec& spec = model->inputs[i];
    FUZZ_CHECK(in.spec == &spec, "input %zu is not bound to its spec", i);
    FUZZ_CHECK(in.datatype == spec.datatype, "input '%s' has datatype %u, declared %u", spec.name.c_str(),
               static_cast<unsigned>(in.datatype), static_cast<unsigned>(spec.datatype));
    const size_t lead = model->batched() ? 1 : 0;
    FUZZ_CHECK(in.shape.size() == spec.dims.size() + lead, "input '%s' has rank %zu", spec.name.c_str(),
               in.shape.size());
    if (model->batched()) {
      FUZZ_CHECK(in.shape[0] >= 1 && in.shape[0] <= model->max_batch_size, "batch %lld outside [1, %lld]",
                 static_cast<long long>(in.shape[0]), static_cast<long long>(model->max_batch_size));
      FUZZ_CHECK(in.shape[0] == request.inputs[0].shape[0], "inputs disagree on the batch size");
    }
    for (size_t d = 0; d < in.shape.size(); ++d) {
      FUZZ_CHECK(in.shape[d] >= 0, "input '%s' dim %zu is negative", spec.name.c_str(), d);
      if (d >= lead) {
        const int64_t declared = spec.dims[d - lead];
        FUZZ_CHECK(declared == -1 || declared == in.shape[d], "input '%s' dim %zu does not match the config",
                   spec.name.c_str(), d);
      }
    }
    const std::optional<uint64_t> bytes =
        es::fuzz::ExactBytes(in.shape.data(), in.shape.size(), es::DataTypeSize(in.datatype));
    FUZZ_CHECK(bytes && *bytes == in.bytes, "input '%s': %zu bytes accepted, its shape of %zu dims needs %s",
               spec.name.c_str(), in.bytes, in.shape.size(), bytes ? std::to_string(*bytes).c_str() : "2^64 or more");
    total += *bytes;
    if (in.bytes > 0) {
      FUZZ_CHECK(in.data != nullptr, "input '%s' has %zu bytes and no data", spec.name.c_str(), in.bytes);
      // Touch every byte: ASan reports any that is not the request's.
      volatile uint8_t sink = 0;
      for (size_t b = 0; b < in.bytes; ++b) sink = sink ^ in.data[b];
    }
    // Find the proto input this one came from (inputs may come in any order).
    for (int p = 0; p < proto.inputs_size(); ++p) {
      if (proto.inputs(p).name() != spec.name) continue;
      if (raw) {
        FUZZ_CHECK(in.data == reinterpret_cast<const uint8_t*>(proto.raw_input_contents(p).data()) &&
                       in.bytes == proto.raw_input_contents(p).size(),
                   "input '%s' does not point at its raw contents", spec.name.c_str());
      } else {
        // The field KServe assigns to the narrow types: uint for UINT8, int for INT8/INT16.
        const auto& c = proto.inputs(p).contents();
        if (in.datatype == DataType::kUint8) {
          for (uint32_t v : c.uint_contents()) {
            FUZZ_CHECK(TypedValueFits(in.datatype, v), "input '%s': typed value %u accepted for UINT8",
                       spec.name.c_str(), v);
          }
        } else if (in.datatype == DataType::kInt8 || in.datatype == DataType::kInt16) {
          for (int32_t v : c.int_contents()) {
            FUZZ_CHECK(TypedValueFits(in.datatype, v), "input '%s': typed value %d accepted for %s",
                       spec.name.c_str(), v, es::DataTypeName(in.datatype));
          }
        }
      }
    }
  }
  FUZZ_CHECK(total <= static_cast<unsigned __int128>(config.limits.max_request_bytes),
             "request of more than max_request_bytes accepted");
  std::set<std::string> names;
  for (const std::string& name : request.requested_outputs) {
    FUZZ_CHECK(names.insert(name).second, "requested output '%s' accepted twice", name.c_str());
  }
  const int levels = model->dynamic_batching.enabled ? model->dynamic_batching.priority_levels : 1;
  FUZZ_CHECK(request.priority >= 0 && request.priority <= levels, "priority %d accepted", request.priority);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const es::ServerConfig config = MakeConfig();
  static SilentErrors silent;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&silent);
  inference::ModelInferRequest proto;
  if (!parser.ParseFromString(std::string(reinterpret_cast<const char*>(data), size), &proto)) return -1;
  auto decoded = es::DecodeInferRequest(proto, config);
  // ES_FUZZ_VERBOSE=1: say what each input decoded to (for writing seeds).
  static const bool verbose = getenv("ES_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "decode: %s\n", decoded.status().ToString().c_str());
  if (decoded.ok()) CheckDecoded(proto, config, **decoded);
  return 0;
}
