// The HTTP client's body codec (declared in clients/http_client.h): kept
// apart from the connection code so the fuzz target (tests/fuzz) builds it
// without Boost.Beast and OpenSSL.
#include <bit>
#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "clients/http_client.h"
#include "proto/parameter_json.h"

namespace es::client {
namespace {

using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little, "KServe binary tensors are little-endian");

Status Error(grpc::StatusCode code, std::string message) { return Status(code, std::move(message)); }

std::string Percent(const std::string& text) {
  static const char* const kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// ---- parameters: proto <-> JSON ----

template <typename Map>
json ParametersJson(const Map& parameters) {
  json j = json::object();
  for (const auto& [key, value] : parameters) j[key] = es::InferParameterJson(value);
  return j;
}

// JSON parameters of an answer into a proto map; INTERNAL for a value no
// InferParameter can hold.
using ParameterMap = google::protobuf::Map<std::string, inference::InferParameter>;
Status ParametersFromJson(const json& j, const std::string& where, ParameterMap* out) {
  if (!j.is_object()) return Error(grpc::StatusCode::INTERNAL, "answer: " + where + " \"parameters\" is not an object");
  for (const auto& [key, value] : j.items()) {
    inference::InferParameter p;
    if (value.is_boolean()) {
      p.set_bool_param(value.get<bool>());
    } else if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      p.set_uint64_param(value.get<uint64_t>());
    } else if (value.is_number_integer()) {
      p.set_int64_param(value.get<int64_t>());
    } else if (value.is_number_float()) {
      p.set_double_param(value.get<double>());
    } else if (value.is_string()) {
      p.set_string_param(value.get<std::string>());
    } else {
      return Error(grpc::StatusCode::INTERNAL, "answer: " + where + " parameter '" + key + "' is not a scalar");
    }
    (*out)[key] = std::move(p);
  }
  return Status();
}

// ---- JSON "data" of an output -> raw little-endian bytes ----

// The elements of a flat or nested array, row-major. Iterative: nesting
// depth comes from the peer and must not be able to exhaust the stack.
void Flatten(const json& j, std::vector<const json*>* out) {
  std::vector<std::pair<const json*, size_t>> stack;  // an array, and the next index in it
  if (!j.is_array()) {
    out->push_back(&j);
    return;
  }
  stack.emplace_back(&j, 0);
  while (!stack.empty()) {
    auto& [array, next] = stack.back();
    if (next == array->size()) {
      stack.pop_back();
      continue;
    }
    const json& e = (*array)[next++];
    if (e.is_array()) {
      stack.emplace_back(&e, 0);  // invalidates array/next: used no further in this turn
    } else {
      out->push_back(&e);
    }
  }
}

template <typename T>
bool AppendInteger(const json& e, std::string* bytes) {
  T v{};
  if (e.is_number_unsigned()) {
    const uint64_t u = e.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
    v = static_cast<T>(u);
  } else if (e.is_number_integer()) {
    const int64_t s = e.get<int64_t>();
    if constexpr (std::is_unsigned_v<T>) {
      if (s < 0 || static_cast<uint64_t>(s) > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
    } else {
      if (s < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
          s > static_cast<int64_t>(std::numeric_limits<T>::max())) {
        return false;
      }
    }
    v = static_cast<T>(s);
  } else {
    return false;
  }
  bytes->append(reinterpret_cast<const char*>(&v), sizeof v);
  return true;
}

Status JsonDataToBytes(const std::string& name, const std::string& datatype, const json& data, std::string* bytes) {
  std::vector<const json*> elements;
  Flatten(data, &elements);
  for (size_t i = 0; i < elements.size(); ++i) {
    const json& e = *elements[i];
    bool ok = true;
    if (datatype == "BOOL") {
      ok = e.is_boolean();
      if (ok) bytes->push_back(e.get<bool>() ? 1 : 0);
    } else if (datatype == "UINT8") {
      ok = AppendInteger<uint8_t>(e, bytes);
    } else if (datatype == "UINT16") {
      ok = AppendInteger<uint16_t>(e, bytes);
    } else if (datatype == "UINT32") {
      ok = AppendInteger<uint32_t>(e, bytes);
    } else if (datatype == "UINT64") {
      ok = AppendInteger<uint64_t>(e, bytes);
    } else if (datatype == "INT8") {
      ok = AppendInteger<int8_t>(e, bytes);
    } else if (datatype == "INT16") {
      ok = AppendInteger<int16_t>(e, bytes);
    } else if (datatype == "INT32") {
      ok = AppendInteger<int32_t>(e, bytes);
    } else if (datatype == "INT64") {
      ok = AppendInteger<int64_t>(e, bytes);
    } else if (datatype == "FP32" || datatype == "FP64") {
      ok = e.is_number();
      if (ok && datatype == "FP32") {
        const float f = static_cast<float>(e.get<double>());
        bytes->append(reinterpret_cast<const char*>(&f), sizeof f);
      } else if (ok) {
        const double d = e.get<double>();
        bytes->append(reinterpret_cast<const char*>(&d), sizeof d);
      }
    } else if (datatype == "BYTES") {  // Triton's raw form: 4-byte little-endian length, then the bytes
      ok = e.is_string() && e.get_ref<const std::string&>().size() <= UINT32_MAX;
      if (ok) {
        const std::string& s = e.get_ref<const std::string&>();
        const uint32_t n = static_cast<uint32_t>(s.size());
        bytes->append(reinterpret_cast<const char*>(&n), sizeof n);
        bytes->append(s);
      }
    } else {
      return Error(grpc::StatusCode::INTERNAL, "answer: output '" + name + "' has datatype '" + datatype +
                                                   "' as JSON data, which has no JSON form");
    }
    if (!ok) {
      std::string message = "answer: output '" + name + "': element ";
      message.append(std::to_string(i)).append(" is not a valid ").append(datatype);
      return Error(grpc::StatusCode::INTERNAL, message);
    }
  }
  return Status();
}

bool IsShm(const google::protobuf::Map<std::string, inference::InferParameter>& parameters) {
  return parameters.contains("shared_memory_region");
}

}  // namespace

// ---- the body codec ----

Status EncodeHttpInferRequest(const inference::ModelInferRequest& request, std::string* body, size_t* header_length) {
  json j = json::object();
  if (!request.id().empty()) j["id"] = request.id();
  json parameters = ParametersJson(request.parameters());
  if (request.outputs_size() == 0) parameters["binary_data_output"] = true;  // every output, binary
  if (!parameters.empty()) j["parameters"] = std::move(parameters);
  j["inputs"] = json::array();
  int raw = 0;
  uint64_t binary_bytes = 0;
  for (const auto& input : request.inputs()) {
    json in = {{"name", input.name()}, {"datatype", input.datatype()}, {"shape", input.shape()}};
    json params = ParametersJson(input.parameters());
    if (!IsShm(input.parameters())) {
      if (raw >= request.raw_input_contents_size()) {
        return Error(grpc::StatusCode::INVALID_ARGUMENT,
                     "input '" + input.name() +
                         "': no raw_input_contents entry (over HTTP inputs travel as raw bytes; typed contents "
                         "are not sent)");
      }
      const uint64_t n = request.raw_input_contents(raw++).size();
      params["binary_data_size"] = n;
      binary_bytes += n;
    }
    if (!params.empty()) in["parameters"] = std::move(params);
    j["inputs"].push_back(std::move(in));
  }
  if (raw != request.raw_input_contents_size()) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 "the request has " + std::to_string(request.raw_input_contents_size()) +
                     " raw_input_contents entries for " + std::to_string(raw) + " inputs that carry data");
  }
  if (request.outputs_size() > 0) {
    j["outputs"] = json::array();
    for (const auto& output : request.outputs()) {
      json out = {{"name", output.name()}};
      json params = ParametersJson(output.parameters());
      if (!IsShm(output.parameters())) params["binary_data"] = true;
      out["parameters"] = std::move(params);
      j["outputs"].push_back(std::move(out));
    }
  }
  std::string header = j.dump(-1, ' ', false, json::error_handler_t::replace);
  *header_length = header.size();
  body->clear();
  body->reserve(header.size() + binary_bytes);
  body->append(header);
  for (const auto& bytes : request.raw_input_contents()) body->append(bytes);
  return Status();
}

