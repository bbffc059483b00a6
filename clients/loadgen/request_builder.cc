#include "clients/loadgen/request_builder.h"

#include <algorithm>
#include <random>

#include "clients/tensor.h"

namespace es::loadgen {
namespace {

using es::client::ShapeText;

// `count` elements of `datatype`, random, as bytes.
std::string RandomPayload(const std::string& datatype, int64_t count, std::mt19937& rng) {
  const size_t element = es::client::DatatypeSize(datatype);
  std::string bytes(static_cast<size_t>(count) * element, '\0');
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_int_distribution<int> small(0, 9);
  auto put = [&](int64_t i, auto value) { std::memcpy(&bytes[static_cast<size_t>(i) * element], &value, element); };
  for (int64_t i = 0; i < count; ++i) {
    if (datatype == "FP32") put(i, static_cast<float>(unit(rng)));
    else if (datatype == "FP64") put(i, unit(rng));
    else if (datatype == "FP16" || datatype == "BF16") put(i, static_cast<uint16_t>(datatype == "FP16" ? 0x3800 : 0x3F00));  // 0.5
    else if (datatype == "BOOL") put(i, static_cast<uint8_t>(small(rng) & 1));
    else if (datatype == "INT8" || datatype == "UINT8") put(i, static_cast<uint8_t>(small(rng)));
    else if (datatype == "INT16" || datatype == "UINT16") put(i, static_cast<uint16_t>(small(rng)));
    else if (datatype == "INT32" || datatype == "UINT32") put(i, static_cast<uint32_t>(small(rng)));
    else put(i, static_cast<uint64_t>(small(rng)));  // INT64, UINT64
  }
  return bytes;
}

}  // namespace

bool BuildRequest(const es::client::Api& client, const std::string& model, const std::string& version,
                  int64_t batch, const std::map<std::string, std::vector<int64_t>>& shapes, uint32_t seed,
                  PreparedRequest* out, BuildError* error) {
  auto metadata = client.ModelMetadata(model, version);
  if (!metadata.ok()) {
    error->message = "model '" + model + "': ModelMetadata failed: " + metadata.status().ToString();
    return false;
  }
  if (metadata->inputs_size() == 0) {
    error->message = "model '" + model + "': its metadata lists no inputs";
    return false;
  }
  out->platform = metadata->platform();
  out->first_output = metadata->outputs_size() > 0 ? metadata->outputs(0).name() : "";
  out->version = version;
  if (version.empty() && metadata->versions_size() > 0) out->version = metadata->versions(metadata->versions_size() - 1);
  out->request = inference::ModelInferRequest();
  out->request.set_model_name(model);
  out->request.set_model_version(version);
  out->inputs.clear();
  out->rows = 1;
  std::mt19937 rng(seed);
  for (const auto& input : metadata->inputs()) {
    const std::string& name = input.name();
    std::vector<int64_t> dims(input.shape().begin(), input.shape().end());
    const bool batched = !dims.empty() && dims[0] == -1;
    std::vector<int64_t> rest(dims.begin() + (batched ? 1 : 0), dims.end());
    if (auto it = shapes.find(name); it != shapes.end()) {
      if (std::none_of(rest.begin(), rest.end(), [](int64_t d) { return d < 0; })) {
        *error = {"--shape " + name + ": the model's input has fixed dims (metadata shape " + ShapeText(dims) +
                      "); --shape is only for inputs with variable (-1) dims",
                  true};
        return false;
      }
      if (it->second.size() != rest.size()) {
        *error = {"--shape " + name + ": " + std::to_string(it->second.size()) + " dims given, the model's input has " +
                      std::to_string(rest.size()) + " besides the batch dim (metadata shape " + ShapeText(dims) + ")",
                  true};
        return false;
      }
      for (size_t i = 0; i < rest.size(); ++i) {
        if (rest[i] >= 0 && rest[i] != it->second[i]) {
          *error = {"--shape " + name + ": dim " + std::to_string(i) + " is fixed at " + std::to_string(rest[i]) +
                        " by the model (metadata shape " + ShapeText(dims) + ")",
                    true};
          return false;
        }
      }
      rest = it->second;
    }
    for (int64_t d : rest) {
      if (d < 0) {
        *error = {"input '" + name + "' of '" + model + "' has variable dims " + ShapeText(dims) +
                      ": give them with --shape " + name + ":D1,D2,... (without the batch dim)",
                  true};
        return false;
      }
    }
    if (!batched && batch != 1) {
      *error = {"model '" + model + "' has no batch dim (input '" + name + "' shape " + ShapeText(dims) +
                    "): --batch must be 1",
                true};
      return false;
    }
    std::vector<int64_t> shape;
    if (batched) {
      shape.push_back(batch);
      out->rows = batch;
    }
    shape.insert(shape.end(), rest.begin(), rest.end());
    const std::string& datatype = input.datatype();
    if (es::client::DatatypeSize(datatype) == 0) {
      error->message = "input '" + name + "' of '" + model + "' is " + datatype + ": not supported (no fixed size)";
      return false;
    }
    const int64_t count = es::client::ElementCount(shape);
    if (count < 0) {
      std::string message = "input '";
      message.append(name).append("' of '").append(model).append("': shape ").append(ShapeText(shape));
      *error = {message + " is too large", true};
      return false;
    }
    const std::string payload = RandomPayload(datatype, count, rng);
    es::client::Status s =
        es::client::AddRawInput(&out->request, name, datatype, shape, payload.data(), payload.size());
    if (!s.ok()) {
      error->message = s.message();
      return false;
    }
    out->inputs.push_back({name, datatype, shape, payload.size()});
  }
  out->bytes = out->request.SerializeAsString();
  return true;
}

}  // namespace es::loadgen
