// ModelCatalog: which models, and which of their versions, the server serves
// at this moment: what a request may name.
//
// The router's catalog is its ModelRepository (model_repository.h), which
// changes while the server runs (load, unload, poll). StaticCatalog is the
// fixed catalog of a ServerConfig (every model, the versions its policy
// selects), for tests and tools that have no running repository.
//
// A ModelConfig handed out stays valid for the life of the catalog, even
// after the model is reloaded with another config or unloaded (requests in
// flight hold plain pointers to it).
//
// Thread safety: implementations are safe to call from any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/server_config.h"

namespace es {

class ModelCatalog {
 public:
  virtual ~ModelCatalog() = default;
  // The served config of model `name`; nullptr when no such model is served.
  virtual const ModelConfig* Find(const std::string& name) const = 0;
  // Its versions that take requests now (READY), ascending; {1} for a ready ensemble.
  virtual std::vector<int64_t> ReadyVersions(const ModelConfig& model) const = 0;
  // The highest of ReadyVersions(model); nullopt when none is. Asked for
  // every member call, so implementations answer a model's without making
  // the list (an ensemble's is {1} or none anyway).
  virtual std::optional<int64_t> HighestReady(const ModelConfig& model) const {
    const std::vector<int64_t> ready = ReadyVersions(model);
    if (ready.empty()) return std::nullopt;
    return ready.back();
  }
  // Whether `model` is still the served config of its name and `version` of
  // it takes requests now (asked once per request).
  virtual bool Serves(const ModelConfig& model, int64_t version) const {
    if (Find(model.name) != &model) return false;
    const std::vector<int64_t> ready = ReadyVersions(model);
    return std::find(ready.begin(), ready.end(), version) != ready.end();
  }
};

class StaticCatalog : public ModelCatalog {
 public:
  explicit StaticCatalog(const ServerConfig* config) : config_(config) {}
  const ModelConfig* Find(const std::string& name) const override { return config_->FindModel(name); }
  std::vector<int64_t> ReadyVersions(const ModelConfig& model) const override { return model.ServedVersions(); }

 private:
  const ServerConfig* config_;
};

// The version a request for `model` names: "" picks the highest ready
// version; a number must be a ready version (NOT_FOUND, listing them,
// otherwise; UNAVAILABLE when none is ready).
StatusOr<int64_t> ResolveVersion(const ModelCatalog& catalog, const ModelConfig& model, const std::string& requested);

}  // namespace es
