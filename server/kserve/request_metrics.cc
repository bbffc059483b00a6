#include "server/kserve/request_metrics.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "common/checked_math.h"
#include "common/status.h"
#include "server/metrics/metrics_families.h"

namespace es {
namespace {

constexpr double kNsPerSecond = 1e9;

const char* CodeName(int code) {
  if (code == 16) return "UNAUTHENTICATED";  // a gRPC code es::StatusCode does not name
  return StatusCodeName(static_cast<StatusCode>(code));
}

}  // namespace

ModelMetrics::ModelMetrics(std::string name, std::string version, bool ensemble)
    : name_(std::move(name)),
      version_(std::move(version)),
      ensemble_(ensemble),
      request_duration_(buckets::Latency()),
      queue_duration_(buckets::Latency()),
      ipc_duration_(buckets::Latency()),
      compute_duration_(buckets::Latency()),
      combine_duration_(buckets::Latency()),
      batch_size_(buckets::BatchSize()),
      disagreement_(buckets::Fraction()),
      entropy_(buckets::Entropy()) {}

void ModelMetrics::ObserveAnswer(const InferOutput& probabilities) {
  if (!ensemble_ || probabilities.datatype != DataType::kFp32 || probabilities.shape.size() < 2) return;
  const int64_t rows = probabilities.shape[0];
  const int64_t classes = probabilities.shape.back();
  // The sizes come from an answer's shape: multiplied without a wrap.
  const auto bytes =
      rows > 0 && classes > 0 ? TensorBytes(std::vector<int64_t>{rows, classes}, sizeof(float)) : std::nullopt;
  if (!bytes || probabilities.data.size() != *bytes) return;
  // Bytes in the output are not aligned for float: read each one.
  for (int64_t r = 0; r < rows; ++r) {
    double h = 0;
    for (int64_t c = 0; c < classes; ++c) {
      float p = 0;
      std::memcpy(&p, probabilities.data.data() + (r * classes + c) * sizeof(float), sizeof p);
      if (p > 0) h -= static_cast<double>(p) * std::log(static_cast<double>(p));
    }
    entropy_.Observe(h);
  }
}

namespace {

int64_t SteadySecond() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

double ModelMetrics::LastMinuteAccuracy(int64_t now_second) const {
  double sum = 0;
  uint64_t count = 0;
  for (const AccuracySecond& b : accuracy_) {
    if (b.second > now_second - static_cast<int64_t>(accuracy_.size()) && b.second <= now_second) {
      sum += b.sum;
      count += b.count;
    }
  }
  return count == 0 ? -1 : sum / static_cast<double>(count);
}

void ModelMetrics::CountOutcome(int code) {
  outcomes_[static_cast<size_t>(code >= 0 && code < kCodes ? code : 2 /* UNKNOWN */)].fetch_add(
      1, std::memory_order_relaxed);
}

void ModelMetrics::Finished(int code, uint64_t elapsed_ns, const InferResponse& response, int64_t rows) {
  CountOutcome(code);
  pending_.fetch_sub(1, std::memory_order_relaxed);
  if (code != 0) return;
  rows_.fetch_add(static_cast<uint64_t>(rows), std::memory_order_relaxed);
  const StageTimes& s = response.stages;
  request_duration_.Observe(static_cast<double>(elapsed_ns) / kNsPerSecond);
  queue_duration_.Observe(static_cast<double>(s.queue_ns) / kNsPerSecond);
  ipc_duration_.Observe(static_cast<double>(s.ipc_ns) / kNsPerSecond);
  compute_duration_.Observe(static_cast<double>(s.compute_ns) / kNsPerSecond);
  // Without batching a request runs as its own batch.
  batch_size_.Observe(static_cast<double>(s.batch_size > 0 ? s.batch_size : rows));
  if (!ensemble_) return;
  combine_duration_.Observe(static_cast<double>(s.combine_ns) / kNsPerSecond);
  for (float d : response.disagreement) {
    // k/M as a float (e.g. 0.3f > 0.3) would slip into the next bucket up.
    disagreement_.Observe(std::round(static_cast<double>(d) * 1e6) / 1e6);
  }
  if (response.cascade != nullptr) {
    MutexLock lock(&members_mu_);
    for (size_t stage = 0; stage < response.cascade->exits.size(); ++stage) {
      cascade_exits_[static_cast<int64_t>(stage)] += static_cast<uint64_t>(response.cascade->exits[stage]);
    }
    member_rows_saved_ += static_cast<uint64_t>(response.cascade->member_rows_saved);
  }
  if (!response.served_by.empty()) {
    MutexLock lock(&members_mu_);
    RungFigures& rung = served_by_[response.served_by];
    ++rung.answers;
    if (response.served_predicted_ms >= 0) {
      ++rung.predicted;
      rung.predicted_s += response.served_predicted_ms / 1e3;
      rung.observed_s += static_cast<double>(elapsed_ns) / kNsPerSecond;
    }
    if (response.served_tail_ratio >= 0) rung.tail_ratio = response.served_tail_ratio;
    if (response.served_accuracy >= 0) {
      const int64_t now = SteadySecond();
      AccuracySecond& bucket = accuracy_[static_cast<size_t>(now) % accuracy_.size()];
      if (bucket.second != now) bucket = {now, 0, 0};
      bucket.sum += response.served_accuracy;
      ++bucket.count;
    }
  }
  if (response.ensemble == nullptr) return;
  for (const MemberReport& member : response.ensemble->members) {
    MemberFigures* figures = Member(member.member);
    if (member.latency_ns > 0) figures->latency.Observe(static_cast<double>(member.latency_ns) / kNsPerSecond);
    if (!member.used) figures->missing.fetch_add(1, std::memory_order_relaxed);
  }
}

ModelMetrics::MemberFigures::MemberFigures() : latency(buckets::Latency()) {}

ModelMetrics::MemberFigures* ModelMetrics::Member(const std::string& member) {
  MutexLock lock(&members_mu_);
  std::unique_ptr<MemberFigures>& figures = members_[member];
  if (figures == nullptr) figures = std::make_unique<MemberFigures>();
  return figures.get();
}

RequestMetrics::RequestMetrics(const std::map<std::string, ModelConfig>& models) {
  for (const auto& [name, model] : models) {
    models_.emplace(name, std::make_unique<ModelMetrics>(name, std::to_string(model.LatestVersion()),
                                                         model.is_ensemble()));
  }
}

void RequestMetrics::Track(const ModelConfig& model) {
  WriterLock lock(&mu_);
  if (models_.count(model.name) != 0) return;
  const std::vector<int64_t> served = model.ServedVersions();
  models_.emplace(model.name,
                  std::make_unique<ModelMetrics>(model.name,
                                                 std::to_string(served.empty() ? model.LatestVersion() : served.back()),
                                                 model.is_ensemble()));
}

ModelMetrics* RequestMetrics::Find(const std::string& model) const {
  ReaderLock lock(&mu_);
  auto it = models_.find(model);
  return it == models_.end() ? nullptr : it->second.get();
}

struct RequestMetrics::Families {
  using MetricType = prometheus::MetricType;
  // A histogram every model (or every ensemble) has, read from its field.
  struct Hist {
    prometheus::MetricFamily family;
    AtomicHistogram ModelMetrics::*member;
    bool ensembles_only;
  };

