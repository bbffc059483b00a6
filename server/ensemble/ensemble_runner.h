// EnsembleRunner: runs the requests of ensembles and cascades on the core's
// member calls (core/composite_runner.h).
//
// An ensemble fans out to all its members at once, each on its pinned or
// highest ready version, and combines their outputs when the last one
// answers, or earlier from a quorum (ensemble.min_members, member_timeout_ms:
// see ensemble_call.h, ensemble_combiner.h); a cascade runs its stages one
// after the other on the rows still undecided (cascade_call.h). An admission
// limit per ensemble (ensemble.max_in_flight) answers RESOURCE_EXHAUSTED
// beyond it, so a slow member cannot make memory grow without bound. An
// ensemble with an overload ladder goes through OverloadLadder first, which
// picks the rung that answers (overload_ladder.h).
//
// Lifetime: the runner must outlive every call it started (their admission
// counts live here): the router destroys it after the core, whose shutdown
// answers every member call first.
//
// Thread safety: Run() is thread-safe; members answer on completion threads.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "server/core/callback_timer.h"
#include "server/core/composite_runner.h"
#include "server/core/model_catalog.h"
#include "server/ensemble/overload_ladder.h"

namespace es {

class EnsembleRunner final : public CompositeRunner {
 public:
  // `members` and `catalog` (where overload rungs are found) must outlive
  // the runner's calls.
  EnsembleRunner(MemberCalls* members, const ModelCatalog* catalog);

  void Run(const std::shared_ptr<const InferRequest>& request, InferDone done) override;

  OverloadLadder& ladder() { return ladder_; }

 private:
  // Takes a place under ensemble.max_in_flight (*load: the count to give it
  // back to), or answers `done` RESOURCE_EXHAUSTED and returns false.
  bool Admit(const ModelConfig& ensemble, std::atomic<int64_t>** load, const InferDone& done);
  // The request run as the ensemble itself (no ladder).
  void RunComposite(const std::shared_ptr<const InferRequest>& request, InferDone done);
  std::atomic<int64_t>* EnsembleLoad(const std::string& name);
  void RunCascade(const std::shared_ptr<const InferRequest>& request, InferDone done, std::atomic<int64_t>* load);
  void RunFanOut(const std::shared_ptr<const InferRequest>& request, InferDone done, std::atomic<int64_t>* load);

  MemberCalls* const members_;
  Mutex mu_;
  // By ensemble name; never removed, so the pointers calls hold stay valid.
  std::map<std::string, std::unique_ptr<std::atomic<int64_t>>> ensemble_load_ ABSL_GUARDED_BY(mu_);
  OverloadLadder ladder_;
  CallbackTimer timer_;  // ensembles' member_timeout_ms; last: its thread stops first
};

}  // namespace es
