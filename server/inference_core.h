// InferenceCore: runs a validated InferRequest on the model hosts.
//
// A TorchScript model's requests go to its ModelDispatcher (batching,
// replica choice, retries; see model_dispatcher.h). An ensemble fans out to
// all its members' dispatchers at once, each member on its highest ready
// version, and combines their outputs when the last one answers, or
// earlier from a quorum (ensemble.min_members, member_timeout_ms: see
// ensemble_call.h, ensemble_combiner.h); a cascade runs its stages one
// after the other on the rows still undecided (cascade_call.h); an admission limit per ensemble
// (ensemble.max_in_flight) answers RESOURCE_EXHAUSTED beyond it so a slow
// member cannot make memory grow without bound. The core never blocks a
// caller on a host: `done` runs later on a completion thread.
//
// The model set changes while the server runs (ModelRepository): a
// dispatcher is made for each served config the first time a request needs
// it, and kept (a config replaced by a reload keeps its dispatcher until
// shutdown, idle, so requests still queued there finish). InFlight() counts
// the requests given to each (model, version) and not yet answered, so an
// unload can wait for them.
//
// Thread safety: Infer(), ModelReady() and InFlight() are thread-safe; the
// catalog and the supervisors outlive the core.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "common/mutex.h"
#include "config/server_config.h"
#include "server/callback_timer.h"
#include "server/host_supervisor.h"
#include "server/infer_types.h"
#include "server/model_catalog.h"
#include "server/model_dispatcher.h"
#include "server/model_statistics.h"

namespace es {

class InferenceCore {
 public:
  // `stats` (may be null) receives each model execution (batch).
  InferenceCore(const ServerConfig* config, const ModelCatalog* catalog,
                const std::map<std::string, HostSupervisor*>& hosts, ModelStatistics* stats);

  // `done` is called exactly once, possibly before Infer() returns.
  void Infer(std::shared_ptr<const InferRequest> request, InferDone done);

  // A torchscript model is ready when it has a ready version and one of its
  // hosts is up; an ensemble when it has a ready version and its quorum of
  // members (ensemble.min_members, default all) is ready.
  bool ModelReady(const ModelConfig& model);

  // Shutdown, once the hosts are stopped: every batch queue answers what it
  // holds (and anything queued later) with `why` (ModelDispatcher::FailQueued).
  // Returns how many requests were queued.
  size_t FailQueued(const Status& why);

  // Requests given to (host key, version) not answered yet (ModelConfig::HostKey).
  int64_t InFlight(const std::string& host_key, int64_t version) const;

 private:
  void RunEnsemble(const std::shared_ptr<const InferRequest>& request, InferDone done);
  // One member call of an ensemble: the member's version resolved, counted
  // in flight, dispatched, recorded in the member's statistics. `done` gets
  // the version it computed on (0: it reached none).
  using MemberDone = std::function<void(int64_t version, const Status&, InferResponse)>;
  void CallMember(const EnsembleMember& member, const std::shared_ptr<const InferRequest>& request, MemberDone done);
  // Takes a place under ensemble.max_in_flight (*load: the count to give it
  // back to), or answers `done` RESOURCE_EXHAUSTED and returns false.
  bool Admit(const ModelConfig& ensemble, std::atomic<int64_t>** load, const InferDone& done);
  // The dispatcher for a served config: one per serving signature (the
  // configs a rollout of new versions makes share their model's dispatcher),
  // so dispatchers are bounded by the distinct configs served, not by loads.
  ModelDispatcher* DispatcherFor(const ModelConfig& model);
  // Counts the request in flight on (model, version), then makes sure that
  // version still takes requests: an unload marks a version UNLOADING and
  // then waits for this count, so a request resolved just before the mark
  // is either counted in time or sees the mark here. Unpinned requests move
  // to the highest ready version; `version` is updated. Returns the wrapped
  // done, or nullptr after answering `done` UNAVAILABLE.
  InferDone CountedReady(const ModelConfig*& model, int64_t* version, bool pinned, InferDone done);
  std::atomic<int64_t>* EnsembleLoad(const std::string& name);
  void Enter(const std::string& model, int64_t version);
  void Leave(const std::string& model, int64_t version);
  // `done` wrapped so that (model, version) leaves the in-flight count before it runs.
  InferDone LeaveThen(const std::string& model, int64_t version, InferDone done);

  const ServerConfig* config_;
  const ModelCatalog* catalog_;
  const std::map<std::string, HostSupervisor*> hosts_;
  ModelStatistics* stats_;
  mutable Mutex mu_;
  std::map<const ModelConfig*, ModelDispatcher*> dispatcher_of_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<ModelDispatcher>> dispatchers_ ABSL_GUARDED_BY(mu_);  // by signature
  std::map<std::string, std::unique_ptr<std::atomic<int64_t>>> ensemble_load_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int64_t>, int64_t> in_flight_ ABSL_GUARDED_BY(mu_);
  CallbackTimer timer_;  // ensembles' member_timeout_ms; last: its thread stops first
};

}  // namespace es
