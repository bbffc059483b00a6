// Acceptance: /metrics scraped over real HTTP while requests flow;
// the counters and histogram counts match the requests sent.
//
// Three client threads send a known mix (mlp, demo_ensemble, bad-shape mlp,
// an unknown model) while a fourth scrapes /metrics in a loop and checks that
// no counter ever goes backwards. When the clients are done, one more scrape
// must count exactly what was sent: requests by outcome, rows, every
// histogram's _count (end-to-end, queue, IPC, compute, batch size; combine
// and disagreement for the ensemble), _bucket{le="+Inf"} == _count, no
// pending request, and the hosts' figures present and plausible.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/integration/metrics/metrics_support.h"

namespace es::metrics_test {
namespace {

using es::it::ImageRequest;
using es::it::Infer;
using es::it::RandomImages;
using es::it::ServerProcess;
using es::it::WatchdogScope;
using std::chrono::seconds;

constexpr int kClients = 3;
constexpr int kMlpPerClient = 20;       // batch 2
constexpr int kEnsemblePerClient = 10;  // batch 3
constexpr int kBadPerClient = 2;        // wrong shape: INVALID_ARGUMENT
constexpr int kUnknownPerClient = 1;    // NOT_FOUND, counted without a model label

const std::vector<std::string> kHistograms = {"ensemble_request_duration_seconds", "ensemble_queue_duration_seconds",
                                              "ensemble_ipc_duration_seconds", "ensemble_compute_duration_seconds",
                                              "ensemble_batch_size"};

// The sum of every counter family's samples: must never decrease.
double CounterTotal(const Scrape& s) {
  double total = 0;
  for (const auto& [name, family] : s.families()) {
    if (family.type == "counter") total += s.Sum(name);
  }
  return total;
}

void ExpectHistogramCount(const Scrape& s, const std::string& name, const std::string& model, double expected) {
  const std::map<std::string, std::string> labels = {{"model", model}, {"version", "1"}};
  EXPECT_EQ(s.Value(name + "_count", labels), expected) << name << " of " << model;
  auto inf = labels;
  inf["le"] = "+Inf";
  EXPECT_EQ(s.Value(name + "_bucket", inf), expected) << name << "_bucket{le=+Inf} of " << model;
  // Buckets are cumulative.
  double previous = 0;
  for (const auto& b : s.Find(name + "_bucket", labels)) {
    EXPECT_GE(b.value, previous) << name << " bucket le=" << b.labels.at("le") << " of " << model;
    previous = b.value;
  }
}

TEST(MetricsScrapeTest, CountersAndHistogramsMatchTheRequestsSent) {
  WatchdogScope watchdog(seconds(90), "CountersAndHistogramsMatchTheRequestsSent");
  auto server = ServerProcess::Start(ServerProcess::Options());
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  ASSERT_FALSE(server->metrics_address().empty());

  std::atomic<int> clients_left{kClients};
  std::atomic<int> failures{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      auto stub = server->NewConnectionStub();
      const auto mlp = ImageRequest("mlp", RandomImages(2, 10 + t));
      const auto ensemble = ImageRequest("demo_ensemble", RandomImages(3, 20 + t));
      auto bad = es::it::RawRequest("mlp", {1, 2, 3}, std::vector<float>(6, 0.5f));
      const auto unknown = ImageRequest("no_such_model", RandomImages(1, 1));
      for (int i = 0; i < kMlpPerClient; ++i) {
        if (!Infer(*stub, mlp).status.ok()) ++failures;
        if (i < kEnsemblePerClient && !Infer(*stub, ensemble).status.ok()) ++failures;
        if (i < kBadPerClient && Infer(*stub, bad).status.error_code() != grpc::StatusCode::INVALID_ARGUMENT) ++failures;
        if (i < kUnknownPerClient && Infer(*stub, unknown).status.error_code() != grpc::StatusCode::NOT_FOUND) {
          ++failures;
        }
      }
      --clients_left;
    });
  }
  // Scrape while the clients run: every scrape parses, counters only grow.
  int scrapes = 0;
  double last_total = 0;
  while (clients_left.load() > 0) {
    auto s = Scrape::From(server->metrics_address());
    ASSERT_TRUE(s);
    const double total = CounterTotal(*s);
    EXPECT_GE(total, last_total) << "a counter went backwards";
    last_total = total;
    ++scrapes;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(scrapes, 1) << "the load ended before a second scrape";

  auto s = Scrape::From(server->metrics_address());
  ASSERT_TRUE(s);
  const double mlp_calls = kClients * kMlpPerClient;
  const double ensemble_calls = kClients * kEnsemblePerClient;
  // Requests by model and outcome; the ensemble's member calls are not
  // requests of the members.
  EXPECT_EQ(s->Value("ensemble_requests_total", {{"model", "mlp"}, {"version", "1"}, {"outcome", "OK"}}), mlp_calls);
  EXPECT_EQ(s->Value("ensemble_requests_total", {{"model", "mlp"}, {"outcome", "INVALID_ARGUMENT"}}),
            kClients * kBadPerClient);
  EXPECT_EQ(s->Value("ensemble_requests_total", {{"model", "demo_ensemble"}, {"outcome", "OK"}}), ensemble_calls);
  EXPECT_EQ(s->Sum("ensemble_requests_total", {{"model", "cnn"}}), 0);
  EXPECT_EQ(s->Value("ensemble_unknown_model_requests_total"), kClients * kUnknownPerClient);
  EXPECT_EQ(s->Value("ensemble_inference_rows_total", {{"model", "mlp"}}), mlp_calls * 2);
  EXPECT_EQ(s->Value("ensemble_inference_rows_total", {{"model", "demo_ensemble"}}), ensemble_calls * 3);
  for (const char* model : {"mlp", "wide_mlp", "cnn", "demo_ensemble"}) {
    EXPECT_EQ(s->Value("ensemble_pending_requests", {{"model", model}}), 0) << model;
  }

  // Histograms: one observation per successful request (disagreement: per row).
  for (const auto& h : kHistograms) {
    ExpectHistogramCount(*s, h, "mlp", mlp_calls);
    ExpectHistogramCount(*s, h, "demo_ensemble", ensemble_calls);
  }
  ExpectHistogramCount(*s, "ensemble_combine_duration_seconds", "demo_ensemble", ensemble_calls);
  ExpectHistogramCount(*s, "ensemble_disagreement_ratio", "demo_ensemble", ensemble_calls * 3);
  EXPECT_TRUE(s->Find("ensemble_combine_duration_seconds_count", {{"model", "mlp"}}).empty())
      << "combine time is for ensembles only";
  // The stages were measured (non-zero times), and fit inside the end-to-end time.
  for (const char* stage : {"ensemble_request_duration_seconds_sum", "ensemble_ipc_duration_seconds_sum",
                            "ensemble_compute_duration_seconds_sum"}) {
    EXPECT_GT(s->Value(stage, {{"model", "mlp"}}).value_or(0), 0) << stage;
  }
  EXPECT_LE(s->Value("ensemble_compute_duration_seconds_sum", {{"model", "mlp"}}).value_or(1e9),
            s->Value("ensemble_request_duration_seconds_sum", {{"model", "mlp"}}).value_or(0));
  EXPECT_GT(s->Value("ensemble_combine_duration_seconds_sum", {{"model", "demo_ensemble"}}).value_or(0), 0);
  EXPECT_GE(s->Value("ensemble_batch_size_sum", {{"model", "mlp"}}).value_or(0), mlp_calls * 2)
      << "each request ran in a batch of at least its own rows";

  // Hosts.
  for (const char* host : {"cpu0", "cpu1"}) {
    const std::map<std::string, std::string> h = {{"host", host}};
    EXPECT_EQ(s->Value("ensemble_host_up", {{"host", host}, {"device", "cpu"}}), 1) << host;
    EXPECT_EQ(s->Value("ensemble_host_restarts_total", h), 0) << host;
    EXPECT_LT(s->Value("ensemble_host_heartbeat_age_seconds", h).value_or(99), 2.0) << host;
    EXPECT_EQ(s->Value("ensemble_host_arena_capacity_bytes", h), 256.0 * 1024 * 1024) << host;
    EXPECT_EQ(s->Value("ensemble_host_arena_used_bytes", h), 0) << host << ": nothing in flight";
    EXPECT_GT(s->Value("ensemble_host_resident_memory_bytes", h).value_or(0), 10e6) << host;
    EXPECT_GT(s->Value("ensemble_host_cpu_seconds_total", h).value_or(0), 0) << host;
  }
  EXPECT_TRUE(s->Find("ensemble_host_device_memory_allocated_bytes").empty()) << "CPU hosts have no device memory";
  // Types as Prometheus expects them.
  EXPECT_EQ(s->families().at("ensemble_requests_total").type, "counter");
  EXPECT_EQ(s->families().at("ensemble_request_duration_seconds").type, "histogram");
  EXPECT_EQ(s->families().at("ensemble_pending_requests").type, "gauge");
  EXPECT_EQ(s->families().at("ensemble_host_cpu_seconds_total").type, "counter");
}

}  // namespace
}  // namespace es::metrics_test
