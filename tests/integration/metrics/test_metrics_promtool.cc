// Acceptance: `promtool check metrics` (Debian's prometheus
// package) passes on a real scrape of ensemble-server's /metrics: the text
// format parses and Prometheus's naming lint (base units, _total on
// counters, help text, no reserved names) has nothing to say.
//
// The scrape is taken after successful and failed requests of a model and an
// ensemble, so every family (error outcomes, combine, disagreement) is in it.
#include <gtest/gtest.h>

#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/integration/metrics/metrics_support.h"

#ifndef ES_PROMTOOL_BIN
#error "ES_PROMTOOL_BIN must be defined (path of promtool)"
#endif

namespace es::metrics_test {
namespace {

using es::it::ImageRequest;
using es::it::Infer;
using es::it::RandomImages;
using es::it::ServerProcess;
using es::it::WatchdogScope;
using std::chrono::seconds;

TEST(MetricsPromtoolTest, ARealScrapePassesPromtoolCheckMetrics) {
  WatchdogScope watchdog(seconds(60), "ARealScrapePassesPromtoolCheckMetrics");
  auto server = ServerProcess::Start(ServerProcess::Options());
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(Infer(*stub, ImageRequest("mlp", RandomImages(2, i))).status.ok());
    ASSERT_TRUE(Infer(*stub, ImageRequest("demo_ensemble", RandomImages(2, i))).status.ok());
  }
  EXPECT_FALSE(Infer(*stub, es::it::RawRequest("cnn", {1, 3}, {1, 2, 3})).status.ok());
  EXPECT_FALSE(Infer(*stub, ImageRequest("nope", RandomImages(1, 1))).status.ok());

  const HttpResponse r = HttpGet(server->metrics_address(), "/metrics");
  ASSERT_EQ(r.status, 200) << r.error;
  ASSERT_NE(r.body.find("ensemble_requests_total{model=\"cnn\",version=\"1\",outcome=\"INVALID_ARGUMENT\"} 1"),
            std::string::npos)
      << r.body;
  const auto file = server->dir() / "scrape.txt";
  ASSERT_TRUE(es::it::WriteTextFile(file, r.body));
  std::string output;
  const int rc = es::it::RunCommand({"/bin/sh", "-c", std::string(ES_PROMTOOL_BIN) + " check metrics < " + file.string()},
                                    seconds(30), &output);
  EXPECT_EQ(rc, 0) << "promtool check metrics:\n" << output << "\non this scrape:\n" << r.body;
  EXPECT_EQ(output, "") << "promtool has remarks";
}

}  // namespace
}  // namespace es::metrics_test
