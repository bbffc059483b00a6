// LoadServerConfig: the server config, its repository, and the checks that
// need both (which hosts serve which model).
#include "config/server_config.h"

#include "config/model_source.h"
#include "config/server_parser.h"

namespace es {
namespace {

std::string HostNames(const ServerConfig& config) {
  std::string names;
  for (const HostConfig& host : config.hosts) names += (names.empty() ? "" : ", ") + host.name;
  return names;
}

// A model without `hosts:` runs on every host; named hosts must exist.
Status PlaceModel(const ServerConfig& config, LoadedModel* model) {
  ModelConfig& model_config = model->config;
  if (model_config.is_ensemble()) return Status::Ok();
  if (model_config.hosts.empty()) {
    for (const HostConfig& host : config.hosts) model_config.hosts.push_back(host.name);
    return Status::Ok();
  }
  for (size_t i = 0; i < model_config.hosts.size(); ++i) {
    if (config.FindHost(model_config.hosts[i]) != nullptr) continue;
    return yaml::ErrorAt(model->source.file, model->source.host_lines[i],
                         "hosts[" + std::to_string(i) + "]",
                         "unknown host '" + model_config.hosts[i] + "' (" + config.path +
                             " defines: " + HostNames(config) + ")");
  }
  return Status::Ok();
}

StatusOr<ServerConfig> Load(const std::string& path) {
  StatusOr<yaml::Field> root = yaml::LoadFile(path);
  if (!root.ok()) return root.status();
  ServerConfig config;
  config.path = path;
  ES_RETURN_IF_ERROR(ParseServerConfig(*root, &config));
  StatusOr<LoadedRepository> repository = LoadRepositoryWithSources(config.repository);
  if (!repository.ok()) return repository.status();
  for (auto& [name, model] : *repository) {
    ES_RETURN_IF_ERROR(PlaceModel(config, &model));
    config.models.emplace(name, std::move(model.config));
  }
  return config;
}

}  // namespace

const HostConfig* ServerConfig::FindHost(const std::string& name) const {
  for (const HostConfig& host : hosts) {
    if (host.name == name) return &host;
  }
  return nullptr;
}

const ModelConfig* ServerConfig::FindModel(const std::string& name) const {
  auto it = models.find(name);
  return it == models.end() ? nullptr : &it->second;
}

StatusOr<ServerConfig> LoadServerConfig(const std::string& path) {
  try {
    return Load(path);
  } catch (const std::exception& e) {
    // Safety net at the component's edge: nothing below should throw, but a
    // config error must never take the server down with an exception.
    return Status::InvalidArgument(path + ": " + e.what());
  }
}

}  // namespace es
