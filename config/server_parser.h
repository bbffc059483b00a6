// Internal to es_config: the server config document itself (ports, hosts,
// limits), without the model repository it names. LoadServerConfig()
// (server_config.cc) loads the repository and cross-checks the two.
#pragma once

#include "config/server_config.h"
#include "common/status.h"
#include "config/yaml_reader.h"

namespace es {

// Fills every field of *config but `path` and `models`. `repository` becomes
// an absolute path (relative ones are relative to the config file's folder)
// that is checked to be an existing folder.
Status ParseServerConfig(const yaml::Field& root, ServerConfig* config);

}  // namespace es
