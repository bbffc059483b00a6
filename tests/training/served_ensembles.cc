#include "tests/training/served_ensembles.h"

#include "config/server_config.h"

namespace es::training_test {

StatusOr<std::map<std::string, ServedEnsemble>> LoadServedEnsembles(const std::string& path, bool server_yaml) {
  std::map<std::string, ModelConfig> models;
  if (server_yaml) {
    ES_ASSIGN_OR_RETURN(ServerConfig server, LoadServerConfig(path));
    models = std::move(server.models);
  } else {
    ES_ASSIGN_OR_RETURN(models, LoadRepository(path));
  }
  std::map<std::string, ServedEnsemble> out;
  for (const auto& [name, model] : models) {
    if (!model.is_ensemble()) continue;
    ServedEnsemble& e = out[name];
    e.cascade = model.ensemble.cascade();
    e.exit_threshold = model.ensemble.exit_threshold;
    for (const auto& member : model.ensemble.members) {
      e.members.push_back(member.model);
      if (!member.packed.empty()) e.packed[member.model] = member.packed;
    }
    e.stages = model.ensemble.stages;
    e.overload = model.overload;
    e.experiment = model.experiment;
  }
  return out;
}

}  // namespace es::training_test
