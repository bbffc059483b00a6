// InferenceCore: runs a validated InferRequest on the model hosts.
//
// A TorchScript model's requests go to its ModelDispatcher (batching,
// replica choice, retries; see model_dispatcher.h). A composite model's
// (ensemble, cascade) go to the CompositeRunner plugged in with
// SetCompositeRunner (ensemble/ensemble_runner.h), which calls back into
// CallMember for each member: the core knows no ensemble logic. The core
// never blocks a caller on a host: `done` runs later on a completion thread.
//
// The model set changes while the server runs (ModelRepository): a
// dispatcher is made for each served config the first time a request needs
// it, and kept (a config replaced by a reload keeps its dispatcher until
// shutdown, idle, so requests still queued there finish). InFlight() counts
// the requests given to each (model, version) and not yet answered, so an
// unload can wait for them.
//
// Thread safety: Infer(), CallMember(), ModelReady() and InFlight() are
// thread-safe; the catalog and the supervisors outlive the core.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "common/mutex.h"
#include "config/server_config.h"
#include "server/core/composite_runner.h"
#include "server/hosts/host_supervisor.h"
#include "server/core/infer_types.h"
#include "server/core/model_catalog.h"
#include "server/core/model_dispatcher.h"
#include "server/core/model_statistics.h"
#include "server/core/response_cache.h"

namespace es {

class InferenceCore final : public MemberCalls {
 public:
  // `stats` (may be null) receives each model execution (batch); `cache`
  // (may be null: none) answers the models that enable it
  // (server/core/response_cache.h).
  InferenceCore(const ServerConfig* config, const ModelCatalog* catalog,
                const std::map<std::string, HostSupervisor*>& hosts, ModelStatistics* stats,
                ResponseCache* cache = nullptr);

  // Where composite models' requests go (null: they are answered
  // UNIMPLEMENTED). Set before the first request; `runner` outlives its use.
  void SetCompositeRunner(CompositeRunner* runner) { composite_.store(runner); }
  // Where traced requests' member calls get their own traces (null: none).
  // Set before the first request; `tracer` outlives its use.
  void SetTracer(Tracer* tracer) { tracer_.store(tracer); }

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

  // MemberCalls: a member call is a request of the member model in its
  // statistics, as in Triton.
  void CallMember(const EnsembleMember& member, const std::shared_ptr<const InferRequest>& request,
                  MemberDone done) override;

 private:
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
  // Runs `request` on `model` at `version` (counted in flight already):
  // from the response cache when the model enables it and the answer is
  // kept, else through the model's dispatcher (keeping a successful answer).
  void RunModel(const ModelConfig& model, int64_t version, std::shared_ptr<const InferRequest> request,
                InferDone done, std::shared_ptr<RequestTrace> trace);
  // Counts one more request on (model, version); returns its counter, which
  // the request decrements when it leaves (no lock, no lookup).
  std::atomic<int64_t>* Enter(const std::string& model, int64_t version);
  // `done` wrapped so that the request leaves `count` before it runs.
  static InferDone LeaveThen(std::atomic<int64_t>* count, InferDone done);

  const ServerConfig* config_;
  const ModelCatalog* catalog_;
  const std::map<std::string, HostSupervisor*> hosts_;
  ModelStatistics* stats_;
  ResponseCache* cache_;  // may be null
  std::atomic<Tracer*> tracer_{nullptr};
  mutable Mutex mu_;
  std::map<const ModelConfig*, ModelDispatcher*> dispatcher_of_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<ModelDispatcher>> dispatchers_ ABSL_GUARDED_BY(mu_);  // by signature
  // One counter per (host key, version) ever served, never erased (a few per
  // model; a map node keeps its address), so a request holds a pointer to its
  // counter: erasing at zero cost a node allocation and a locked lookup per
  // call when requests come one at a time.
  std::map<std::pair<std::string, int64_t>, std::unique_ptr<std::atomic<int64_t>>> in_flight_
      ABSL_GUARDED_BY(mu_);
  std::atomic<CompositeRunner*> composite_{nullptr};
};

}  // namespace es
