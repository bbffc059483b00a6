#include "training/cascade_sweep.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>

namespace es {
namespace {

constexpr double kMinProbability = 1e-12;  // as ScoreClassifier

std::string Number(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

Status CheckInputs(const std::vector<at::Tensor>& members, const at::Tensor& labels, const std::vector<double>& costs,
                   const std::vector<std::vector<size_t>>& stages, const std::vector<double>& thresholds) {
  if (members.empty()) return Status::InvalidArgument("cascade sweep: no members");
  if (labels.dim() != 1) return Status::InvalidArgument("cascade sweep: labels must be [N]");
  for (size_t m = 0; m < members.size(); ++m) {
    const at::Tensor& p = members[m];
    if (p.dim() != 2 || p.size(0) != labels.size(0) || p.size(1) < 1 || !at::isFloatingType(p.scalar_type()) ||
        p.sizes() != members[0].sizes()) {
      std::string what = "cascade sweep: member ";
      what.append(std::to_string(m)).append("'s probabilities must be floating [N, C] like member 0's, with N = ");
      what.append(std::to_string(labels.size(0))).append(" labels");
      return Status::InvalidArgument(what);
    }
  }
  if (costs.size() != members.size()) {
    return Status::InvalidArgument("cascade sweep: " + std::to_string(costs.size()) + " costs for " +
                                   std::to_string(members.size()) + " members");
  }
  for (double c : costs) {
    if (!std::isfinite(c) || c < 0) return Status::InvalidArgument("cascade sweep: a cost is " + Number(c));
  }
  std::vector<bool> placed(members.size(), false);
  for (const std::vector<size_t>& stage : stages) {
    if (stage.empty()) return Status::InvalidArgument("cascade sweep: an empty stage");
    for (size_t m : stage) {
      if (m >= members.size() || placed[m]) {
        return Status::InvalidArgument("cascade sweep: member index " + std::to_string(m) +
                                       " is out of range or in two stages");
      }
      placed[m] = true;
    }
  }
  if (std::find(placed.begin(), placed.end(), false) != placed.end()) {
    return Status::InvalidArgument("cascade sweep: a member is in no stage");
  }
  if (thresholds.empty()) return Status::InvalidArgument("cascade sweep: no thresholds");
  for (size_t i = 0; i < thresholds.size(); ++i) {
    const double t = thresholds[i];
    if (!(t > 0 && t <= 1) || (i > 0 && !(t > thresholds[i - 1]))) {
      return Status::InvalidArgument("cascade sweep: thresholds must be strictly ascending in (0, 1]; got " +
                                     Number(t));
    }
  }
  return Status::Ok();
}

// The row's answer probabilities from the float sum of `count` members, as
// CascadeCall::AnswerLocked computes them.
void Answer(const float* sum, int64_t classes, int64_t count, std::vector<float>* out) {
  for (int64_t c = 0; c < classes; ++c) (*out)[static_cast<size_t>(c)] = sum[c] / static_cast<float>(count);
}

}  // namespace

std::vector<double> DefaultCascadeThresholds() {
  std::vector<double> t;
  for (int i = 50; i <= 95; i += 5) t.push_back(i / 100.0);
  for (double v : {0.97, 0.99, 0.995, 1.0}) t.push_back(v);
  return t;
}

std::vector<std::vector<size_t>> StagesCheapestFirst(const std::vector<double>& costs) {
  std::vector<size_t> order(costs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return costs[a] < costs[b]; });
  std::vector<std::vector<size_t>> stages;
  for (size_t m : order) stages.push_back({m});
  return stages;
}

std::vector<std::vector<size_t>> StagesCheapestThenRest(const std::vector<double>& costs) {
  std::vector<std::vector<size_t>> stages;
  for (std::vector<size_t>& one : StagesCheapestFirst(costs)) {
    if (stages.size() < 2) {
      stages.push_back(std::move(one));
    } else {
      stages.back().push_back(one[0]);
    }
  }
  return stages;
}

StatusOr<CascadeSweep> SweepCascade(const std::vector<at::Tensor>& members, const at::Tensor& labels,
                                    const std::vector<double>& costs, const std::vector<std::vector<size_t>>& stages,
                                    const std::vector<double>& thresholds, double tolerance_points) {
  ES_RETURN_IF_ERROR(CheckInputs(members, labels, costs, stages, thresholds));
  const int64_t rows = labels.size(0);
  const int64_t classes = members[0].size(1);
  // Float, as the server sums the members' FP32 outputs.
  std::vector<at::Tensor> probs;
  for (const at::Tensor& p : members) probs.push_back(p.to(at::kFloat).contiguous());
  const at::Tensor y = labels.to(at::kLong).contiguous();
  const int64_t* label = y.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    if (label[r] < 0 || label[r] >= classes) {
      return Status::InvalidArgument("cascade sweep: label " + std::to_string(label[r]) + " at row " +
                                     std::to_string(r) + " is outside [0, " + std::to_string(classes) + ")");
    }
  }

