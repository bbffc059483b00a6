// InferenceCore: runs a validated InferRequest on the model hosts.
//
// A torchscript model goes to the ready host (of those its config names) with
// the least outstanding work; an ensemble fans out to all its members at once
// and combines their outputs when the last one answers (see
// ensemble_combiner.h). The core never blocks a caller on a host: submission
// copies the inputs into the host's arena and returns, and `done` runs later
// on that host's completion thread.
//
// Thread safety: Infer() and ModelReady() are thread-safe; the config and the
// supervisors outlive the core.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "config/server_config.h"
#include "server/host_supervisor.h"
#include "server/infer_types.h"

namespace es {

class InferenceCore {
 public:
  InferenceCore(const ServerConfig* config, std::map<std::string, HostSupervisor*> hosts);

  // `done` is called exactly once, possibly before Infer() returns.
  void Infer(std::shared_ptr<const InferRequest> request, InferDone done) const;

  // A torchscript model is ready when one of its hosts is; an ensemble when
  // all its members are.
  bool ModelReady(const ModelConfig& model) const;

 private:
  void RunModel(const ModelConfig& model, const std::shared_ptr<const InferRequest>& request,
                InferDone done) const;
  void RunEnsemble(const std::shared_ptr<const InferRequest>& request, InferDone done) const;
  std::shared_ptr<HostConnection> PickHost(const ModelConfig& model, std::string* why_none) const;
  uint64_t OutputCapacity(const ModelConfig& model, int64_t rows) const;

  const ServerConfig* config_;
  std::map<std::string, HostSupervisor*> hosts_;
};

}  // namespace es
