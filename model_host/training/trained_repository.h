// What ensemble-train leaves behind in --out DIR: a model repository that
// ensemble-server serves unchanged, and the report of how good it is.
//
//   DIR/<member>/config.yaml, DIR/<member>/1/model.pt   each trained member (TorchScript)
//   DIR/<ensemble>/config.yaml                           the ensemble over them
//   DIR/server.yaml      a server config for DIR: `ensemble-server --config DIR/server.yaml`
//   DIR/report.json      per member and ensemble: test accuracy, NLL, Brier, ECE; timings
//   DIR/eval_samples.json  a few test rows with the trainer's own member and ensemble
//                          outputs, to check what the server answers against
// (DIR/.checkpoints/ is skipped by the repository loader: it starts with a dot.)
//
// Thread safety: plain functions, called once by rank 0 at the end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/script.h>

#include "common/status.h"
#include "model_host/training/calibration.h"
#include "model_host/training/ensemble_trainer.h"
#include "model_host/training/train_config.h"

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
  std::vector<ScoredModel> members;
  ScoredModel ensemble;
};

// `host_devices`: one serving host per entry ("cpu:0", "cuda:1", ...).
Status WriteTrainedRepository(const std::string& dir, const TrainConfig& config,
                              std::vector<torch::jit::Module>& modules,
                              const std::vector<std::string>& host_devices);

// ensemble-train --publish REPO: writes each trained member into the
// existing repository `repo` as its next version (the highest numeric
// folder there plus one; 1 for a model folder that is new, with its
// config.yaml), and the ensemble's config.yaml when the repository has no
// such ensemble yet. Atomic per folder: everything is written under
// `repo/.publish-<pid>/` (hidden, so never read as a model) and renamed into
// place, members before the ensemble, so a server polling the repository
// never sees a half-written model nor an ensemble without its members. An
// existing config.yaml is left as it is. Returns one line per folder
// published ("mlp: version 2").
StatusOr<std::vector<std::string>> PublishTrained(const std::string& repo, const TrainConfig& config,
                                                  std::vector<torch::jit::Module>& modules);

// Scores each member and the ensemble of `evaluation` against `labels`.
TrainReport ScoreEvaluation(const TrainConfig& config, const Evaluation& evaluation,
                            const at::Tensor& labels);

// report.json and eval_samples.json (the first `sample_rows` rows).
Status WriteReport(const std::string& dir, const TrainReport& report, const Evaluation& evaluation,
                   const at::Tensor& images, const at::Tensor& labels, int64_t sample_rows);

// The printed table: one row per member, then the ensemble and its margin.
std::string FormatReport(const TrainReport& report);

}  // namespace es