  prometheus::MetricFamily requests =
      Family("ensemble_requests_total", "ModelInfer calls by model and outcome (the gRPC status code name).",
             MetricType::Counter);
  prometheus::MetricFamily rows =
      Family("ensemble_inference_rows_total", "Rows (batch entries) of successful requests.", MetricType::Counter);
  prometheus::MetricFamily pending =
      Family("ensemble_pending_requests", "Requests accepted and not yet answered (queued, on a host, or combining).",
             MetricType::Gauge);
  std::vector<Hist> hists = {
      {Family("ensemble_request_duration_seconds", "End-to-end time of successful requests in the router.",
              MetricType::Histogram),
       &ModelMetrics::request_duration_, false},
      {Family("ensemble_queue_duration_seconds", "Time successful requests waited in the batcher queue.",
              MetricType::Histogram),
       &ModelMetrics::queue_duration_, false},
      {Family("ensemble_ipc_duration_seconds",
              "Shared-memory channel time of successful requests: submit to completion minus host compute.",
              MetricType::Histogram),
       &ModelMetrics::ipc_duration_, false},
      {Family("ensemble_compute_duration_seconds", "Host compute time (the model's forward) of successful requests.",
              MetricType::Histogram),
       &ModelMetrics::compute_duration_, false},
      {Family("ensemble_combine_duration_seconds", "Time spent combining ensemble members' outputs.",
              MetricType::Histogram),
       &ModelMetrics::combine_duration_, true},
      {Family("ensemble_batch_size", "Rows in the batch each successful request ran in.", MetricType::Histogram),
       &ModelMetrics::batch_size_, false},
      {Family("ensemble_disagreement_ratio",
              "Per row: the fraction of ensemble members whose argmax differs from the ensemble's.",
              MetricType::Histogram),
       &ModelMetrics::disagreement_, true},
      {Family("ensemble_answer_entropy_nats",
              "Per row: the entropy of the ensemble's answer (its first output's probabilities), in nats.",
              MetricType::Histogram),
       &ModelMetrics::entropy_, true},
  };
  prometheus::MetricFamily degraded =
      Family("ensemble_degraded_total",
             "Ensemble answers made without a member (failed, down or slower than member_timeout_ms) "
             "from a quorum of the others (ensemble.min_members), by the member missing.",
             MetricType::Counter);
  prometheus::MetricFamily member_latency =
      Family("ensemble_member_duration_seconds",
             "Time from an ensemble's fan-out to each member's answer (answers the ensemble "
             "waited for, successful or not).",
             MetricType::Histogram);
  prometheus::MetricFamily exits =
      Family("ensemble_cascade_exits_total",
             "Cascades (combine: cascade): rows answered at each stage (0 = the first).", MetricType::Counter);
  prometheus::MetricFamily saved =
      Family("ensemble_cascade_member_rows_saved_total",
             "Cascades: member calls of a row not made because the row left at an earlier stage.", MetricType::Counter);
  prometheus::MetricFamily served =
      Family("ensemble_overload_answers_total",
             "Ensembles with an overload ladder: answers by the rung (model) that made them.", MetricType::Counter);
  // Predicted against observed: sums over the same answers, so that
  // rate(sum) / rate(count) is the mean of each over any range.
  prometheus::MetricFamily predicted_count =
      Family("ensemble_overload_predicted_answers_total",
             "Ensembles with an overload ladder: answers whose latency the controller predicted, by rung.",
             MetricType::Counter);
  prometheus::MetricFamily predicted_sum =
      Family("ensemble_overload_predicted_latency_seconds_total",
             "Ensembles with an overload ladder: sum of the latencies the controller predicted at admission "
             "(its choice of rung rests on them), by rung.",
             MetricType::Counter);
  prometheus::MetricFamily observed_sum =
      Family("ensemble_overload_observed_latency_seconds_total",
             "Ensembles with an overload ladder: sum of the router's observed latencies of the same answers, by "
             "rung.",
             MetricType::Counter);
  prometheus::MetricFamily tail_ratio =
      Family("ensemble_overload_tail_ratio",
             "Ensembles with an overload ladder: the rung's tail ratio as the controller used it for the last "
             "answer (the 99th percentile of its latency over its prediction; rungs are chosen on ratio x "
             "prediction), by rung.",
             MetricType::Gauge);
  prometheus::MetricFamily accuracy =
      Family("ensemble_overload_expected_accuracy",
             "Ensembles with an overload ladder: mean held-out accuracy of the rungs that made the "
             "last minute's answers (those whose rung's accuracy the ladder gives).",
             MetricType::Gauge);
  prometheus::MetricFamily unknown = Family("ensemble_unknown_model_requests_total",
                                            "ModelInfer calls naming a model that is not served.", MetricType::Counter);

