#include "server/kserve/model_upload_request.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "server/kserve/client_json.h"

namespace es {
namespace {

using json = nlohmann::json;

Status Bad(const std::string& field, const std::string& what) {
  return Status::InvalidArgument("load parameter 'config': " + field + ": " + what);
}

// Triton's default value of a field (what a config read from a server
// carries for the fields it does not use): nothing to translate.
bool IsDefault(const json& v) {
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_number()) return v == 0;
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return s.empty() || s == "FORMAT_NONE";
  }
  return std::all_of(v.begin(), v.end(), [](const json& item) { return IsDefault(item); });
}

Status Unsupported(const std::string& field) {
  return Bad(field, "not supported by this server (only Triton's default value is accepted here)");
}

// An int64 as protobuf's JSON writes it: a number, or a string of one.
StatusOr<int64_t> ReadInt(const json& v, const std::string& field) {
  if (v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX)) return v.get<int64_t>();
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    int64_t out = 0;
    const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (err == std::errc() && end == s.data() + s.size() && !s.empty()) return out;
  }
  return Bad(field, "expected an integer, got " + v.dump());
}

StatusOr<json> ReadInts(const json& v, const std::string& field) {
  if (!v.is_array()) return Bad(field, "expected a list");
  json out = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    ES_ASSIGN_OR_RETURN(int64_t item, ReadInt(v[i], field + "[" + std::to_string(i) + "]"));
    out.push_back(item);
  }
  return out;
}

StatusOr<std::string> ReadString(const json& v, const std::string& field) {
  if (!v.is_string()) return Bad(field, "expected a string, got " + v.dump());
  return v.get<std::string>();
}

StatusOr<json> Tensor(const json& in, const std::string& where) {
  if (!in.is_object()) return Bad(where, "expected an object");
  json out = json::object();
  for (const auto& [key, v] : in.items()) {
    std::string field = where;
    field += '.';
    field += key;
    if (key == "name") {
      ES_ASSIGN_OR_RETURN(out["name"], ReadString(v, field));
    } else if (key == "data_type" || key == "datatype") {
      ES_ASSIGN_OR_RETURN(std::string type, ReadString(v, field));
      if (type.rfind("TYPE_", 0) == 0) type = type.substr(5);
      out["datatype"] = type;
    } else if (key == "dims") {
      ES_ASSIGN_OR_RETURN(out["dims"], ReadInts(v, field));
    } else if (!IsDefault(v)) {
      return Unsupported(field);
    }
  }
  return out;
}

StatusOr<json> Tensors(const json& in, const std::string& key) {
  if (!in.is_array()) return Bad(key, "expected a list");
  json out = json::array();
  for (size_t i = 0; i < in.size(); ++i) {
    ES_ASSIGN_OR_RETURN(json tensor, Tensor(in[i], key + "[" + std::to_string(i) + "]"));
    out.push_back(std::move(tensor));
  }
  return out;
}

StatusOr<json> TranslateDynamicBatching(const json& in) {
  if (!in.is_object()) return Bad("dynamic_batching", "expected an object");
  json out = json::object();
  // Triton's name -> ours; Triton's 0 means "not set".
  static const std::pair<const char*, const char*> kRenamed[] = {
      {"max_queue_delay_microseconds", "max_queue_delay_us"},
      {"priority_levels", "priority_levels"},
      {"default_priority_level", "default_priority"}};
  for (const auto& [key, v] : in.items()) {
    const std::string field = "dynamic_batching." + key;
    const auto renamed = std::find_if(std::begin(kRenamed), std::end(kRenamed),
                                      [&key = key](const auto& r) { return key == r.first; });
    if (renamed != std::end(kRenamed)) {
      ES_ASSIGN_OR_RETURN(int64_t value, ReadInt(v, field));
      if (value != 0 || key == "max_queue_delay_microseconds") out[renamed->second] = value;
    } else if (key == "preferred_batch_size" || key == "preferred_batch_sizes") {
      ES_ASSIGN_OR_RETURN(out["preferred_batch_sizes"], ReadInts(v, field));
    } else if (key == "default_queue_policy") {
      if (!v.is_object()) return Bad(field, "expected an object");
      for (const auto& [policy_key, policy_value] : v.items()) {
        if (policy_key == "max_queue_size") {
          ES_ASSIGN_OR_RETURN(int64_t size, ReadInt(policy_value, field + ".max_queue_size"));
          if (size != 0) out["max_queue_size"] = size;
        } else if (!IsDefault(policy_value)) {
          std::string policy_field = field;
          policy_field += '.';
          policy_field += policy_key;
          return Unsupported(policy_field);
        }
      }
    } else if (key == "max_queue_delay_us" || key == "max_queue_size" || key == "default_priority" ||
               key == "max_queue_bytes") {
      out[key] = v;  // ours, as config.yaml has them
    } else if (!IsDefault(v)) {
      return Unsupported(field);
    }
  }
  return out;
}