Status DecodeHttpInferResponse(std::string_view body, std::optional<uint64_t> header_length,
                               inference::ModelInferResponse* out) {
  out->Clear();
  const uint64_t json_size = header_length.value_or(body.size());
  if (json_size > body.size()) {
    return Error(grpc::StatusCode::INTERNAL, "answer: Inference-Header-Content-Length " + std::to_string(json_size) +
                                                 " is past the body's " + std::to_string(body.size()) + " bytes");
  }
  const std::string_view binary = body.substr(json_size);
  const json j = json::parse(body.substr(0, json_size), nullptr, false);
  if (!j.is_object()) return Error(grpc::StatusCode::INTERNAL, "answer: the infer answer is not a JSON object");
  auto string_field = [&](const char* key, std::string* value) {
    if (!j.contains(key)) return true;
    if (!j[key].is_string()) return false;
    *value = j[key].get<std::string>();
    return true;
  };
  if (!string_field("model_name", out->mutable_model_name()) ||
      !string_field("model_version", out->mutable_model_version()) || !string_field("id", out->mutable_id())) {
    return Error(grpc::StatusCode::INTERNAL, "answer: model_name, model_version and id must be strings");
  }
  if (j.contains("parameters")) {
    ES_RETURN_IF_ERROR(ParametersFromJson(j["parameters"], "the answer's", out->mutable_parameters()));
  }
  if (!j.contains("outputs")) return Status();
  if (!j["outputs"].is_array()) return Error(grpc::StatusCode::INTERNAL, "answer: \"outputs\" is not an array");
  uint64_t offset = 0;
  for (const auto& o : j["outputs"]) {
    if (!o.is_object() || !o.contains("name") || !o["name"].is_string() || !o.contains("datatype") ||
        !o["datatype"].is_string() || !o.contains("shape") || !o["shape"].is_array()) {
      return Error(grpc::StatusCode::INTERNAL, "answer: an output without a string name and datatype and a shape");
    }
    auto* output = out->add_outputs();
    output->set_name(o["name"].get<std::string>());
    output->set_datatype(o["datatype"].get<std::string>());
    for (const auto& d : o["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return Error(grpc::StatusCode::INTERNAL,
                     "answer: output '" + output->name() + "': a dim is not an integer >= 0");
      }
      output->add_shape(d.get<int64_t>());
    }
    std::string* bytes = out->add_raw_output_contents();
    if (o.contains("parameters")) {
      const json& params = o["parameters"];
      if (Status s = ParametersFromJson(params, "output '" + output->name() + "'", output->mutable_parameters());
          !s.ok()) {
        return s;
      }
      output->mutable_parameters()->erase("binary_data_size");
      if (params.contains("binary_data_size")) {
        const json& size = params["binary_data_size"];
        if (!size.is_number_unsigned() && !(size.is_number_integer() && size.get<int64_t>() >= 0)) {
          return Error(grpc::StatusCode::INTERNAL,
                       "answer: output '" + output->name() + "': binary_data_size is not an integer >= 0");
        }
        const uint64_t n = size.get<uint64_t>();
        if (n > binary.size() - offset) {
          return Error(grpc::StatusCode::INTERNAL, "answer: output '" + output->name() + "': binary_data_size " +
                                                       std::to_string(n) + " is past the body's binary part");
        }
        bytes->assign(binary.substr(offset, n));
        offset += n;
        continue;
      }
    }
    if (o.contains("data")) {
      ES_RETURN_IF_ERROR(JsonDataToBytes(output->name(), output->datatype(), o["data"], bytes));
    }
    // Neither: an output written into a shared-memory region (its parameters say which).
  }
  if (offset != binary.size()) {
    return Error(grpc::StatusCode::INTERNAL,
                 "answer: " + std::to_string(binary.size() - offset) + " bytes after the JSON belong to no output");
  }
  return Status();
}