  // The families in exposition order.
  std::vector<prometheus::MetricFamily> Release() && {
    std::vector<prometheus::MetricFamily> out;
    out.push_back(std::move(requests));
    out.push_back(std::move(rows));
    out.push_back(std::move(pending));
    for (auto& h : hists) out.push_back(std::move(h.family));
    for (auto* f : {&degraded, &member_latency, &exits, &saved, &served, &predicted_count, &predicted_sum,
                    &observed_sum, &tail_ratio, &accuracy, &unknown}) {
      out.push_back(std::move(*f));
    }
    return out;
  }
};

void RequestMetrics::AddModel(const ModelMetrics& m, int64_t now_second, Families* out) {
  const Labels labels = {{"model", m.name()}, {"version", m.version()}};
  for (int code = 0; code < ModelMetrics::kCodes; ++code) {
    const uint64_t n = m.outcomes_[static_cast<size_t>(code)].load(std::memory_order_relaxed);
    // OK always (so rate() has a series from the start); errors once seen.
    if (code != 0 && n == 0) continue;
    Labels with_outcome = labels;
    with_outcome.push_back({"outcome", CodeName(code)});
    AddCounter(&out->requests, with_outcome, static_cast<double>(n));
  }
  AddCounter(&out->rows, labels, static_cast<double>(m.rows_.load(std::memory_order_relaxed)));
  AddGauge(&out->pending, labels, static_cast<double>(m.pending_.load(std::memory_order_relaxed)));
  for (auto& h : out->hists) {
    if (h.ensembles_only && !m.ensemble()) continue;
    (m.*h.member).Fill(AddMetric(&h.family, labels));
  }
  MutexLock members_lock(&m.members_mu_);
  for (const auto& [member, figures] : m.members_) {
    const Labels of_member = {{"model", m.name()}, {"member", member}};
    figures->latency.Fill(AddMetric(&out->member_latency, of_member));
    AddCounter(&out->degraded, {{"model", m.name()}, {"missing_member", member}},
               static_cast<double>(figures->missing.load(std::memory_order_relaxed)));
  }
  for (const auto& [stage, left] : m.cascade_exits_) {
    AddCounter(&out->exits, {{"model", m.name()}, {"stage", std::to_string(stage)}}, static_cast<double>(left));
  }
  if (!m.cascade_exits_.empty()) {
    AddCounter(&out->saved, {{"model", m.name()}}, static_cast<double>(m.member_rows_saved_));
  }
  for (const auto& [rung, figures] : m.served_by_) {
    const Labels of_rung = {{"model", m.name()}, {"rung", rung}};
    AddCounter(&out->served, of_rung, static_cast<double>(figures.answers));
    if (figures.predicted == 0) continue;
    AddCounter(&out->predicted_count, of_rung, static_cast<double>(figures.predicted));
    AddCounter(&out->predicted_sum, of_rung, figures.predicted_s);
    AddCounter(&out->observed_sum, of_rung, figures.observed_s);
    if (figures.tail_ratio >= 0) AddGauge(&out->tail_ratio, of_rung, figures.tail_ratio);
  }
  if (const double mean = m.LastMinuteAccuracy(now_second); mean >= 0) {
    AddGauge(&out->accuracy, {{"model", m.name()}}, mean);
  }
}

std::vector<prometheus::MetricFamily> RequestMetrics::Collect() const {
  Families families;
  const int64_t now_second = SteadySecond();
  {
    ReaderLock lock(&mu_);
    for (const auto& [name, m] : models_) AddModel(*m, now_second, &families);
  }
  AddCounter(&families.unknown, {}, static_cast<double>(unknown_model_.load(std::memory_order_relaxed)));
  return std::move(families).Release();
}

}  // namespace es
