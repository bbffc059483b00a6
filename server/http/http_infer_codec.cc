#include "server/http/http_infer_codec.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/checked_math.h"
#include "common/datatype.h"
#include "proto/parameter_json.h"
#include "server/http/http_infer_sax.h"

namespace es {
namespace {

using json = nlohmann::ordered_json;
using namespace http_infer_sax;  // NOLINT: this file's own internals

const char* JsonKind(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a bool";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a non-integer number";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

// Built with append: GCC 12 warns falsely (-Wrestrict) on "'" + std::string.
std::string Quote(std::string_view s) {
  std::string out(1, '\'');
  out.append(s);
  out.push_back('\'');
  return out;
}

// One JSON parameter value as a KServe InferParameter.
Status ToParameter(const json& v, const std::string& where, inference::InferParameter* p) {
  if (v.is_boolean()) {
    p->set_bool_param(v.get<bool>());
  } else if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    p->set_uint64_param(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    p->set_int64_param(v.get<int64_t>());
  } else if (v.is_number_float()) {
    p->set_double_param(v.get<double>());
  } else if (v.is_string()) {
    p->set_string_param(v.get<std::string>());
  } else {
    return Status::InvalidArgument(where + "is " + JsonKind(v) + "; parameters are bools, numbers or strings");
  }
  return Status::Ok();
}

// `obj` must be an object (or absent); `where` names it in messages.
Status CheckObject(const json& parent, const char* key, const std::string& where) {
  const auto it = parent.find(key);
  if (it != parent.end() && !it->is_object()) {
    return Status::InvalidArgument(where + "\"" + key + "\" is " + JsonKind(*it) + ", expected an object");
  }
  return Status::Ok();
}

// Reads a bool parameter `key` of `params` (an object) into *value.
Status BoolParam(const json& params, const char* key, const std::string& where, bool* value) {
  const auto it = params.find(key);
  if (it == params.end()) return Status::Ok();
  if (!it->is_boolean()) {
    return Status::InvalidArgument(where + "parameter '" + key + "' is " + JsonKind(*it) + ", expected a bool");
  }
  *value = it->get<bool>();
  return Status::Ok();
}

// What "data" elements of `type` must be, for messages.
const char* Wanted(DataType type) {
  switch (type) {
    case DataType::kBool:
      return "true or false";
    case DataType::kFp32:
    case DataType::kFp64:
      return "numbers";
    default:
      return "integers";
  }
}

// `data`: what the parser kept of this input's "data" (null: none).
Status DecodeInput(const json& in, size_t index, InputData* data, std::string_view* binary,
                   inference::ModelInferRequest* out) {
  std::string where = "input " + std::to_string(index) + ": ";
  if (!in.is_object()) return Status::InvalidArgument(where + "is " + JsonKind(in) + ", expected an object");
  const auto name = in.find("name");
  if (name == in.end() || !name->is_string()) return Status::InvalidArgument(where + "\"name\" (a string) is required");
  where = "input " + Quote(name->get<std::string>()) + ": ";
  const auto datatype = in.find("datatype");
  if (datatype == in.end() || !datatype->is_string()) {
    return Status::InvalidArgument(where + "\"datatype\" (a string such as \"FP32\") is required");
  }
  const auto shape = in.find("shape");
  if (shape == in.end() || !shape->is_array()) {
    return Status::InvalidArgument(where + "\"shape\" (an array of integers) is required");
  }
  auto* tensor = out->add_inputs();
  tensor->set_name(name->get<std::string>());
  tensor->set_datatype(datatype->get<std::string>());
  std::vector<int64_t> dims;
  for (const json& d : *shape) {
    if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
      return Status::InvalidArgument(where + "shape element " + Shown(d) + " is not a 64-bit integer");
    }
    dims.push_back(d.get<int64_t>());
    tensor->add_shape(dims.back());
  }
  ES_RETURN_IF_ERROR(CheckObject(in, "parameters", where));
  std::optional<uint64_t> binary_size;
  bool shared_memory = false;
  if (const auto params = in.find("parameters"); params != in.end()) {
    for (const auto& [key, value] : params->items()) {
      if (key == "binary_data_size") {
        if (!value.is_number_integer() || (!value.is_number_unsigned() && value.get<int64_t>() < 0)) {
          return Status::InvalidArgument(where + "parameter 'binary_data_size' must be an integer >= 0");
        }
        binary_size = value.get<uint64_t>();
        continue;
      }
      if (key == "shared_memory_region") shared_memory = true;
      if (Status s = ToParameter(value, where + "parameter " + Quote(key) + " ", &(*tensor->mutable_parameters())[key]);
          !s.ok()) {
        return s;
      }
    }
  }
  const bool has_data = data != nullptr && data->present;
  const int sources = has_data + binary_size.has_value() + shared_memory;
  if (sources != 1) {
    return Status::InvalidArgument(where + (sources == 0 ? "has no data: give \"data\", parameter binary_data_size "
                                                           "or parameter shared_memory_region"
                                                         : "give only one of \"data\", parameter binary_data_size "
                                                           "and parameter shared_memory_region"));
  }
  if (shared_memory) return Status::Ok();  // read from the region by the request codec
  std::string* raw = out->add_raw_input_contents();
  if (binary_size) {
    if (*binary_size > binary->size()) {
      return Status::InvalidArgument(where + "binary_data_size " + std::to_string(*binary_size) + " but only " +
                                     std::to_string(binary->size()) + " binary byte(s) are left in the body");
    }
    raw->assign(binary->data(), *binary_size);
    binary->remove_prefix(*binary_size);
    return Status::Ok();
  }
  const std::optional<DataType> type = ParseDataType(datatype->get<std::string>());
  if (!type) {
    return Status::InvalidArgument(where + "datatype " + Quote(datatype->get<std::string>()) + " is not supported");
  }
  const std::optional<uint64_t> expected = ElementCount(dims);
  if (!expected) {
    return Status::InvalidArgument(where + "shape " + Shown(*shape) + " has a negative dimension or overflows");
  }
  if (!HasJsonForm(*type)) return Status::InvalidArgument(where + ElementWriter::NoJsonForm(*type).message());
  if (data->direct && *data->direct != *type) {
    return Status::InvalidArgument(where + "\"datatype\" is given more than once, with different values");
  }
  if (!data->direct) {
    // The datatype came after "data": check the elements kept (those before
    // any problem the parser found) now.
    raw->reserve(data->held.size() * DataTypeSize(*type));
    ElementWriter writer(*type, raw);
    for (size_t i = 0; i < data->held.size(); ++i) {
      if (Status s = writer.Add(data->held[i], i); !s.ok()) return Status::InvalidArgument(where + s.message());
    }
  }
  if (!data->error.empty()) return Status::InvalidArgument(where + data->error);
  if (data->non_element) {
    return Status::InvalidArgument(where + "element " + std::to_string(data->non_element->index) + " is " +
                                   data->non_element->kind + " (" + data->non_element->shown + "); " +
                                   DataTypeName(*type) + " elements must be " + Wanted(*type));
  }
  if (data->direct) *raw = std::move(data->raw);
  if (data->count != *expected) {
    return Status::InvalidArgument(where + "\"data\" has " + std::to_string(data->count) + " element(s), shape " +
                                   Shown(*shape) + " needs " + std::to_string(*expected));
  }
  return Status::Ok();
}

Status DecodeOutput(const json& o, size_t index, inference::ModelInferRequest* out, HttpOutputPlan* plan) {
  std::string where = "output " + std::to_string(index) + ": ";
  if (!o.is_object()) return Status::InvalidArgument(where + "is " + JsonKind(o) + ", expected an object");
  const auto name = o.find("name");
  if (name == o.end() || !name->is_string()) return Status::InvalidArgument(where + "\"name\" (a string) is required");
  where = "output " + Quote(name->get<std::string>()) + ": ";
  auto* tensor = out->add_outputs();
  tensor->set_name(name->get<std::string>());
  ES_RETURN_IF_ERROR(CheckObject(o, "parameters", where));
  const auto params = o.find("parameters");
  if (params == o.end()) return Status::Ok();
  for (const auto& [key, value] : params->items()) {
    if (key == "binary_data") {
      bool binary = false;
      ES_RETURN_IF_ERROR(BoolParam(*params, "binary_data", where, &binary));
      plan->binary[tensor->name()] = binary;
      continue;
    }
    if (Status s = ToParameter(value, where + "parameter " + Quote(key) + " ", &(*tensor->mutable_parameters())[key]);
        !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

// The elements of `bytes` (a tensor of `type`) as a flat JSON array.
template <typename T>
json ToArray(std::string_view bytes) {
  json array = json::array();
  const size_t n = bytes.size() / sizeof(T);
  array.get_ref<json::array_t&>().reserve(n);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    array.push_back(v);
  }
  return array;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float value;
  if (exp == 0) {
    value = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    value = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    value = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -value : value;
}

StatusOr<json> OutputData(const std::string& name, const std::string& datatype, std::string_view bytes) {
  const std::optional<DataType> type = ParseDataType(datatype);
  if (!type || bytes.size() % DataTypeSize(*type) != 0) {
    return Status::Internal("output '" + name + "': " + std::to_string(bytes.size()) +
                            " bytes are not a whole number of " + datatype + " elements");
  }
  switch (*type) {
    case DataType::kBool: {
      json array = json::array();
      for (char c : bytes) array.push_back(c != 0);
      return array;
    }
    case DataType::kUint8:
      return ToArray<uint8_t>(bytes);
    case DataType::kInt8:
      return ToArray<int8_t>(bytes);
    case DataType::kInt16:
      return ToArray<int16_t>(bytes);
    case DataType::kInt32:
      return ToArray<int32_t>(bytes);
    case DataType::kInt64:
      return ToArray<int64_t>(bytes);
    case DataType::kFp32:
      return ToArray<float>(bytes);
    case DataType::kFp64:
      return ToArray<double>(bytes);
    case DataType::kFp16: {
      json array = json::array();
      for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
        uint16_t h;
        std::memcpy(&h, bytes.data() + i, 2);
        array.push_back(HalfToFloat(h));
      }
      return array;
    }
    default:
      return Status::Internal("output '" + name + "': datatype " + datatype + " has no JSON form");
  }
}

}  // namespace

bool HttpOutputPlan::IsBinary(const std::string& output) const {
  const auto it = binary.find(output);
  return it != binary.end() ? it->second : all_binary;
}

Status DecodeHttpInferRequest(std::string_view body, std::optional<uint64_t> header_length, const std::string& model,
                              const std::string& version, inference::ModelInferRequest* out, HttpOutputPlan* plan) {
  out->Clear();
  *plan = HttpOutputPlan();
  out->set_model_name(model);
  out->set_model_version(version);
  std::string_view header = body;
  std::string_view binary;
  if (header_length) {
    if (*header_length > body.size()) {
      return Status::InvalidArgument("Inference-Header-Content-Length " + std::to_string(*header_length) +
                                     " is larger than the body (" + std::to_string(body.size()) + " bytes)");
    }
    header = body.substr(0, *header_length);
    binary = body.substr(*header_length);
  }
  json request;
  InferBodySax sax(&request);
  try {
    json::sax_parse(header.begin(), header.end(), &sax);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("the request is not valid JSON: ") + e.what());
  }
  if (sax.too_deep()) {
    return Status::InvalidArgument("the request's JSON is nested deeper than " + std::to_string(kMaxNesting) +
                                   " levels");
  }
  if (sax.too_many_values()) {
    return Status::InvalidArgument("the request's JSON holds more than " + std::to_string(kMaxDomValues) +
                                   " values outside the inputs' \"data\"");
  }
  if (!request.is_object()) {
    return Status::InvalidArgument(std::string("the request is ") + JsonKind(request) + ", expected a JSON object");
  }
  if (const auto id = request.find("id"); id != request.end()) {
    if (!id->is_string())
      return Status::InvalidArgument("\"id\" is " + std::string(JsonKind(*id)) + ", expected a string");
    out->set_id(id->get<std::string>());
  }
  ES_RETURN_IF_ERROR(CheckObject(request, "parameters", ""));
  if (const auto params = request.find("parameters"); params != request.end()) {
    for (const auto& [key, value] : params->items()) {
      if (key == "binary_data_output") {
        ES_RETURN_IF_ERROR(BoolParam(*params, "binary_data_output", "", &plan->all_binary));
        continue;
      }
      if (Status s = ToParameter(value, "parameter " + Quote(key) + " ", &(*out->mutable_parameters())[key]); !s.ok()) {
        return s;
      }
    }
  }
  const auto inputs = request.find("inputs");
  if (inputs == request.end() || !inputs->is_array()) {
    return Status::InvalidArgument("\"inputs\" (an array of input tensors) is required");
  }
  size_t index = 0;
  std::vector<InputData>& data = sax.inputs();
  for (const json& in : *inputs) {
    InputData* kept = index < data.size() ? &data[index] : nullptr;
    ES_RETURN_IF_ERROR(DecodeInput(in, index++, kept, &binary, out));
  }
  if (!binary.empty()) {
    return Status::InvalidArgument(std::to_string(binary.size()) +
                                   " byte(s) after the JSON are not claimed by any input's binary_data_size");
  }
  if (const auto outputs = request.find("outputs"); outputs != request.end()) {
    if (!outputs->is_array()) {
      return Status::InvalidArgument("\"outputs\" is " + std::string(JsonKind(*outputs)) + ", expected an array");
    }
    index = 0;
    for (const json& o : *outputs) {
      ES_RETURN_IF_ERROR(DecodeOutput(o, index++, out, plan));
    }
  }
  return Status::Ok();
}

StatusOr<HttpInferBody> EncodeHttpInferResponse(const inference::ModelInferResponse& response,
                                                const HttpOutputPlan& plan) {
  json answer = json::object();
  answer["model_name"] = response.model_name();
  answer["model_version"] = response.model_version();
  if (!response.id().empty()) answer["id"] = response.id();
  if (!response.parameters().empty()) {
    json params = json::object();
    for (const auto& [key, value] : response.parameters()) params[key] = InferParameterJson(value);
    answer["parameters"] = std::move(params);
  }
  json outputs = json::array();
  std::string binary;
  bool any_binary = false;
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& t = response.outputs(i);
    json o = json::object();
    o["name"] = t.name();
    o["datatype"] = t.datatype();
    o["shape"] = json(std::vector<int64_t>(t.shape().begin(), t.shape().end()));
    json params = json::object();
    for (const auto& [key, value] : t.parameters()) params[key] = InferParameterJson(value);
    // An output written into a shared-memory region has no bytes here.
    const bool in_region = t.parameters().count("shared_memory_region") > 0;
    if (!in_region && i < response.raw_output_contents_size()) {
      const std::string& bytes = response.raw_output_contents(i);
      if (plan.IsBinary(t.name())) {
        params["binary_data_size"] = bytes.size();
        binary += bytes;
        any_binary = true;
      } else {
        ES_ASSIGN_OR_RETURN(o["data"], OutputData(t.name(), t.datatype(), bytes));
      }
    }
    if (!params.empty()) o["parameters"] = std::move(params);
    outputs.push_back(std::move(o));
  }
  answer["outputs"] = std::move(outputs);
  HttpInferBody out;
  out.body = answer.dump(-1, ' ', false, json::error_handler_t::replace);
  if (any_binary) {
    out.header_length = out.body.size();
    out.body += binary;
  }
  return out;
}

}  // namespace es
