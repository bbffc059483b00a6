// InferenceCore: runs a validated InferRequest on the model hosts.
//
// A TorchScript model's requests go to its ModelDispatcher (batching,
// replica choice, retries; see model_dispatcher.h). An ensemble fans out to
// all its members' dispatchers at once and combines their outputs when the
// last one answers (see ensemble_combiner.h); an admission limit per
// ensemble (ensemble.max_in_flight) answers RESOURCE_EXHAUSTED beyond it so
// a slow member cannot make memory grow without bound. The core never blocks
// a caller on a host: `done` runs later on a completion thread.
//
// Thread safety: Infer() and ModelReady() are thread-safe; the config and the
// supervisors outlive the core.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "config/server_config.h"
#include "server/host_supervisor.h"
#include "server/infer_types.h"
#include "server/model_dispatcher.h"
#include "server/model_statistics.h"

namespace es {

class InferenceCore {
 public:
  // `stats` (may be null) receives each model execution (batch).
  InferenceCore(const ServerConfig* config, const std::map<std::string, HostSupervisor*>& hosts,
                ModelStatistics* stats);

  // `done` is called exactly once, possibly before Infer() returns.
  void Infer(std::shared_ptr<const InferRequest> request, InferDone done) const;

  // A torchscript model is ready when one of its hosts is; an ensemble when
  // all its members are.
  bool ModelReady(const ModelConfig& model) const;

 private:
  void RunEnsemble(const std::shared_ptr<const InferRequest>& request, InferDone done) const;

  const ServerConfig* config_;
  std::map<std::string, std::unique_ptr<ModelDispatcher>> dispatchers_;         // torchscript models
  std::map<std::string, std::unique_ptr<std::atomic<int64_t>>> ensemble_load_;  // ensembles in flight
};

}  // namespace es
