#include "config/host_model_spec.h"

#include <nlohmann/json.hpp>

namespace es {
namespace {

using nlohmann::json;

// Bounds as config.yaml's (model_parser.cc): a spec is checked as strictly.
constexpr int64_t kMaxBatchSize = int64_t{1} << 20;
constexpr size_t kMaxTensors = 64;
constexpr size_t kMaxRank = 8;

json EncodeTensors(const std::vector<TensorSpec>& tensors) {
  json list = json::array();
  for (const TensorSpec& t : tensors) {
    list.push_back({{"name", t.name}, {"datatype", DataTypeName(t.datatype)}, {"dims", t.dims}});
  }
  return list;
}

Status Missing(const std::string& field, const char* what) {
  return Status::InvalidArgument("model spec: '" + field + "' " + what);
}

Status DecodeTensors(const json& spec, const char* key, std::vector<TensorSpec>* out) {
  auto it = spec.find(key);
  if (it == spec.end() || !it->is_array() || it->empty() || it->size() > kMaxTensors) {
    return Missing(key, "must be a list of 1 to 64 tensors");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string field = std::string(key) + "[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || t["name"].get<std::string>().empty()) {
      return Missing(field + ".name", "must be a non-empty string");
    }
    TensorSpec tensor;
    tensor.name = t["name"].get<std::string>();
    const std::optional<DataType> type = t.contains("datatype") && t["datatype"].is_string()
                                             ? ParseDataType(t["datatype"].get<std::string>())
                                             : std::nullopt;
    if (!type) return Missing(field + ".datatype", "must name a KServe datatype");
    tensor.datatype = *type;
    if (!t.contains("dims") || !t["dims"].is_array() || t["dims"].size() > kMaxRank) {
      return Missing(field + ".dims", "must be a list of at most 8 dims");
    }
    for (const json& d : t["dims"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < -1 || d.get<int64_t>() == 0) {
        return Missing(field + ".dims", "must hold positive sizes or -1");
      }
      tensor.dims.push_back(d.get<int64_t>());
    }
    out->push_back(std::move(tensor));
  }
  return Status::Ok();
}

}  // namespace

std::string EncodeHostModelSpec(const ModelConfig& model) {
  const json spec = {{"name", model.HostKey()},
                     {"platform", model.platform},
                     {"directory", model.directory},
                     {"max_batch_size", model.max_batch_size},
                     {"inputs", EncodeTensors(model.inputs)},
                     {"outputs", EncodeTensors(model.outputs)}};
  return spec.dump();
}

std::string ServingSignature(const ModelConfig& m) {
  const DynamicBatching& b = m.dynamic_batching;
  std::string s = EncodeHostModelSpec(m);
  const auto add = [&s](const std::string& part) {
    s.push_back('|');
    s.append(part);
  };
  for (const std::string& h : m.hosts) add(h);
  for (int64_t v : {int64_t{m.instances_per_host}, m.max_compute_ms, int64_t{b.enabled}, b.max_queue_delay_us,
                    b.max_queue_size, int64_t{b.priority_levels}, int64_t{b.default_priority}, b.max_queue_bytes}) {
    add(std::to_string(v));
  }
  s.append("|preferred");
  for (int64_t p : b.preferred_batch_sizes) add(std::to_string(p));
  return s;
}

StatusOr<ModelConfig> DecodeHostModelSpec(std::string_view text) {
  const json spec = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (spec.is_discarded() || !spec.is_object()) return Status::InvalidArgument("model spec: not a JSON object");
  ModelConfig model;
  for (auto [key, out] : {std::pair{"name", &model.name}, std::pair{"platform", &model.platform},
                          std::pair{"directory", &model.directory}}) {
    auto it = spec.find(key);
    if (it == spec.end() || !it->is_string() || it->get<std::string>().empty()) {
      return Missing(key, "must be a non-empty string");
    }
    *out = it->get<std::string>();
  }
  if (model.platform != "torchscript") return Missing("platform", "must be 'torchscript' (a host runs no ensemble)");
  if (model.directory.front() != '/') return Missing("directory", "must be an absolute path");
  auto batch = spec.find("max_batch_size");
  if (batch == spec.end() || !batch->is_number_integer() || batch->get<int64_t>() < 0 ||
      batch->get<int64_t>() > kMaxBatchSize) {
    return Missing("max_batch_size", "must be an integer in [0, 2^20]");
  }
  model.max_batch_size = batch->get<int64_t>();
  ES_RETURN_IF_ERROR(DecodeTensors(spec, "inputs", &model.inputs));
  ES_RETURN_IF_ERROR(DecodeTensors(spec, "outputs", &model.outputs));
  return model;
}

}  // namespace es