grpc::StatusCode CodeOfHttpStatus(int status) {
  if (status >= 200 && status < 300) return grpc::StatusCode::OK;
  switch (status) {
    case 400:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 401:
      return grpc::StatusCode::UNAUTHENTICATED;
    case 403:
      return grpc::StatusCode::PERMISSION_DENIED;
    case 404:
      return grpc::StatusCode::NOT_FOUND;
    case 405:
    case 501:
      return grpc::StatusCode::UNIMPLEMENTED;
    case 409:
      return grpc::StatusCode::ALREADY_EXISTS;
    case 413:
    case 429:
    case 431:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 503:
      return grpc::StatusCode::UNAVAILABLE;
    case 504:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    default:
      break;
  }
  if (status >= 500) return grpc::StatusCode::INTERNAL;
  if (status >= 400) return grpc::StatusCode::INVALID_ARGUMENT;
  return grpc::StatusCode::UNKNOWN;  // 1xx / 3xx: nothing a KServe server answers
}

std::string ModelPath(const std::string& model, const std::string& version) {
  std::string path = "/v2/models/" + Percent(model);
  if (!version.empty()) path.append("/versions/").append(Percent(version));
  return path;
}

std::string ShmRegionPath(const std::string& name) { return "/v2/systemsharedmemory/region/" + Percent(name); }

}  // namespace es::client
