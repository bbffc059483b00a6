// Acceptance: a real Prometheus server (Debian's
// /usr/bin/prometheus) on loopback scrapes ensemble-server every second
// while load runs; its HTTP API then answers for the request counter (the
// exact number of requests sent) and for a histogram_quantile over the
// latency histogram (end-to-end and per stage). Then every query of the
// Grafana dashboard (docker/monitoring/grafana-dashboard.json) is run against
// it: each must be valid PromQL and, except the CUDA-only device memory
// panel and the cascade, ladder and experiment panels (the demo serves none)
// and the recording rules' series, return data.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "tests/common/test_paths.h"
#include "tests/integration/kserve_helpers.h"
#include "tests/integration/metrics/metrics_support.h"
#include "tests/integration/server_process.h"

namespace es::metrics_test {
namespace {

using Clock = std::chrono::steady_clock;
using es::it::ImageRequest;
using es::it::Infer;
using es::it::RandomImages;
using es::it::ServerProcess;
using es::it::WatchdogScope;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Polls `promql` until it returns a value that `accept` takes, or `timeout`.
std::optional<double> WaitForQuery(const PrometheusServer& prometheus, const std::string& promql,
                                   const std::function<bool(double)>& accept, seconds timeout, std::string* last) {
  const auto deadline = Clock::now() + timeout;
  std::optional<double> value;
  while (Clock::now() < deadline) {
    std::string error;
    value = prometheus.Query(promql, &error);
    *last = value ? std::to_string(*value) : error;
    if (value && accept(*value)) return value;
    std::this_thread::sleep_for(milliseconds(250));
  }
  return std::nullopt;
}

TEST(MetricsPrometheusTest, PrometheusScrapesTheServerAndAnswersQueries) {
  WatchdogScope watchdog(seconds(100), "PrometheusScrapesTheServerAndAnswersQueries");
  auto server = ServerProcess::Start(ServerProcess::Options());
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  std::string error;
  auto prometheus = PrometheusServer::Start(server->metrics_address(), &error);
  ASSERT_TRUE(prometheus) << error;

  // Load for a few scrape intervals: mlp from two connections, the ensemble
  // from a third, and one bad request (so the error panels have a series).
  EXPECT_FALSE(Infer(*server->Stub(), es::it::RawRequest("mlp", {1, 3}, {1, 2, 3})).status.ok());
  std::atomic<int> sent{0}, failed{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&, t] {
      auto stub = server->NewConnectionStub();
      const std::string model = t < 2 ? "mlp" : "demo_ensemble";
      const auto request = ImageRequest(model, RandomImages(4, 30 + t));
      while (!stop.load()) {
        if (!Infer(*stub, request).status.ok()) ++failed;
        if (model == "mlp") ++sent;
        std::this_thread::sleep_for(milliseconds(5));
      }
    });
  }
  std::string last;
  // Prometheus sees the target up and the counter moving while load runs.
  EXPECT_TRUE(WaitForQuery(*prometheus, "up{job=\"ensemble-serve\"}", [](double v) { return v == 1; }, seconds(20),
                           &last))
      << "target never up: " << last << "\n" << prometheus->LogTail();
  EXPECT_TRUE(WaitForQuery(*prometheus, "sum(rate(ensemble_requests_total{model=\"mlp\",outcome=\"OK\"}[30s]))",
                           [](double v) { return v > 0; }, seconds(20), &last))
      << "no request rate: " << last;
  std::this_thread::sleep_for(seconds(2));
  stop.store(true);
  for (auto& c : clients) c.join();
  ASSERT_EQ(failed.load(), 0);
  ASSERT_GT(sent.load(), 0);

  // The counter, once Prometheus has scraped after the last request: exactly what was sent.
  const double expected = sent.load();
  const auto count = WaitForQuery(*prometheus, "sum(ensemble_requests_total{model=\"mlp\",outcome=\"OK\"})",
                                  [&](double v) { return v == expected; }, seconds(10), &last);
  EXPECT_TRUE(count) << "request counter in Prometheus: " << last << ", expected " << expected;

