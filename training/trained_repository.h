// What ensemble-train leaves behind in --out DIR: a model repository that
// ensemble-server serves unchanged, and the report of how good it is.
//
//   DIR/<member>/config.yaml, DIR/<member>/1/model.pt   each trained member (TorchScript)
//   DIR/<ensemble>/config.yaml                           the ensemble over them
//   DIR/<ensemble>_cascade/config.yaml                   the cascade variant (combine: cascade over the
//                                                        same members, cheapest first, in the stages of
//                                                        ensemble.cascade_stages, at the exit_threshold
//                                                        the sweep chose)
//   DIR/<ensemble>_packed/config.yaml                    the packed variant (training/packed_variant.h):
//   DIR/<ensemble>_packed_<arch>/config.yaml, 1/model.pt   same-architecture members as one model each
//   DIR/server.yaml      a server config for DIR: `ensemble-server --config DIR/server.yaml`
//   DIR/report.json      per member and ensemble: test accuracy, NLL, Brier, ECE; timings;
//                        the cascade sweep ("cascade": accuracy and member cost per threshold)
//   DIR/eval_samples.json  a few test rows with the trainer's own member and ensemble
//                          outputs, to check what the server answers against
// (DIR/.checkpoints/ is skipped by the repository loader: it starts with a dot.)
//
// Thread safety: plain functions, called once by rank 0 at the end.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/script.h>

#include "common/status.h"
#include "training/calibration.h"
#include "training/cascade_sweep.h"
#include "training/ensemble_trainer.h"
#include "training/packed_variant.h"
#include "training/train_config.h"