  CascadeSweep sweep;
  sweep.stages = stages;
  sweep.costs = costs;
  sweep.rows = rows;
  sweep.tolerance_points = tolerance_points;
  sweep.full_cost = std::accumulate(costs.begin(), costs.end(), 0.0);

  // Per row, the summed probabilities and cost after each stage: the same
  // for every threshold, so computed once.
  const size_t n_stages = stages.size();
  std::vector<float> sums(static_cast<size_t>(rows * classes) * n_stages, 0.0f);
  std::vector<int64_t> count_through(n_stages);
  std::vector<double> cost_through(n_stages);
  int64_t count = 0;
  double cost = 0;
  for (size_t s = 0; s < n_stages; ++s) {
    float* sum = sums.data() + s * static_cast<size_t>(rows * classes);
    if (s > 0) std::copy_n(sum - rows * classes, rows * classes, sum);
    for (size_t m : stages[s]) {
      const float* p = probs[m].data_ptr<float>();
      for (int64_t i = 0; i < rows * classes; ++i) sum[i] += p[i];
      ++count;
      cost += costs[m];
    }
    count_through[s] = count;
    cost_through[s] = cost;
  }

  std::vector<float> answer(static_cast<size_t>(classes));
  auto score = [&](const float* sum, int64_t n, int64_t r, int64_t* correct, double* nll) {
    Answer(sum, classes, n, &answer);
    const int64_t argmax = std::max_element(answer.begin(), answer.end()) - answer.begin();
    *correct += argmax == label[r] ? 1 : 0;
    *nll -= std::log(std::max(static_cast<double>(answer[static_cast<size_t>(label[r])]), kMinProbability));
  };
  const float* all = sums.data() + (n_stages - 1) * static_cast<size_t>(rows * classes);
  double full_nll = 0;
  for (int64_t r = 0; r < rows; ++r) score(all + r * classes, count, r, &sweep.full_correct, &full_nll);
  const double n_rows = static_cast<double>(std::max<int64_t>(rows, 1));
  sweep.full_accuracy = static_cast<double>(sweep.full_correct) / n_rows;
  sweep.full_nll = full_nll / n_rows;

  // Rows the cascade may lose against the full ensemble, in whole rows.
  const auto allowed = static_cast<int64_t>(std::floor(tolerance_points / 100.0 * static_cast<double>(rows) + 1e-9));
  bool found = false;
  for (double t : thresholds) {
    CascadeThresholdResult result;
    result.threshold = t;
    result.exits_per_stage.assign(n_stages, 0);
    double nll = 0, cost_sum = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (size_t s = 0; s < n_stages; ++s) {
        const float* sum = sums.data() + s * static_cast<size_t>(rows * classes) + r * classes;
        // As CascadeCall::EndStageLocked: the top of the float sum, divided in double.
        const double top =
            static_cast<double>(*std::max_element(sum, sum + classes)) / static_cast<double>(count_through[s]);
        if (s + 1 == n_stages || top >= t) {
          ++result.exits_per_stage[s];
          cost_sum += cost_through[s];
          score(sum, count_through[s], r, &result.correct, &nll);
          break;
        }
      }
    }
    result.accuracy = static_cast<double>(result.correct) / n_rows;
    result.nll = nll / n_rows;
    result.mean_member_cost = cost_sum / n_rows;
    result.cost_fraction = sweep.full_cost > 0 ? result.mean_member_cost / sweep.full_cost : 1.0;
    if (!found && sweep.full_correct - result.correct <= allowed) {
      found = true;
      sweep.chosen = sweep.thresholds.size();
    }
    sweep.thresholds.push_back(std::move(result));
  }
  sweep.chosen_within_tolerance = found;
  if (!found) sweep.chosen = sweep.thresholds.size() - 1;
  return sweep;
}

}  // namespace es