  // Quantiles over the histograms: a number (not NaN), positive, and p99 >= p50.
  const std::string window = "[30s]";
  auto quantile = [&](double q, const std::string& histogram) {
    return "histogram_quantile(" + std::to_string(q) + ", sum by (le) (rate(" + histogram +
           "_bucket{model=\"mlp\"}" + window + ")))";
  };
  auto finite_positive = [](double v) { return std::isfinite(v) && v > 0; };
  const auto p99 = WaitForQuery(*prometheus, quantile(0.99, "ensemble_request_duration_seconds"), finite_positive,
                                seconds(10), &last);
  ASSERT_TRUE(p99) << "p99 end-to-end latency: " << last;
  const auto p50 = WaitForQuery(*prometheus, quantile(0.50, "ensemble_request_duration_seconds"), finite_positive,
                                seconds(10), &last);
  ASSERT_TRUE(p50) << "p50 end-to-end latency: " << last;
  EXPECT_GE(*p99, *p50);
  EXPECT_LT(*p99, 10.0) << "p99 beyond the last finite bucket";
  for (const char* stage : {"ensemble_compute_duration_seconds", "ensemble_ipc_duration_seconds"}) {
    EXPECT_TRUE(WaitForQuery(*prometheus, quantile(0.99, stage), finite_positive, seconds(10), &last))
        << stage << " p99: " << last;
  }
  EXPECT_TRUE(WaitForQuery(*prometheus, "sum(ensemble_host_up)", [](double v) { return v == 2; }, seconds(5), &last))
      << "hosts up: " << last;

  // The dashboard's queries, with Grafana's variables filled in.
  const nlohmann::json dashboard = nlohmann::json::parse(es::it::ReadTextFile(es::test_paths::kDashboardJson));
  int queries = 0;
  for (const auto& panel : dashboard.at("panels")) {
    if (!panel.contains("targets")) continue;
    for (const auto& target : panel.at("targets")) {
      std::string expr = target.at("expr").get<std::string>();
      for (const auto& [var, value] :
           std::vector<std::pair<std::string, std::string>>{{"$__rate_interval", "30s"}, {"$__range", "5m"}, {"$model", ".*"}}) {
        for (size_t at = expr.find(var); at != std::string::npos; at = expr.find(var, at)) expr.replace(at, var.size(), value);
      }
      ++queries;
      // No data without a GPU host, a cascade or an overload ladder (the demo has none).
      // Empty here: no GPU, cascade, ladder or experiment is served, and
      // this Prometheus loads no recording rules (model:... series).
      const bool may_be_empty = expr.find("device_memory") != std::string::npos ||
                                expr.find("ensemble_cascade_") != std::string::npos ||
                                expr.find("ensemble_overload_") != std::string::npos ||
                                expr.find("ensemble_experiment_") != std::string::npos ||
                                expr.rfind("model:", 0) == 0;
      std::optional<size_t> series;
      const auto deadline = Clock::now() + seconds(5);
      do {
        series = prometheus->CountSeries(expr, &last);
        if (!series) break;  // rejected: no point retrying
        if (*series > 0 || may_be_empty) break;
        std::this_thread::sleep_for(milliseconds(250));
      } while (Clock::now() < deadline);
      ASSERT_TRUE(series) << "panel '" << panel.at("title") << "': " << expr << ": " << last;
      if (!may_be_empty) {
        EXPECT_GT(*series, 0u) << "panel '" << panel.at("title") << "' has no data: " << expr;
      }
    }
  }
  EXPECT_GE(queries, 20) << "the dashboard lost its queries";
  std::printf("prometheus: %d mlp requests counted; p50 %.3f ms, p99 %.3f ms; %d dashboard queries checked\n",
              static_cast<int>(expected), *p50 * 1e3, *p99 * 1e3, queries);
}

}  // namespace
}  // namespace es::metrics_test