// instance_group: each group's kind picks the server's hosts of that kind;
// its count is spread over them (Triton counts instances in all).
Status InstanceGroups(const json& in, const ServerConfig& server, json* out) {
  if (!in.is_array()) return Bad("instance_group", "expected a list");
  std::set<std::string> hosts;
  int64_t per_host = 1;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string where = "instance_group[" + std::to_string(i) + "]";
    const json& group = in[i];
    if (!group.is_object()) return Bad(where, "expected an object");
    std::string kind = "KIND_AUTO";
    int64_t count = 1;
    for (const auto& [key, v] : group.items()) {
      if (key == "kind") {
        ES_ASSIGN_OR_RETURN(kind, ReadString(v, where + ".kind"));
      } else if (key == "count") {
        ES_ASSIGN_OR_RETURN(count, ReadInt(v, where + ".count"));
        if (count < 1 || count > (1 << 16)) return Bad(where + ".count", "must be 1 to 65536");
      } else if (key != "name" && !IsDefault(v)) {
        std::string field = where;
        field += '.';
        field += key;
        return Unsupported(field);
      }
    }
    if (kind != "KIND_AUTO" && kind != "KIND_CPU" && kind != "KIND_GPU") {
      return Bad(where + ".kind", "'" + kind + "' is not one of KIND_AUTO, KIND_CPU, KIND_GPU");
    }
    std::vector<std::string> of_kind;
    for (const HostConfig& host : server.hosts) {
      const bool gpu = host.device.rfind("cuda", 0) == 0;
      if (kind == "KIND_AUTO" || (kind == "KIND_GPU") == gpu) of_kind.push_back(host.name);
    }
    if (of_kind.empty()) return Bad(where + ".kind", "the server has no host of kind " + kind);
    hosts.insert(of_kind.begin(), of_kind.end());
    const int64_t hosts_of_kind = static_cast<int64_t>(of_kind.size());
    per_host = std::max(per_host, (count + hosts_of_kind - 1) / hosts_of_kind);
  }
  if (hosts.empty()) return Status::Ok();
  if (!out->contains("hosts")) (*out)["hosts"] = std::vector<std::string>(hosts.begin(), hosts.end());
  if (!out->contains("instances_per_host")) (*out)["instances_per_host"] = per_host;
  return Status::Ok();
}

Status Platform(const std::string& key, const std::string& value, json* out) {
  if (value.empty()) return Status::Ok();
  if (value == "ensemble") {
    return Bad(key, "an ensemble cannot be uploaded (its members are models of the repository: put its folder "
                    "into the repository and load it by name)");
  }
  const bool torch = key == "platform" ? value == "pytorch_libtorch" || value == "torchscript" : value == "pytorch";
  if (!torch) {
    return Bad(key, "'" + value + "' is not served here (" +
                        (key == "platform" ? std::string("pytorch_libtorch") : std::string("pytorch")) + " is)");
  }
  (*out)["platform"] = "torchscript";
  return Status::Ok();
}

}  // namespace

