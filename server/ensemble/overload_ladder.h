// OverloadLadder: serves the requests of ensembles that declare an overload
// ladder (config: OverloadSpec). Each request is admitted by the ensemble's
// OverloadController, which picks the rung; rung 0 runs the ensemble itself,
// a cheaper rung runs another model of the repository (an ensemble, a
// cascade, a single model) on the same inputs in its place; a cascade rung
// may set its own exit threshold. The answer says how it was served:
// `served_by` (the rung's model, `@threshold` when it sets one) and, when the config
// gives it, `served_accuracy` (InferResponse). When no rung is predicted to
// meet the target the request is refused RESOURCE_EXHAUSTED.
//
// A request is served in full (rung 0, never shed by the ladder) when it
// asks for it (parameter `exact: true`) or for what only the ensemble itself
// gives: member outputs, uncertainty, a cascade's exit_stage.
//
// A rung that is not loaded when chosen is skipped: the ensemble answers in
// full. A config reload that changes the ladder starts a new controller
// (its measurements start again).
//
// Thread safety: Run() is thread-safe; the catalog and the member calls
// outlive the ladder.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "server/core/composite_runner.h"
#include "server/core/model_catalog.h"
#include "server/ensemble/overload_controller.h"

namespace es {

class OverloadLadder {
 public:
  // Runs a composite model's request without its ladder (the ensemble
  // itself, or an ensemble rung).
  using RunComposite = std::function<void(const std::shared_ptr<const InferRequest>&, InferDone)>;

  OverloadLadder(MemberCalls* members, const ModelCatalog* catalog, RunComposite run_composite);

  // `request->model` has an overload ladder. `done` runs exactly once.
  void Run(const std::shared_ptr<const InferRequest>& request, InferDone done);

  // The controller of `ensemble`'s ladder (made on first use).
  std::shared_ptr<OverloadController> ControllerFor(const ModelConfig& ensemble);

 private:
  struct Entry {
    OverloadSpec spec;  // the ladder it was made for
    std::shared_ptr<OverloadController> controller;
  };
  void RunRung(const ModelConfig& rung, const OverloadRung& spec, const std::shared_ptr<const InferRequest>& request,
               InferDone done);

  MemberCalls* const members_;
  const ModelCatalog* const catalog_;
  const RunComposite run_composite_;
  Mutex mu_;
  std::map<std::string, Entry> controllers_ ABSL_GUARDED_BY(mu_);  // by ensemble name
};

// True when only the ensemble itself can answer `request` (see above).
bool NeedsFullEnsemble(const InferRequest& request);

}  // namespace es
