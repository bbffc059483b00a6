#include "clients/tensor.h"

#include <utility>

namespace es::client {

size_t DatatypeSize(std::string_view datatype) {
  if (datatype == "BOOL" || datatype == "UINT8" || datatype == "INT8") return 1;
  if (datatype == "UINT16" || datatype == "INT16" || datatype == "FP16" || datatype == "BF16") return 2;
  if (datatype == "UINT32" || datatype == "INT32" || datatype == "FP32") return 4;
  if (datatype == "UINT64" || datatype == "INT64" || datatype == "FP64") return 8;
  return 0;
}

int64_t ElementCount(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

std::string ShapeText(std::span<const int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ",";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

Status AddRawInput(inference::ModelInferRequest* request, const std::string& name, const std::string& datatype,
                   const std::vector<int64_t>& shape, const void* data, size_t bytes) {
  const size_t element = DatatypeSize(datatype);
  if (element == 0) {
    return Status(grpc::StatusCode::INVALID_ARGUMENT,
                  "input '" + name + "': datatype '" + datatype + "' has no fixed element size");
  }
  const int64_t count = ElementCount(shape);
  if (count < 0) {
    return Status(grpc::StatusCode::INVALID_ARGUMENT, "input '" + name + "': negative dim in its shape");
  }
  if (static_cast<size_t>(count) * element != bytes) {
    return Status(grpc::StatusCode::INVALID_ARGUMENT,
                  "input '" + name + "': " + std::to_string(bytes) + " bytes given, its shape needs " +
                      std::to_string(static_cast<size_t>(count) * element));
  }
  auto* input = request->add_inputs();
  input->set_name(name);
  input->set_datatype(datatype);
  for (int64_t d : shape) input->add_shape(d);
  request->add_raw_input_contents()->assign(static_cast<const char*>(data), bytes);
  return Status();
}

void RequestOutput(inference::ModelInferRequest* request, const std::string& name) {
  request->add_outputs()->set_name(name);
}

void SetParameter(inference::ModelInferRequest* request, const std::string& key, bool value) {
  (*request->mutable_parameters())[key].set_bool_param(value);
}
void SetParameter(inference::ModelInferRequest* request, const std::string& key, int64_t value) {
  (*request->mutable_parameters())[key].set_int64_param(value);
}
void SetParameter(inference::ModelInferRequest* request, const std::string& key, const std::string& value) {
  (*request->mutable_parameters())[key].set_string_param(value);
}

Result<RawOutput> GetRawOutput(const inference::ModelInferResponse& response, const std::string& name) {
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& out = response.outputs(i);
    if (out.name() != name) continue;
    if (i >= response.raw_output_contents_size()) {
      return Status(grpc::StatusCode::INTERNAL,
                    "output '" + name + "': no raw_output_contents entry (typed contents are not read)");
    }
    RawOutput raw{out.name(), out.datatype(), {out.shape().begin(), out.shape().end()},
                  std::string_view(response.raw_output_contents(i))};
    const size_t element = DatatypeSize(raw.datatype);
    const int64_t count = ElementCount(raw.shape);
    if (element == 0 || count < 0 || static_cast<size_t>(count) * element != raw.bytes.size()) {
      return Status(grpc::StatusCode::INTERNAL, "output '" + name + "': " + std::to_string(raw.bytes.size()) +
                                                    " bytes do not match datatype " + raw.datatype +
                                                    " and its shape");
    }
    return raw;
  }
  std::string names;
  for (const auto& out : response.outputs()) {
    if (!names.empty()) names += ", ";
    names += out.name();
  }
  return Status(grpc::StatusCode::NOT_FOUND,
                "output '" + name + "' not in the response (outputs: " + (names.empty() ? "none" : names) + ")");
}

std::vector<std::string> OutputNames(const inference::ModelInferResponse& response) {
  std::vector<std::string> names;
  for (const auto& out : response.outputs()) names.push_back(out.name());
  return names;
}

Status CheckOutputType(const RawOutput& raw, const char* expected_datatype, size_t alignment) {
  if (raw.datatype != expected_datatype) {
    return Status(grpc::StatusCode::INVALID_ARGUMENT,
                  "output '" + raw.name + "' is " + raw.datatype + ", read as " + expected_datatype);
  }
  if (alignment > 1 && reinterpret_cast<uintptr_t>(raw.bytes.data()) % alignment != 0) {
    return Status(grpc::StatusCode::INTERNAL,
                  "output '" + raw.name + "': payload not aligned for a typed view (use CopyOutput)");
  }
  return Status();
}

}  // namespace es::client
