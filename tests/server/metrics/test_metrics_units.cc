// Unit tests of the router's metrics pieces, in process: AtomicHistogram
// (bucket edges, cumulative exposition, exact counts under concurrent
// observers, parameterised over thread counts) and RequestMetrics (which
// series exist, outcomes, ensemble-only families, pending, unknown models).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <prometheus/text_serializer.h>

#include <cmath>
#include <thread>

#include "server/metrics/metrics_histogram.h"
#include "server/kserve/request_metrics.h"

namespace es {
namespace {

TEST(AtomicHistogramTest, BucketsAreLessOrEqualAndCumulative) {
  AtomicHistogram h({1.0, 2.0, 4.0});
  for (double v : {0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 100.0}) h.Observe(v);
  prometheus::ClientMetric m;
  h.Fill(&m);
  ASSERT_EQ(m.histogram.bucket.size(), 4u);
  EXPECT_EQ(m.histogram.bucket[0].cumulative_count, 2u);  // 0.5, 1.0 (le is inclusive)
  EXPECT_EQ(m.histogram.bucket[1].cumulative_count, 4u);  // + 1.5, 2.0
  EXPECT_EQ(m.histogram.bucket[2].cumulative_count, 6u);  // + 3.0, 4.0
  EXPECT_EQ(m.histogram.bucket[3].cumulative_count, 7u);  // + 100 in +Inf
  EXPECT_TRUE(std::isinf(m.histogram.bucket[3].upper_bound));
  EXPECT_EQ(m.histogram.sample_count, 7u);
  EXPECT_DOUBLE_EQ(m.histogram.sample_sum, 112.0);
  EXPECT_EQ(h.count(), 7u);
}

class AtomicHistogramThreadsTest : public ::testing::TestWithParam<int> {};

TEST_P(AtomicHistogramThreadsTest, ConcurrentObserversLoseNothing) {
  const int threads = GetParam();
  constexpr int kPerThread = 20000;
  AtomicHistogram h(buckets::Latency());
  auto observe = [&](int t) {
    for (int i = 0; i < kPerThread; ++i) h.Observe(1e-6 * ((i + t) % 1000));
  };
  if (threads == 0) {
    observe(0);  // inline, on the test's thread
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(observe, t);
    for (auto& t : pool) t.join();
  }
  const uint64_t expected = static_cast<uint64_t>(std::max(threads, 1)) * kPerThread;
  prometheus::ClientMetric m;
  h.Fill(&m);
  EXPECT_EQ(m.histogram.sample_count, expected);
  EXPECT_EQ(m.histogram.bucket.back().cumulative_count, expected);
  // Every value is an integer number of µs below 1 ms: the sum is exact to rounding.
  EXPECT_NEAR(m.histogram.sample_sum, static_cast<double>(expected) * 499.5e-6, 1e-6 * static_cast<double>(expected));
}

INSTANTIATE_TEST_SUITE_P(Threads, AtomicHistogramThreadsTest, ::testing::Values(0, 1, 2, 4, 8));

std::map<std::string, ModelConfig> Models() {
  std::map<std::string, ModelConfig> models;
  ModelConfig m;
  m.name = "mlp";
  m.platform = "torchscript";
  m.versions = {1, 3};
  models[m.name] = m;
  ModelConfig e;
  e.name = "ens";
  e.platform = "ensemble";
  models[e.name] = e;
  return models;
}

const prometheus::MetricFamily* FindFamily(const std::vector<prometheus::MetricFamily>& families,
                                           const std::string& name) {
  for (const auto& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string LabelOf(const prometheus::ClientMetric& m, const std::string& name) {
  for (const auto& l : m.label) {
    if (l.name == name) return l.value;
  }
  return "";
}

TEST(RequestMetricsTest, SeriesFollowTheRequests) {
  RequestMetrics metrics(Models());
  ASSERT_EQ(metrics.Find("nope"), nullptr);
  ModelMetrics* mlp = metrics.Find("mlp");
  ModelMetrics* ens = metrics.Find("ens");
  ASSERT_NE(mlp, nullptr);
  ASSERT_NE(ens, nullptr);
  EXPECT_EQ(mlp->version(), "3");  // the served (latest) version

  InferResponse ok;
  ok.stages = {1000, 2000, 3000, 400, 8};
  mlp->Started();
  mlp->Finished(0, 10000, ok, 2);
  mlp->Started();
  mlp->Finished(14, 5000, InferResponse(), 2);  // UNAVAILABLE: counted, not observed
  mlp->Refused(3);                              // INVALID_ARGUMENT
  ens->Started();                               // still pending
  ok.disagreement = {0.f, 1.f / 3, 2.f / 3, 1.f};
  ens->Started();
  ens->Finished(0, 20000, ok, 4);
  // The answer's entropy: ensembles only, per row. Rows [1, 0] (0 nats) and
  // [0.5, 0.5] (ln 2); anything but FP32 [rows, classes] is ignored.
  InferOutput answer{"probabilities", DataType::kFp32, {2, 2}, std::string(16, '\0')};
  const float probabilities[4] = {1.f, 0.f, 0.5f, 0.5f};
  std::memcpy(answer.data.data(), probabilities, sizeof probabilities);
  ens->ObserveAnswer(answer);
  mlp->ObserveAnswer(answer);
  ens->ObserveAnswer(InferOutput{"x", DataType::kInt64, {2, 2}, std::string(32, '\0')});
  ens->ObserveAnswer(InferOutput{"x", DataType::kFp32, {2, 3}, std::string(16, '\0')});
  metrics.CountUnknownModel();

  const auto families = metrics.Collect();
  const auto* requests = FindFamily(families, "ensemble_requests_total");
  ASSERT_NE(requests, nullptr);
  std::map<std::string, double> by_series;
  for (const auto& m : requests->metric) {
    by_series[LabelOf(m, "model") + "/" + LabelOf(m, "version") + "/" + LabelOf(m, "outcome")] = m.counter.value;
  }
  const std::map<std::string, double> expected = {{"mlp/3/OK", 1},
                                                  {"mlp/3/UNAVAILABLE", 1},
                                                  {"mlp/3/INVALID_ARGUMENT", 1},
                                                  {"ens/1/OK", 1}};
  EXPECT_EQ(by_series, expected);

  const auto* pending = FindFamily(families, "ensemble_pending_requests");
  ASSERT_NE(pending, nullptr);
  for (const auto& m : pending->metric) {
    EXPECT_EQ(m.gauge.value, LabelOf(m, "model") == "ens" ? 1 : 0) << LabelOf(m, "model");
  }
  const auto* duration = FindFamily(families, "ensemble_request_duration_seconds");
  ASSERT_NE(duration, nullptr);
  ASSERT_EQ(duration->metric.size(), 2u);
  for (const auto& m : duration->metric) EXPECT_EQ(m.histogram.sample_count, 1u) << "successes only";
  // Combine and disagreement: ensembles only; disagreement per row.
  for (const char* name : {"ensemble_combine_duration_seconds", "ensemble_disagreement_ratio"}) {
    const auto* f = FindFamily(families, name);
    ASSERT_NE(f, nullptr) << name;
    ASSERT_EQ(f->metric.size(), 1u) << name;
    EXPECT_EQ(LabelOf(f->metric[0], "model"), "ens");
  }
  const auto& disagreement = FindFamily(families, "ensemble_disagreement_ratio")->metric[0].histogram;
  EXPECT_EQ(disagreement.sample_count, 4u);
  EXPECT_EQ(disagreement.bucket[0].cumulative_count, 1u);  // le=0: the row where all agree
  EXPECT_NEAR(disagreement.sample_sum, 2.0, 1e-5);
  const auto* entropy = FindFamily(families, "ensemble_answer_entropy_nats");
  ASSERT_NE(entropy, nullptr);
  ASSERT_EQ(entropy->metric.size(), 1u);
  EXPECT_EQ(LabelOf(entropy->metric[0], "model"), "ens");
  EXPECT_EQ(entropy->metric[0].histogram.sample_count, 2u);
  EXPECT_NEAR(entropy->metric[0].histogram.sample_sum, std::log(2.0), 1e-6);
  EXPECT_EQ(entropy->metric[0].histogram.bucket[0].cumulative_count, 1u);  // le=0.01: the certain row
  const auto& batch = FindFamily(families, "ensemble_batch_size")->metric;
  for (const auto& m : batch) EXPECT_EQ(m.histogram.sample_sum, 8) << "the batch's rows, not the request's";
  EXPECT_EQ(FindFamily(families, "ensemble_unknown_model_requests_total")->metric[0].counter.value, 1);

  // The text the exposer would serve has the conventional names.
  const std::string text = prometheus::TextSerializer().Serialize(families);
  EXPECT_NE(text.find("# TYPE ensemble_requests_total counter"), std::string::npos);
  EXPECT_NE(text.find("ensemble_request_duration_seconds_bucket{model=\"mlp\",version=\"3\",le=\"+Inf\"} 1"),
            std::string::npos)
      << text;
}

// An overload ladder's answers: counted by the rung that made them, the
// gauge is the mean accuracy of the answers whose rung's accuracy is known,
// and the predicted and observed latencies are summed per rung over the
// answers that carried a prediction; the tail ratio gauge is the last
// answer's, per rung that carried one.
TEST(RequestMetricsTest, OverloadAnswersCountByRungAndAverageTheirAccuracy) {
  RequestMetrics metrics(Models());
  ModelMetrics* ens = metrics.Find("ens");
  ASSERT_NE(ens, nullptr);
  auto answer = [&](const std::string& rung, double accuracy, double predicted_ms = -1, uint64_t took_ns = 1000,
                    double tail_ratio = -1) {
    InferResponse r;
    r.served_by = rung;
    r.served_accuracy = accuracy;
    r.served_predicted_ms = predicted_ms;
    r.served_tail_ratio = tail_ratio;
    ens->Started();
    ens->Finished(0, took_ns, r, 1);
  };
  answer("ens", 0.94, 20, 30'000'000, 1.5);
  answer("ens", 0.94, 10, 12'000'000, 2.5);
  answer("small", 0.90);
  answer("unknown_accuracy", -1);

  const auto families = metrics.Collect();
  const auto* served = FindFamily(families, "ensemble_overload_answers_total");
  ASSERT_NE(served, nullptr);
  std::map<std::string, double> by_rung;
  for (const auto& m : served->metric) by_rung[LabelOf(m, "model") + "/" + LabelOf(m, "rung")] = m.counter.value;
  EXPECT_EQ(by_rung, (std::map<std::string, double>{{"ens/ens", 2}, {"ens/small", 1}, {"ens/unknown_accuracy", 1}}));
  const auto* accuracy = FindFamily(families, "ensemble_overload_expected_accuracy");
  ASSERT_NE(accuracy, nullptr);
  ASSERT_EQ(accuracy->metric.size(), 1u) << "only the ensemble whose answers carry an accuracy";
  EXPECT_NEAR(accuracy->metric[0].gauge.value, (0.94 * 2 + 0.90) / 3, 1e-9);
  for (const auto& [family, value] : {std::pair<const char*, double>{"ensemble_overload_predicted_answers_total", 2},
                                      {"ensemble_overload_predicted_latency_seconds_total", 0.030},
                                      {"ensemble_overload_observed_latency_seconds_total", 0.042}}) {
    const auto* f = FindFamily(families, family);
    ASSERT_NE(f, nullptr) << family;
    ASSERT_EQ(f->metric.size(), 1u) << family << ": only the rung whose answers carried a prediction";
    EXPECT_EQ(LabelOf(f->metric[0], "rung"), "ens");
    EXPECT_NEAR(f->metric[0].counter.value, value, 1e-12) << family;
  }
  const auto* tail = FindFamily(families, "ensemble_overload_tail_ratio");
  ASSERT_NE(tail, nullptr);
  ASSERT_EQ(tail->metric.size(), 1u) << "only the rung whose answers carried a tail ratio";
  EXPECT_EQ(LabelOf(tail->metric[0], "rung"), "ens");
  EXPECT_DOUBLE_EQ(tail->metric[0].gauge.value, 2.5) << "the last answer's";
}

}  // namespace
}  // namespace es
