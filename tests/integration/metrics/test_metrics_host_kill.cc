// Acceptance: killing a host shows in the metrics. While a client
// calls demo_ensemble, host cpu1 (serving its member `cnn`) is SIGKILLed; a
// tight /metrics poll must see ensemble_host_up{host="cpu1"} drop to 0,
// ensemble_host_restarts_total{host="cpu1"} go to 1 and then up return to 1,
// while cpu0 stays up with no restart. Across the whole run cpu1's CPU
// seconds counter never goes backwards (it carries over the dead
// incarnation), and the request counter matches, outcome by outcome, what the
// client saw, the failed calls of the outage included.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/integration/metrics/metrics_support.h"

namespace es::metrics_test {
namespace {

using Clock = std::chrono::steady_clock;
using es::it::CodeName;
using es::it::ImageRequest;
using es::it::Infer;
using es::it::RandomImages;
using es::it::ServerProcess;
using es::it::WatchdogScope;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(MetricsHostKillTest, UpDropsRestartsRiseThenUpReturns) {
  WatchdogScope watchdog(seconds(90), "UpDropsRestartsRiseThenUpReturns");
  auto server = ServerProcess::Start(ServerProcess::Options());
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  const auto hosts = server->WaitForHosts(milliseconds(5000));
  ASSERT_EQ(hosts.size(), 2u);
  const std::string metrics = server->metrics_address();

  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<std::string, int> seen;  // GUARDED_BY(mu): outcome -> calls
  std::thread client([&] {
    auto stub = server->NewConnectionStub();
    const auto request = ImageRequest("demo_ensemble", RandomImages(2, 7));
    while (!stop.load()) {
      // A generous deadline: the server, not the client clock, decides every outcome.
      const auto code = Infer(*stub, request, milliseconds(20000)).status.error_code();
      std::lock_guard<std::mutex> lock(mu);
      ++seen[CodeName(code)];
      if (code != grpc::StatusCode::OK) std::this_thread::sleep_for(milliseconds(10));
    }
  });
  std::this_thread::sleep_for(milliseconds(500));

  auto before = Scrape::From(metrics);
  ASSERT_TRUE(before);
  ASSERT_EQ(before->Value("ensemble_host_up", {{"host", "cpu1"}}), 1);
  ASSERT_EQ(before->Value("ensemble_host_restarts_total", {{"host", "cpu1"}}), 0);
  double cpu_seconds = before->Value("ensemble_host_cpu_seconds_total", {{"host", "cpu1"}}).value_or(0);
  ASSERT_GT(cpu_seconds, 0);

  ASSERT_EQ(kill(hosts.at("cpu1"), SIGKILL), 0);
  const auto killed_at = Clock::now();
  bool saw_down = false, saw_restart = false, back_up = false;
  while (Clock::now() - killed_at < seconds(30) && !back_up) {
    auto s = Scrape::From(metrics);
    ASSERT_TRUE(s);
    const double up = s->Value("ensemble_host_up", {{"host", "cpu1"}}).value_or(-1);
    const double restarts = s->Value("ensemble_host_restarts_total", {{"host", "cpu1"}}).value_or(-1);
    const double cpu = s->Value("ensemble_host_cpu_seconds_total", {{"host", "cpu1"}}).value_or(-1);
    EXPECT_GE(cpu, cpu_seconds) << "CPU seconds went backwards across the restart";
    cpu_seconds = std::max(cpu_seconds, cpu);
    EXPECT_EQ(s->Value("ensemble_host_up", {{"host", "cpu0"}}), 1) << "cpu0 was not killed";
    saw_down |= up == 0;
    saw_restart |= restarts == 1;
    back_up = saw_down && saw_restart && up == 1;
    EXPECT_LE(restarts, 1) << "one kill, one restart";
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_TRUE(saw_down) << "ensemble_host_up{host=cpu1} never showed 0";
  EXPECT_TRUE(saw_restart) << "ensemble_host_restarts_total{host=cpu1} never reached 1";
  EXPECT_TRUE(back_up) << "ensemble_host_up{host=cpu1} did not return to 1 within 30 s";

  // Let the client make a few calls on the new host, then stop it.
  std::this_thread::sleep_for(milliseconds(500));
  stop.store(true);
  client.join();

  auto after = Scrape::From(metrics);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->Value("ensemble_host_restarts_total", {{"host", "cpu0"}}), 0);
  EXPECT_EQ(after->Value("ensemble_host_up", {{"host", "cpu1"}}), 1);
  EXPECT_GT(after->Value("ensemble_host_resident_memory_bytes", {{"host", "cpu1"}}).value_or(0), 0);
  std::lock_guard<std::mutex> lock(mu);
  int total = 0;
  for (const auto& [outcome, calls] : seen) {
    total += calls;
    EXPECT_EQ(after->Value("ensemble_requests_total", {{"model", "demo_ensemble"}, {"outcome", outcome}}), calls)
        << "outcome " << outcome;
  }
  EXPECT_EQ(after->Sum("ensemble_requests_total", {{"model", "demo_ensemble"}}), total);
  EXPECT_GT(seen["OK"], 0);
}

}  // namespace
}  // namespace es::metrics_test