StatusOr<std::string> TritonConfigToYaml(const std::string& json_text, const std::string& model,
                                         const ServerConfig& server) {
  ES_ASSIGN_OR_RETURN(const json in, ParseClientJson(json_text, "load parameter 'config'"));
  if (!in.is_object()) {
    return Status::InvalidArgument("load parameter 'config': not a JSON object (a model config in Triton's JSON form)");
  }
  json out = json::object();
  json instance_groups;
  for (const auto& [key, v] : in.items()) {
    if (key == "name") {
      ES_ASSIGN_OR_RETURN(std::string name, ReadString(v, key));
      if (!name.empty() && name != model) {
        std::string what = "'";
        what += name;
        what += "' is not the model loaded ('" + model + "')";
        return Bad(key, what);
      }
    } else if (key == "platform" || key == "backend") {
      ES_ASSIGN_OR_RETURN(std::string value, ReadString(v, key));
      ES_RETURN_IF_ERROR(Platform(key, value, &out));
    } else if (key == "max_batch_size") {
      ES_ASSIGN_OR_RETURN(out[key], ReadInt(v, key));
    } else if (key == "input" || key == "inputs") {
      ES_ASSIGN_OR_RETURN(out["inputs"], Tensors(v, key));
    } else if (key == "output" || key == "outputs") {
      ES_ASSIGN_OR_RETURN(out["outputs"], Tensors(v, key));
    } else if (key == "dynamic_batching") {
      ES_ASSIGN_OR_RETURN(out[key], TranslateDynamicBatching(v));
    } else if (key == "instance_group") {
      instance_groups = v;
    } else if (key == "version_policy" || key == "response_cache" || key == "hosts" || key == "instances_per_host" ||
               key == "max_compute_ms") {
      out[key] = v;  // the same in both forms; config.yaml's parser checks it
    } else if (!IsDefault(v)) {
      return Unsupported(key);
    }
  }
  if (!instance_groups.is_null()) ES_RETURN_IF_ERROR(InstanceGroups(instance_groups, server, &out));
  if (!out.contains("platform")) {
    return Bad("platform", "missing (pytorch_libtorch, or backend pytorch: uploads are TorchScript models)");
  }
  return out.dump(2) + "\n";
}

StatusOr<ModelRepository::Upload> UploadFromLoadParameters(const std::string& model, const LoadParameters& parameters,
                                                           const ServerConfig& server) {
  // The files' count and bytes first, before any is copied.
  size_t files = 0;
  uint64_t total_bytes = 0;
  for (const auto& [key, p] : parameters) {
    if (key.rfind("file:", 0) != 0) continue;
    total_bytes += p.parameter_choice_case() == inference::ModelRepositoryParameter::kBytesParam
                       ? p.bytes_param().size()
                       : p.string_param().size();
    if (++files > kMaxUploadFiles) {
      return Status::ResourceExhausted("model '" + ShownClientText(model) + "': more than " +
                                       std::to_string(kMaxUploadFiles) + " file: load parameters");
    }
  }
  if (total_bytes > static_cast<uint64_t>(server.limits.max_request_bytes)) {
    return Status::ResourceExhausted("the uploaded files of model '" + ShownClientText(model) + "' hold " +
                                     std::to_string(total_bytes) + " bytes, more than " +
                                     std::to_string(server.limits.max_request_bytes) + " (limits.max_request_bytes)");
  }
  ModelRepository::Upload upload;
  bool have_config = false;
  for (const auto& [key, p] : parameters) {
    const bool text = p.parameter_choice_case() == inference::ModelRepositoryParameter::kStringParam;
    const bool bytes = p.parameter_choice_case() == inference::ModelRepositoryParameter::kBytesParam;
    if (key == "config") {
      if (!text && !bytes) return Status::InvalidArgument("load parameter 'config' must be a string (JSON)");
      ES_ASSIGN_OR_RETURN(upload.config_yaml,
                          TritonConfigToYaml(text ? p.string_param() : p.bytes_param(), model, server));
      have_config = true;
    } else if (key.rfind("file:", 0) == 0) {
      if (!text && !bytes) return Status::InvalidArgument("load parameter '" + key + "' must be the file's bytes");
      ModelUploads::File file{key.substr(5), text ? p.string_param() : p.bytes_param()};
      ES_RETURN_IF_ERROR(ModelUploads::CheckPath(file.path));
      upload.files.push_back(std::move(file));
    } else {
      return Status::InvalidArgument("unknown load parameter '" + key +
                                     "' (Triton's: config, a model config as JSON; file:<path>, a model file)");
    }
  }
  if (!have_config) {
    return Status::InvalidArgument("file: load parameters need a 'config' parameter as well (the uploaded folder is "
                                   "the whole model: its config comes with it)");
  }
  std::sort(upload.files.begin(), upload.files.end(),
            [](const ModelUploads::File& a, const ModelUploads::File& b) { return a.path < b.path; });
  return upload;
}

}  // namespace es