namespace es {

struct ScoredModel {
  std::string name;
  ClassifierScores scores;
};

struct TrainReport {
  std::string dataset;
  int world_size = 1;
  int epochs = 0;
  int64_t steps = 0;
  int64_t global_batch = 0;
  double train_seconds = 0;
  double mean_step_seconds = 0;
  double mean_allreduce_seconds = 0;
  // max over parameters of (max over ranks - min over ranks) at the end:
  // 0 when every rank holds the very same weights.
  double parameter_divergence = 0;
  std::vector<ScoredModel> members;
  ScoredModel ensemble;
  // The cascade over the members (cascade_sweep.h), costs = each member's
  // forward time per row in the evaluation; absent (with the reason in
  // cascade_error) when the evaluation has no timings or the sweep failed.
  std::optional<CascadeSweep> cascade;
  std::string cascade_error;
  // The packed variant's models (name -> its members) and how they answered
  // on the test set against the members; absent without a packed variant.
  std::string packed_variant;
  std::vector<std::pair<std::string, std::vector<std::string>>> packed_models;
  std::optional<PackedCheck> packed;
  double members_seconds_per_row = 0;  // the members' forwards together (the evaluation's timings)
};

// The cascade variant written beside the ensemble: folder and model name
// `<ensemble>_cascade`, the members in stage order, and the threshold.
struct CascadeVariant {
  std::string name;
  std::vector<std::vector<std::string>> stages;  // member names
  double exit_threshold = 1.0;
};

// `<ensemble name>_cascade`.
std::string CascadeVariantName(const std::string& ensemble_name);

// The variant the report's sweep chose (nullopt when it has no sweep).
std::optional<CascadeVariant> ChosenCascade(const TrainReport& report);

// Its config.yaml: the trained members' tensors, combine: cascade, the
// threshold, the stages; members listed in stage order.
std::string CascadeEnsembleYaml(int64_t max_batch_size, const CascadeVariant& variant);

// The sweep's thresholds the ladder serves the cascade at, richest first:
// the chosen one; above it, the most accurate threshold costing at most
// two thirds of the full ensemble (the cheapest of equals), when it is more
// accurate than the chosen;
// below it, up to two ever cheaper ones, each costing at most two thirds of
// the rung above, while they are more accurate than the best member
// (`member_accuracy`) and cost more than it (`member_cost`, a fraction of
// the full ensemble's cost, as the sweep's cost_fraction). Indices into
// sweep.thresholds; empty when the sweep has none.
std::vector<size_t> CascadeLadderThresholds(const CascadeSweep& sweep, double member_accuracy, double member_cost);

// The `overload:` section written into the ensemble's config.yaml
// (docs/overload.md): config.ensemble.latency_target_ms, and the ladder
// the full ensemble, its cascade variant (when `cascade`) at the
// thresholds CascadeLadderThresholds picks (the chosen one as the cascade's
// own, the others as the rung's exit_threshold), then the most accurate
// member, each with its test accuracy from `report`. "" when the target is 0.
std::string OverloadLadderYaml(const TrainConfig& config, const TrainReport& report,
                               const std::optional<CascadeVariant>& cascade);

// What a run writes beside its members and their ensemble.
struct TrainedVariants {
  std::optional<CascadeVariant> cascade = {};  // none: a stale one from an earlier run is removed
  std::optional<PackedVariant> packed = {};    // likewise (every folder PackedFolderNames says)
  std::string overload_yaml = {};              // OverloadLadderYaml: appended to the ensemble's config.yaml
};

// `host_devices`: one serving host per entry ("cpu:0", "cuda:1", ...).
Status WriteTrainedRepository(const std::string& dir, const TrainConfig& config,
                              std::vector<torch::jit::Module>& modules,
                              const std::vector<std::string>& host_devices, const TrainedVariants& variants = {});

// ensemble-train --publish REPO: writes each trained member into the
// existing repository `repo` as its next version (the highest numeric
// folder there plus one; 1 for a model folder that is new, with its
// config.yaml), and the ensemble's config.yaml when the repository has no
// such ensemble yet. Atomic per folder: everything is written under
// `repo/.publish-<pid>/` (hidden, so never read as a model) and renamed into
// place, members before the ensemble, so a server polling the repository
// never sees a half-written model nor an ensemble without its members. An
// existing config.yaml is left as it is. The packed models are published
// as the members are (their next version). The cascade and packed variants,
// when given, are published like the ensemble, before it (the ensemble's
// overload ladder names the cascade; an existing one is kept, and the line
// says what this run's sweep chose). Returns one line per folder published
// ("mlp: version 2").
StatusOr<std::vector<std::string>> PublishTrained(const std::string& repo, const TrainConfig& config,
                                                  std::vector<torch::jit::Module>& modules,
                                                  const TrainedVariants& variants = {});

// ensemble-train --publish REPO --shadow PERCENT: the run is published
// beside the ensemble serving in `repo`, not over it: its members and its
// ensemble as new models named "<name>_r<N>" (N the first run number whose
// ensemble folder is free, from 2), staged and renamed in as PublishTrained
// does; then the serving ensemble's config.yaml gets (or has replaced) an
// `experiment:` section making the new ensemble its shadow candidate at
// `percent`, with a gate that promotes it after 1000 compared requests at
// agreement 0.97 or more (edit the section to change it), written to a
// temporary file and renamed over the old one. A polling server loads the
// new models, then applies the experiment. The serving ensemble must exist.
StatusOr<std::vector<std::string>> PublishAsCandidate(const std::string& repo, const TrainConfig& config,
                                                      std::vector<torch::jit::Module>& modules, double percent);

// The text of a config.yaml with its top-level `experiment:` section (if
// any) replaced by `section` (which ends with a newline).
std::string WithExperimentSection(const std::string& config_yaml, const std::string& section);

// Scores each member and the ensemble of `evaluation` against `labels`,
// and sweeps the cascade (members cheapest first by the evaluation's
// member_seconds_per_row, in the stages of config.ensemble.cascade_stages,
// DefaultCascadeThresholds(), 0.1 points).
TrainReport ScoreEvaluation(const TrainConfig& config, const Evaluation& evaluation,
                            const at::Tensor& labels);

// Notes the packed variant and its check in `report` ("packed" in
// report.json; members_seconds_per_row sums the packed members' times).
void AddPackedCheck(const PackedVariant& variant, const PackedCheck& check, const Evaluation& evaluation,
                    TrainReport* report);

// report.json and eval_samples.json (the first `sample_rows` rows).
Status WriteReport(const std::string& dir, const TrainReport& report, const Evaluation& evaluation,
                   const at::Tensor& images, const at::Tensor& labels, int64_t sample_rows);

// The printed table: one row per member, then the ensemble and its margin;
// then the cascade sweep, one row per threshold, and the chosen one; then
// the packed variant's check.
std::string FormatReport(const TrainReport& report);

}  // namespace es
