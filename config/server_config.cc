// LoadServerConfig: the server config, its repository, and the checks that
// need both (which hosts serve which model).
#include "config/server_config.h"

#include <algorithm>
#include <filesystem>

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
  if (model_config.response_cache && config.response_cache_bytes == 0) {
    return yaml::ErrorAt(model->source.file, model->source.response_cache_line, "response_cache.enable",
                         "the server has no response cache: give it one in " + config.path +
                             " (response_cache: {size_bytes: N})");
  }
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

StatusOr<ServerConfig> Load(const std::string& path, bool with_repository) {
  ES_ASSIGN_OR_RETURN(yaml::Field root, yaml::LoadFile(path));
  ServerConfig config;
  config.path = path;
  ES_RETURN_IF_ERROR(ParseServerConfig(root, &config));
  if (!with_repository) return config;
  ES_ASSIGN_OR_RETURN(LoadedRepository repository, LoadRepositoryWithSources(config.repository));
  for (auto& [name, model] : repository) {
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

namespace {

// The folder of model `name`, parsed and its versions scanned, unchecked
// against other models.
StatusOr<LoadedModel> ReadModelFolder(const ServerConfig& config, const std::string& name) {
  std::error_code ec;
  const std::filesystem::path root = std::filesystem::canonical(config.repository, ec);
  if (ec) return Status::InvalidArgument(config.repository + ": cannot resolve the model repository folder");
  if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos) {
    return Status::InvalidArgument("'" + name + "' is not a model folder name");
  }
  const std::string dir = config.repository + "/" + name;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::NotFound("no model folder '" + name + "' in the repository " + config.repository);
  }
  return LoadOneModelFolder(dir, root.string());
}

}  // namespace

StatusOr<std::vector<std::string>> RepositoryEnsembleMembers(const ServerConfig& config, const std::string& name) {
  ES_ASSIGN_OR_RETURN(LoadedModel model, ReadModelFolder(config, name));
  std::vector<std::string> members;
  for (const EnsembleMember& m : model.config.ensemble.members) members.push_back(m.model);
  return members;
}

StatusOr<std::vector<std::string>> RepositoryLadderRungs(const ServerConfig& config, const std::string& name) {
  ES_ASSIGN_OR_RETURN(LoadedModel model, ReadModelFolder(config, name));
  std::vector<std::string> rungs;
  for (const OverloadRung& r : model.config.overload.ladder) {
    if (r.model != name && std::find(rungs.begin(), rungs.end(), r.model) == rungs.end()) rungs.push_back(r.model);
  }
  return rungs;
}

StatusOr<ModelConfig> LoadRepositoryModel(const ServerConfig& config, const std::string& name,
                                          const std::map<std::string, ModelConfig>& members) {
  ES_ASSIGN_OR_RETURN(LoadedModel model, ReadModelFolder(config, name));
  ES_RETURN_IF_ERROR(PlaceModel(config, &model));
  if (!model.config.is_ensemble()) return std::move(model.config);
  // The ensemble is checked against its members and rungs as they are served now.
  LoadedRepository repository;
  auto add = [&](const std::string& other) {
    if (auto it = members.find(other); it != members.end()) repository[other].config = it->second;
  };
  for (const EnsembleMember& member : model.config.ensemble.members) add(member.model);
  for (const OverloadRung& rung : model.config.overload.ladder) add(rung.model);
  ES_RETURN_IF_ERROR(CheckOneEnsemble(&model, repository));
  return std::move(model.config);
}

StatusOr<ModelConfig> LoadUploadedModel(const ServerConfig& config, const std::string& folder,
                                        const std::string& files_folder, const std::string& root) {
  std::error_code ec;
  const std::filesystem::path canonical_root = std::filesystem::canonical(root, ec);
  if (ec) return Status::Internal(root + ": cannot resolve the upload folder: " + ec.message());
  // Files from the repository (a config-only upload) must stay inside it.
  std::filesystem::path files_root = canonical_root;
  if (files_folder != folder) {
    files_root = std::filesystem::canonical(config.repository, ec);
    if (ec) return Status::InvalidArgument(config.repository + ": cannot resolve the model repository folder");
  }
  ES_ASSIGN_OR_RETURN(LoadedModel model,
                      LoadOneModelFolder(folder, canonical_root.string(), files_folder, files_root.string()));
  if (model.config.is_ensemble()) {
    return Status::InvalidArgument("model '" + model.config.name +
                                   "': an ensemble cannot be uploaded (its members are models of the repository: "
                                   "put its folder into the repository and load it by name)");
  }
  ES_RETURN_IF_ERROR(PlaceModel(config, &model));
  return std::move(model.config);
}

StatusOr<std::vector<std::string>> RepositoryModelNames(const std::string& repo_dir) {
  return ModelFolders(repo_dir);
}

const char* ModelControlModeName(ModelControlMode mode) {
  switch (mode) {
    case ModelControlMode::kNone: return "none";
    case ModelControlMode::kExplicit: return "explicit";
    case ModelControlMode::kPoll: return "poll";
  }
  return "unknown";
}

StatusOr<ServerConfig> LoadServerConfig(const std::string& path, bool with_repository) {
  try {
    return Load(path, with_repository);
  } catch (const std::exception& e) {
    // Safety net at the component's edge: nothing below should throw, but a
    // config error must never take the server down with an exception.
    return Status::InvalidArgument(path + ": " + e.what());
  }
}

}  // namespace es
