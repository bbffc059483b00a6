#include "server/experiment/experiment_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace es {
namespace {

constexpr double kFloor = 1e-7;  // inside logarithms
// Latency histogram: bucket b holds [2^(b/16), 2^((b+1)/16)) microseconds,
// up to about 2^(400/16) us = 9 hours.
constexpr int kBuckets = 400;
constexpr double kPerOctave = 16;

int BucketOf(uint64_t latency_ns) {
  const double us = std::max(1.0, static_cast<double>(latency_ns) / 1000.0);
  return std::min(kBuckets - 1, static_cast<int>(std::log2(us) * kPerOctave));
}

double Quantile(const std::vector<int64_t>& counts, int64_t total, double q) {
  if (total <= 0 || counts.empty()) return 0;
  const auto rank = static_cast<int64_t>(std::ceil(q * static_cast<double>(total)));
  int64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += counts[static_cast<size_t>(b)];
    if (seen >= rank) return std::exp2((b + 0.5) / kPerOctave) / 1000.0;  // ms, the bucket's middle
  }
  return 0;
}

double Entropy(const float* p, int64_t classes) {
  double h = 0;
  for (int64_t c = 0; c < classes; ++c) {
    const double v = std::max(static_cast<double>(p[c]), kFloor);
    h -= v * std::log(v);
  }
  return h;
}

int64_t ArgMax(const float* p, int64_t classes) { return std::max_element(p, p + classes) - p; }

std::string Format(const char* format, double a, double b) {
  char text[160];
  std::snprintf(text, sizeof text, format, a, b);
  return text;
}

}  // namespace

std::optional<AnswerComparison> CompareAnswers(const std::vector<float>& serving, const std::vector<float>& candidate,
                                               int64_t classes) {
  if (classes <= 0 || serving.size() != candidate.size() || serving.size() % static_cast<size_t>(classes) != 0) {
    return std::nullopt;
  }
  AnswerComparison out;
  out.rows = static_cast<int64_t>(serving.size()) / classes;
  for (int64_t r = 0; r < out.rows; ++r) {
    const float* p = serving.data() + r * classes;
    const float* q = candidate.data() + r * classes;
    if (ArgMax(p, classes) == ArgMax(q, classes)) ++out.agreeing_rows;
    double diff = 0, kl = 0;
    for (int64_t c = 0; c < classes; ++c) {
      diff += std::fabs(static_cast<double>(p[c]) - q[c]);
      const double pc = std::max(static_cast<double>(p[c]), kFloor);
      kl += pc * std::log(pc / std::max(static_cast<double>(q[c]), kFloor));
    }
    out.abs_diff_sum += diff / static_cast<double>(classes);
    out.kl_sum += kl;
    out.entropy_serving_sum += Entropy(p, classes);
    out.entropy_candidate_sum += Entropy(q, classes);
  }
  return out;
}

void ExperimentStats::Sums::Apply(const Entry& e, int sign) {
  const std::optional<SideRun>* sides[2] = {&e.serving, &e.candidate};
  for (int s = 0; s < 2; ++s) {
    if (!sides[s]->has_value()) continue;
    if (latency[s].empty()) latency[s].assign(kBuckets, 0);
    requests[s] += sign;
    if (!(*sides[s])->ok) errors[s] += sign;
    latency[s][static_cast<size_t>(BucketOf((*sides[s])->latency_ns))] += sign;
  }
  if (!e.compared) return;
  compared_requests += sign;
  compared.rows += sign * e.compared->rows;
  compared.agreeing_rows += sign * e.compared->agreeing_rows;
  compared.abs_diff_sum += sign * e.compared->abs_diff_sum;
  compared.kl_sum += sign * e.compared->kl_sum;
  compared.entropy_serving_sum += sign * e.compared->entropy_serving_sum;
  compared.entropy_candidate_sum += sign * e.compared->entropy_candidate_sum;
}

ExperimentStats::Figures ExperimentStats::Sums::ToFigures() const {
  Figures f;
  f.compared_requests = compared_requests;
  f.compared_rows = compared.rows;
  if (compared.rows > 0) {
    const auto rows = static_cast<double>(compared.rows);
    f.agreement = static_cast<double>(compared.agreeing_rows) / rows;
    f.mean_abs_diff = compared.abs_diff_sum / rows;
    f.mean_kl = compared.kl_sum / rows;
    f.entropy_serving = compared.entropy_serving_sum / rows;
    f.entropy_candidate = compared.entropy_candidate_sum / rows;
  }
  Side* sides[2] = {&f.serving, &f.candidate};
  for (int s = 0; s < 2; ++s) {
    sides[s]->requests = requests[s];
    sides[s]->errors = errors[s];
    sides[s]->error_rate = requests[s] > 0 ? static_cast<double>(errors[s]) / static_cast<double>(requests[s]) : 0;
    sides[s]->p50_ms = Quantile(latency[s], requests[s], 0.50);
    sides[s]->p99_ms = Quantile(latency[s], requests[s], 0.99);
  }
  return f;
}

void ExperimentStats::Add(const std::optional<SideRun>& serving, const std::optional<SideRun>& candidate,
                          const std::optional<AnswerComparison>& compared) {
  Entry entry{serving, candidate, compared};
  total_sums_.Apply(entry, +1);
  window_sums_.Apply(entry, +1);
  recent_.push_back(entry);
  if (static_cast<int64_t>(recent_.size()) > window_) {
    window_sums_.Apply(recent_.front(), -1);
    recent_.pop_front();
  }
}

ExperimentStats::Figures ExperimentStats::Window() const { return window_sums_.ToFigures(); }
ExperimentStats::Figures ExperimentStats::Total() const { return total_sums_.ToFigures(); }

ExperimentVerdict JudgeExperiment(const ExperimentGate& gate, const ExperimentStats::Figures& window, bool compares) {
  ExperimentVerdict verdict;
  const ExperimentStats::Side& cand = window.candidate;
  const ExperimentStats::Side& serv = window.serving;
  // Enough requests that one early error does not abort.
  constexpr int64_t kMinForAbort = 10;
  if (cand.requests >= kMinForAbort && cand.error_rate > gate.abort_error_rate) {
    verdict.decision = ExperimentVerdict::Decision::kAbort;
    verdict.why = Format("candidate error rate %.4f over the window is above abort_error_rate %.4f", cand.error_rate,
                         gate.abort_error_rate) +
                  " (" + std::to_string(cand.errors) + " of " + std::to_string(cand.requests) + " requests)";
    return verdict;
  }
  if (gate.min_compared <= 0) return verdict;
  const int64_t evidence = compares ? window.compared_requests : cand.requests;
  if (evidence < gate.min_compared) return verdict;
  if (compares && window.agreement < gate.min_agreement) return verdict;
  if (cand.error_rate > serv.error_rate + gate.max_error_increase) return verdict;
  if (serv.requests > 0 && serv.p99_ms > 0 && cand.p99_ms > serv.p99_ms * gate.max_latency_ratio) return verdict;
  verdict.decision = ExperimentVerdict::Decision::kPromote;
  verdict.why = std::to_string(evidence) + (compares ? " compared requests" : " candidate requests") +
                Format(": agreement %.4f, candidate error rate %.4f", window.agreement, cand.error_rate) +
                Format(" (serving %.4f), candidate p99 %.3f ms", serv.error_rate, cand.p99_ms) +
                Format(" (serving %.3f ms, ratio bound %.2f)", serv.p99_ms, gate.max_latency_ratio);
  return verdict;
}

}  // namespace es
