// Loading a model repository: one folder per model, each with a config.yaml
// and (for TorchScript) numeric version folders holding model.pt. Model
// folders and model.pt files may be symlinks only if they resolve inside the
// repository.
#include <algorithm>
#include <filesystem>
#include <system_error>

#include "config/model_source.h"
#include "config/server_config.h"

namespace es {
namespace fs = std::filesystem;
namespace {

// "12" -> 12; nullopt for names that are not version folders ("notes", "1a",
// or absurdly long digit strings that would overflow).
std::optional<int64_t> VersionNumber(const std::string& name) {
  if (name.empty() || name.size() > 18) return std::nullopt;
  if (!std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::stoll(name);
}

// Sub-folder names of `dir`, sorted so that loading (and the first error
// reported) does not depend on the file system's order. Hidden folders
// (".git", editor state) are not models or versions.
StatusOr<std::vector<std::string>> SubFolders(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (name.empty() || name[0] == '.' || !it->is_directory(type_ec)) continue;
    names.push_back(name);
  }
  if (ec) {
    return Status::InvalidArgument(dir.string() + ": cannot list the folder: " + ec.message());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Whether `path` (canonical) is `root` (canonical) or lies below it.
bool Inside(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

// A model folder or model.pt that is a symlink must still resolve inside the
// repository: the repository is what an operator reviews and what the hosts
// are meant to load, and a link out of it would make a host load (and the
// router vouch for) a file from anywhere on the machine. Links within the
// repository (one model's version shared by another) stay allowed.
Status CheckResolvesInside(const fs::path& path, const fs::path& root, const char* what) {
  std::error_code ec;
  const fs::path target = fs::canonical(path, ec);
  if (ec) return Status::InvalidArgument(path.string() + ": cannot resolve the " + what + ": " + ec.message());
  if (Inside(target, root)) return Status::Ok();
  return Status::InvalidArgument(path.string() + ": the " + what + " resolves to '" + target.string() +
                                 "', outside the model repository '" + root.string() +
                                 "' (symlinks must stay inside the repository)");
}

// Reads `dir`/config.yaml; the version folders are read from `files_dir`
// (normally `dir`), each model.pt resolving inside `files_root`.
StatusOr<LoadedModel> LoadModelFolder(const fs::path& dir, const fs::path& repo_root, const fs::path& files_dir,
                                      const fs::path& files_root) {
  const std::string name = dir.filename().string();
  const fs::path config_path = dir / "config.yaml";
  ES_RETURN_IF_ERROR(CheckResolvesInside(dir, repo_root, "model folder"));
  std::error_code ec;
  if (!fs::is_regular_file(config_path, ec)) {
    return Status::InvalidArgument(dir.string() + ": model folder '" + name +
                                   "' has no config.yaml");
  }
  ES_ASSIGN_OR_RETURN(yaml::Field root, yaml::LoadFile(config_path.string()));
  LoadedModel model;
  ES_RETURN_IF_ERROR(ParseModelConfig(root, name, &model));
  model.config.directory = files_dir.string();
  ES_RETURN_IF_ERROR(ScanVersions(&model));
  for (int64_t version : model.config.versions) {
    ES_RETURN_IF_ERROR(CheckResolvesInside(model.config.ModelPath(version), files_root, "model.pt"));
  }
  return model;
}

StatusOr<LoadedModel> LoadModelFolder(const fs::path& dir, const fs::path& repo_root) {
  return LoadModelFolder(dir, repo_root, dir, repo_root);
}

}  // namespace

Status ScanVersions(LoadedModel* model) {
  ModelConfig& config = model->config;
  // An ensemble has no files of its own: its members do.
  if (config.is_ensemble()) return Status::Ok();
  ES_ASSIGN_OR_RETURN(std::vector<std::string> folders, SubFolders(config.directory));
  for (const std::string& folder : folders) {
    std::optional<int64_t> version = VersionNumber(folder);
    if (!version) continue;
    const fs::path version_dir = fs::path(config.directory) / folder;
    if (*version == 0) {
      return Status::InvalidArgument(version_dir.string() +
                                     ": version folders are numbered from 1");
    }
    std::error_code ec;
    if (!fs::is_regular_file(version_dir / "model.pt", ec)) {
      return Status::InvalidArgument((version_dir / "model.pt").string() +
                                     ": missing (every numeric version folder must hold one)");
    }
    config.versions.push_back(*version);
  }
  std::sort(config.versions.begin(), config.versions.end());
  if (config.versions.empty()) {
    return yaml::ErrorAt(model->source.file, model->source.platform_line, "platform",
                         "a torchscript model needs a version folder holding model.pt, e.g. " +
                             config.ModelPath(1));
  }
  if (config.ServedVersions().empty()) {
    return Status::InvalidArgument(model->source.file + ": version_policy serves none of the version folders " +
                                   "found in " + config.directory);
  }
  return Status::Ok();
}

StatusOr<LoadedModel> LoadOneModelFolder(const std::string& dir, const std::string& repo_root) {
  return LoadOneModelFolder(dir, repo_root, dir, repo_root);
}

StatusOr<LoadedModel> LoadOneModelFolder(const std::string& dir, const std::string& repo_root,
                                         const std::string& files_dir, const std::string& files_root) {
  try {
    return LoadModelFolder(dir, repo_root, files_dir, files_root);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(dir + ": " + e.what());  // as LoadRepository's safety net
  }
}

StatusOr<std::vector<std::string>> ModelFolders(const std::string& dir) { return SubFolders(dir); }

StatusOr<LoadedRepository> LoadRepositoryWithSources(const std::string& repo_dir) {
  std::error_code ec;
  if (!fs::is_directory(repo_dir, ec)) {
    std::string message = repo_dir + ": the model repository folder does not exist";
    // The demo's (config/demo.yaml): say how it is made.
    if (fs::path(repo_dir).lexically_normal().filename() == "demo_repo") {
      message += " (write it with `build/bin/ensemble-make-demo --out " + repo_dir + "`, or run scripts/demo.sh)";
    }
    return Status::InvalidArgument(message);
  }
  // Symlinks are judged against where the repository itself resolves, so a
  // repository reached through a link (/srv/models -> /data/models) works.
  const fs::path root = fs::canonical(repo_dir, ec);
  if (ec) return Status::InvalidArgument(repo_dir + ": cannot resolve the model repository folder: " + ec.message());
  ES_ASSIGN_OR_RETURN(std::vector<std::string> folders, SubFolders(repo_dir));
  LoadedRepository repository;
  for (const std::string& folder : folders) {
    ES_ASSIGN_OR_RETURN(LoadedModel model, LoadModelFolder(fs::path(repo_dir) / folder, root));
    repository.emplace(folder, std::move(model));
  }
  ES_RETURN_IF_ERROR(CheckEnsembles(&repository));
  return repository;
}

StatusOr<std::map<std::string, ModelConfig>> LoadRepository(const std::string& repo_dir) {
  std::error_code ec;
  fs::path dir = fs::absolute(repo_dir, ec).lexically_normal();
  if (ec) return Status::InvalidArgument(repo_dir + ": " + ec.message());
  if (!dir.has_filename()) dir = dir.parent_path();  // "repo/" -> "repo"
  try {
    ES_ASSIGN_OR_RETURN(LoadedRepository loaded, LoadRepositoryWithSources(dir.string()));
    std::map<std::string, ModelConfig> models;
    for (auto& [name, model] : loaded) models.emplace(name, std::move(model.config));
    return models;
  } catch (const std::exception& e) {
    // Safety net at the component's edge: yaml-cpp or the file system threw
    // where we did not expect it.
    return Status::InvalidArgument(dir.string() + ": " + e.what());
  }
}

}  // namespace es
