// The ensembles of a model repository as the server's own config loader
// reads them (config/server_config.h), for the training tests: what the
// trainer wrote, checked by the code that will serve it.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/model_config.h"

namespace es::training_test {

struct ServedEnsemble {
  bool cascade = false;
  double exit_threshold = 0;
  std::vector<std::string> members;         // in the config's order
  std::map<std::string, std::vector<std::string>> packed;  // a packed entry's model -> its members
  std::vector<std::vector<size_t>> stages;  // indexes into `members`
  OverloadSpec overload;                    // the ladder, as the server reads it
  ExperimentSpec experiment;                // its experiment: section, as the server reads it
};

// `path` a server.yaml (loaded with its repository and every cross-check, as
// at server start) or, with `server_yaml` false, a repository folder.
StatusOr<std::map<std::string, ServedEnsemble>> LoadServedEnsembles(const std::string& path, bool server_yaml);

}  // namespace es::training_test
