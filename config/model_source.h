// Internal to es_config: loading a model repository while keeping where each
// model's fields were written.
//
// Some errors can only be found once every model is loaded (an ensemble
// member that does not exist, a host the server config lacks), but they must
// still name the file, line and field of the offending entry. So loading
// keeps a ModelSource beside each ModelConfig until the cross checks are done.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "common/status.h"
#include "config/yaml_reader.h"

namespace es {

struct ModelSource {
  std::string file;               // <repo>/<model>/config.yaml
  int platform_line = 1;
  int max_batch_size_line = 1;    // of the key, or of the document when absent
  std::vector<int> host_lines;    // one per ModelConfig::hosts entry
  std::vector<int> member_lines;  // one per ensemble member
  int combine_line = 1;
  std::vector<int> rung_lines;    // one per overload.ladder entry
  int response_cache_line = 0;    // of `response_cache:`, when present
  bool inputs_declared = false;   // ensembles may omit inputs/outputs
  bool outputs_declared = false;
};

struct LoadedModel {
  ModelConfig config;
  ModelSource source;
};

using LoadedRepository = std::map<std::string, LoadedModel>;

// Parses one config.yaml (already loaded as `root`) of the model whose folder
// is named `folder_name`. Fills everything but `directory` and `versions`.
Status ParseModelConfig(const yaml::Field& root, const std::string& folder_name,
                        LoadedModel* model);

// The `overload:` section (an ensemble's ladder), alone; and its rungs
// checked against the repository once every ensemble's tensors are resolved.
Status ParseOverload(const yaml::Field& field, LoadedModel* model);
Status CheckOverload(const LoadedModel& ensemble, const LoadedRepository& repo);

// "" when `have` declares exactly the tensors `wanted`, else the difference
// ("has no input 'x'", "output 'y' has dims [3], <theirs> are [4]").
std::string CompareTensors(const char* kind, const std::vector<TensorSpec>& wanted,
                           const std::vector<TensorSpec>& have, const std::string& theirs);

// The `experiment:` section (ExperimentSpec), alone; its candidate is
// looked up when requests come (it may be loaded later).
Status ParseExperiment(const yaml::Field& field, LoadedModel* model);

// One ensemble (and its ladder) against the models of `repository`, which
// are served as they are (their own checks are done): for loading one
// model while the others are served.
Status CheckOneEnsemble(LoadedModel* ensemble, const LoadedRepository& repository);

// Fills model->config.versions from the numeric folders of its directory;
// a torchscript model needs at least one, each holding model.pt.
Status ScanVersions(LoadedModel* model);

// Resolves ensembles against their members (copying omitted inputs/outputs
// from the first member) and checks that they are compatible.
Status CheckEnsembles(LoadedRepository* repository);

// Loads one model folder (`dir` inside the repository resolving to `repo_root`).
StatusOr<LoadedModel> LoadOneModelFolder(const std::string& dir, const std::string& repo_root);
// The same with the version folders in `files_dir` (resolving inside
// `files_root`) rather than beside config.yaml: an uploaded config over the
// repository's files.
StatusOr<LoadedModel> LoadOneModelFolder(const std::string& dir, const std::string& repo_root,
                                         const std::string& files_dir, const std::string& files_root);

// The sub-folders of `dir`, sorted, hidden ones left out.
StatusOr<std::vector<std::string>> ModelFolders(const std::string& dir);

// Loads every model folder of `repo_dir` (an absolute path) and checks the
// ensembles; the server config's checks come on top (server_config.cc). A
// model folder or model.pt that resolves (through symlinks) outside the
// repository is an error naming both paths.
StatusOr<LoadedRepository> LoadRepositoryWithSources(const std::string& repo_dir);

}  // namespace es
