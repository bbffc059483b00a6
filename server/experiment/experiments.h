// Experiments: a model's candidate served beside it on real traffic, and
// compared with it (config/model_config.h, ExperimentSpec: shadow or
// canary, the share of requests, the gate).
//
// Every inference request goes through Run. A model without an experiment
// runs as it would (one relaxed load decides it). With one:
//   - shadow: a `percent` share of requests (spread evenly, by a counter)
//     also runs on the candidate, started after the model's own run, at the
//     candidate's lowest priority, with its own copy of the inputs; the
//     client gets the model's answer whatever the candidate does, and waits
//     for nothing of it. At most kMaxShadowsInFlight candidate runs per
//     experiment: beyond that a sampled request is not shadowed (counted
//     skipped), so under load the candidate's work is dropped first.
//     Inputs in a client's shared-memory region are copied for the shadow
//     when the request arrives (a region that cannot be read: not shadowed,
//     counted skipped).
//   - canary: a `percent` share is answered by the candidate (response
//     parameter `served_by` names it); with `sticky_by`, the value of that
//     request parameter (else header or gRPC metadata entry; the transport
//     reads it) picks the side (a hash), so one caller stays on one side.
//   - the gate (JudgeExperiment), after each request counted: promotion
//     makes the candidate answer every request (state "promoted"); abort
//     stops the candidate at once (state "aborted"). Each decision is
//     logged with the figures that made it and counted.
// The compared output is the model's first output, as [rows, classes].
// The candidate must be loaded and have the model's inputs and outputs
// (checked when a request comes: it may be loaded later); until then the
// model serves alone and the status says why.
//
// The experiment of a model is its config's (`experiment:`, reloaded in poll
// mode) until Set replaces it (the /v2/models/{m}/experiment endpoint); a
// later change of the config's section takes over again. Figures start
// afresh when the candidate or the mode changes.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "server/core/infer_types.h"
#include "server/core/model_catalog.h"
#include "server/experiment/experiment_stats.h"

namespace es {

class Experiments {
 public:
  static constexpr int kMaxShadowsInFlight = 4;

  // Runs a request on the core (InferenceCore::Infer).
  using RunFn = std::function<void(std::shared_ptr<const InferRequest>, InferDone)>;

  // `catalog` finds candidates; both outlive this.
  Experiments(const ModelCatalog* catalog, RunFn run);

  // Runs `request` (for the model it names) as its experiment says; `done`
  // exactly once. `sticky_value`: the request's value of the experiment's
  // sticky_by parameter ("" when absent).
  void Run(const std::shared_ptr<const InferRequest>& request, const std::string& sticky_value, InferDone done);

  // The sticky_by parameter of `model`'s experiment ("" when none): what the
  // transport reads from a request for Run.
  std::string StickyParameter(const ModelConfig& model);

  // Replaces `model`'s experiment (its figures start afresh when the
  // candidate or mode changes; a promoted or aborted one starts over).
  Status Set(const ModelConfig& model, const ExperimentSpec& spec);
  // The experiment of `model` now: its spec, state, figures (window and
  // total), decisions; JSON for the endpoint.
  nlohmann::json Describe(const ModelConfig& model);

  // Counters for metrics, by model.
  struct Counters {
    std::string model, candidate, mode, state;
    int64_t shadowed = 0, skipped = 0, canaried = 0, promotions = 0, aborts = 0;
    ExperimentStats::Figures window;
  };
  std::vector<Counters> Snapshot();

 private:
  class Experiment;
  // The experiment of `model` (made, or reset to the config's section when
  // that changed); null when it has none.
  std::shared_ptr<Experiment> For(const ModelConfig& model);

  const ModelCatalog* catalog_;
  RunFn run_;
  // Set once any Set() was made: models without a config section must then
  // be looked up too.
  std::atomic<bool> any_set_{false};
  Mutex mu_;
  std::map<std::string, std::shared_ptr<Experiment>> by_model_ ABSL_GUARDED_BY(mu_);
};

}  // namespace es
