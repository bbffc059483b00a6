// Acceptance: memory stays flat, and what a request costs.
//
// 10,000 sequential demo_ensemble requests of batch 1 (concurrency 1, one
// connection). The resident set (VmRSS) of the router and of each host after
// request 10,000 must be within 10% of where it was after request 1,000.
// Prints (and records as test properties) the RSS figures and the end-to-end
// latency of those requests as the client sees it: p50, p99 (µs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"

namespace es::it {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kRequests = 10000;
constexpr int kBaselineAt = 1000;

struct RssSample {
  long router = -1;
  std::map<std::string, long> hosts;
};

RssSample SampleRss(const ServerProcess& server, const std::map<std::string, pid_t>& hosts) {
  RssSample s;
  s.router = RssKiB(server.pid());
  for (const auto& [name, pid] : hosts) s.hosts[name] = RssKiB(pid);
  return s;
}

void CheckWithin10Percent(const std::string& who, long baseline, long final_kib) {
  ASSERT_GT(baseline, 0) << who;
  ASSERT_GT(final_kib, 0) << who;
  const double change =
      (static_cast<double>(final_kib) - static_cast<double>(baseline)) / static_cast<double>(baseline);
  std::printf("memory: %-8s VmRSS after %d requests: %ld KiB, after %d: %ld KiB (%+.2f%%)\n", who.c_str(), kBaselineAt,
              baseline, kRequests, final_kib, 100.0 * change);
  ::testing::Test::RecordProperty("rss_kib_" + who + "_at_1000", static_cast<int>(baseline));
  ::testing::Test::RecordProperty("rss_kib_" + who + "_at_10000", static_cast<int>(final_kib));
  EXPECT_LE(std::fabs(change), 0.10) << who << " RSS went from " << baseline << " KiB to " << final_kib << " KiB";
}

TEST(MemoryTest, TenThousandRequestsKeepRssWithinTenPercent) {
  WatchdogScope watchdog(seconds(240), "TenThousandRequests");
  auto server = ServerProcess::Start(ServerProcess::Options());
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  const auto hosts = server->WaitForHosts(milliseconds(5000));
  ASSERT_EQ(hosts.size(), 2u);
  auto stub = server->Stub();

  // A pool of distinct inputs, made before timing starts.
  std::vector<inference::ModelInferRequest> requests;
  for (int i = 0; i < 64; ++i) requests.push_back(ImageRequest("demo_ensemble", RandomImages(1, 9000 + i)));

  std::vector<int64_t> latency_us;
  latency_us.reserve(kRequests);
  RssSample baseline;
  int failures = 0;
  for (int i = 1; i <= kRequests; ++i) {
    InferResult r = Infer(*stub, requests[static_cast<size_t>(i) % requests.size()], milliseconds(10000));
    if (!r.status.ok()) {
      if (++failures <= 5) ADD_FAILURE() << "request " << i << ": " << Describe(r.status);
      continue;
    }
    latency_us.push_back(r.latency.count());
    if (i == kBaselineAt) baseline = SampleRss(*server, hosts);
  }
  const RssSample final_rss = SampleRss(*server, hosts);
  EXPECT_EQ(failures, 0);
  // The same processes throughout: no host was restarted.
  EXPECT_EQ(server->HostPids(), hosts);

  CheckWithin10Percent("router", baseline.router, final_rss.router);
  for (const auto& [name, kib] : baseline.hosts) CheckWithin10Percent(name, kib, final_rss.hosts.at(name));

  const std::vector<int64_t> steady(latency_us.begin() + std::min<size_t>(latency_us.size(), kBaselineAt),
                                    latency_us.end());
  const int64_t p50 = Percentile(latency_us, 50), p99 = Percentile(latency_us, 99);
  const int64_t steady_p50 = Percentile(steady, 50), steady_p99 = Percentile(steady, 99);
  double mean = 0;
  for (int64_t v : latency_us) mean += static_cast<double>(v);
  mean /= std::max<size_t>(1, latency_us.size());
  std::printf(
      "latency: demo_ensemble batch 1, concurrency 1, %zu requests, client-side ModelInfer round trip over "
      "loopback gRPC:\n  all: p50 %lld us, p99 %lld us, mean %.0f us; requests %d-%d: p50 %lld us, p99 %lld us\n",
      latency_us.size(), static_cast<long long>(p50), static_cast<long long>(p99), mean, kBaselineAt + 1, kRequests,
      static_cast<long long>(steady_p50), static_cast<long long>(steady_p99));
  std::fflush(stdout);
  ::testing::Test::RecordProperty("latency_p50_us", static_cast<int>(p50));
  ::testing::Test::RecordProperty("latency_p99_us", static_cast<int>(p99));
  ::testing::Test::RecordProperty("latency_steady_p50_us", static_cast<int>(steady_p50));
  ::testing::Test::RecordProperty("latency_steady_p99_us", static_cast<int>(steady_p99));
}

}  // namespace
}  // namespace es::it
