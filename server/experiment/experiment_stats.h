// ExperimentStats: the online comparison of a model and its candidate
// (config/model_config.h, ExperimentSpec), over a sliding window of the
// last `window` requests and in total:
//   - per request on both sides (a shadowed one): top-1 agreement of each
//     row, mean absolute difference of the probability vectors, KL
//     divergence serving||candidate, the entropy of each;
//   - per side (both, or one: a canary's request is answered by one side):
//     requests, errors, latency p50/p99.
// JudgeExperiment turns the window's figures and the gate into a decision.
//
// Thread safety: none; the owner (Experiment) holds a lock around it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "config/model_config.h"

namespace es {

// One side's run of a request.
struct SideRun {
  bool ok = false;
  uint64_t latency_ns = 0;
};

// Two answers' probabilities compared, summed over their rows.
struct AnswerComparison {
  int64_t rows = 0;
  int64_t agreeing_rows = 0;       // same top-1 class
  double abs_diff_sum = 0;         // of each row's mean |p - q|
  double kl_sum = 0;               // of each row's KL(p || q), in nats
  double entropy_serving_sum = 0;  // of each row's entropy, nats
  double entropy_candidate_sum = 0;
};

// `serving` and `candidate`: [rows, classes] probabilities, row-major.
// Probabilities are clamped at 1e-7 inside the logarithms, so a class the
// candidate gives 0 makes the KL large, not infinite. nullopt when the
// sizes do not match or classes is 0.
std::optional<AnswerComparison> CompareAnswers(const std::vector<float>& serving, const std::vector<float>& candidate,
                                               int64_t classes);

class ExperimentStats {
 public:
  struct Side {
    int64_t requests = 0;
    int64_t errors = 0;
    double error_rate = 0;  // errors / requests (0 with none)
    double p50_ms = 0;      // of the requests it answered, ok or not
    double p99_ms = 0;
  };
  struct Figures {
    int64_t compared_requests = 0;  // shadowed requests both sides answered
    int64_t compared_rows = 0;
    double agreement = 0;           // agreeing rows / compared rows
    double mean_abs_diff = 0;       // per row
    double mean_kl = 0;             // per row
    double entropy_serving = 0;     // per row
    double entropy_candidate = 0;
    Side serving, candidate;
  };

  explicit ExperimentStats(int64_t window) : window_(window > 0 ? window : 1) {}

  // One request: what each side that ran it did, and their answers
  // compared when both answered.
  void Add(const std::optional<SideRun>& serving, const std::optional<SideRun>& candidate,
           const std::optional<AnswerComparison>& compared);

  Figures Window() const;
  Figures Total() const;

 private:
  struct Entry {
    std::optional<SideRun> serving, candidate;
    std::optional<AnswerComparison> compared;
  };
  // Sums over a set of entries; latencies kept as a log-scale histogram
  // (quantiles within 3%), so the total never stores every request.
  struct Sums {
    int64_t compared_requests = 0;
    AnswerComparison compared;
    int64_t requests[2] = {0, 0}, errors[2] = {0, 0};
    std::vector<int64_t> latency[2];  // counts per bucket
    void Apply(const Entry& e, int sign);
    Figures ToFigures() const;
  };

  int64_t window_;
  std::deque<Entry> recent_;
  Sums window_sums_, total_sums_;
};

// What the gate makes of the window's figures: promote (the candidate
// answers every request from now on), abort (it answers none), or go on.
struct ExperimentVerdict {
  enum class Decision { kNone, kPromote, kAbort };
  Decision decision = Decision::kNone;
  std::string why;  // the figures that made it
};
// `compares` is false for a canary (its requests run on one side: no
// agreement to judge, so the gate counts the candidate's requests).
ExperimentVerdict JudgeExperiment(const ExperimentGate& gate, const ExperimentStats::Figures& window, bool compares);

}  // namespace es
