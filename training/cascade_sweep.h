// SweepCascade: what the server's `combine: cascade` (server/ensemble/cascade_call.h)
// would answer on the test set at each of a list of exit thresholds, computed
// offline from the member probabilities ensemble-train already has, so that
// ensemble-train can publish a cascade variant with a threshold that keeps
// the full ensemble's accuracy.
//
// The cascade, as the server runs it: stages in order; after stage s a row's
// answer is the mean of the probabilities of every member in stages 0..s
// (summed in float in stage order, then divided, as CascadeCall does); the
// row leaves when the answer's top-class probability is >= the threshold, or
// when s is the last stage. Per threshold:
//
//   accuracy          share of rows whose answer's argmax (first on ties) is the label
//   nll               mean of -log(max(p[label], 1e-12)) (ScoreClassifier's clamp)
//   mean_member_cost  mean over rows of the summed cost of the members the row ran
//   cost_fraction     mean_member_cost / the summed cost of every member
//   exits_per_stage   rows that left at each stage
//
// The full ensemble (`full_*`) is every member on every row, i.e. the mean
// ensemble. Note that threshold 1.0 is not quite the full ensemble: a row
// whose float probability saturates at exactly 1.0 still leaves early, as it
// does in the server.
//
// `chosen` is the smallest threshold whose accuracy is within
// `tolerance_points` accuracy points (0.1 = 0.1%) of the full ensemble's
// (counted in rows, so no rounding decides it; a cascade more accurate than
// the full ensemble qualifies). When none is (1.0 is not in the list and
// every threshold loses too much), `chosen` is the largest threshold and
// `chosen_within_tolerance` is false.
//
// Inputs: members [N, C] probabilities each (any floating type, same shape),
// labels [N] in [0, C), costs one per member (finite, >= 0, any unit),
// stages a partition of the member indices into non-empty stages,
// thresholds strictly ascending in (0, 1]. Violations are InvalidArgument
// naming what was wrong.
//
// Thread safety: pure functions.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"

namespace es {

struct CascadeThresholdResult {
  double threshold = 0;
  int64_t correct = 0;
  double accuracy = 0;
  double nll = 0;
  double mean_member_cost = 0;
  double cost_fraction = 0;
  std::vector<int64_t> exits_per_stage;
};

struct CascadeSweep {
  std::vector<std::vector<size_t>> stages;  // member indices, as given
  std::vector<double> costs;                // per member, as given
  int64_t rows = 0;
  int64_t full_correct = 0;
  double full_accuracy = 0;
  double full_nll = 0;
  double full_cost = 0;  // the summed cost of every member
  double tolerance_points = 0;
  std::vector<CascadeThresholdResult> thresholds;
  size_t chosen = 0;  // index into `thresholds`
  bool chosen_within_tolerance = false;
};

// 0.50, 0.55, ..., 0.95, 0.97, 0.99, 0.995, 1.0.
std::vector<double> DefaultCascadeThresholds();

// One member per stage, cheapest first; equal costs keep member order.
std::vector<std::vector<size_t>> StagesCheapestFirst(const std::vector<double>& costs);
// Two stages: the cheapest member alone, then every other member at once
// (cheapest first, the order their probabilities are summed in); one stage
// for a single member. Equal costs keep member order.
std::vector<std::vector<size_t>> StagesCheapestThenRest(const std::vector<double>& costs);

StatusOr<CascadeSweep> SweepCascade(const std::vector<at::Tensor>& members, const at::Tensor& labels,
                                    const std::vector<double>& costs, const std::vector<std::vector<size_t>>& stages,
                                    const std::vector<double>& thresholds, double tolerance_points = 0.1);

}  // namespace es
