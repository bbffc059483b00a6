// Acceptance (degraded quorum): an ensemble with min_members below
// its member count answers through a member's failure.
//
//  - Host kill: demo_ensemble with `min_members: 2` (mlp and wide_mlp on
//    host cpu0, cnn on cpu1). Sixteen clients call it in a loop while cpu1
//    is SIGKILLed: no call fails; answers made while cpu1 restarts say
//    `degraded: true, members_used: 2`, and after the new cpu1 is up the
//    answers are whole again (`degraded: false, members_used: 3`). The
//    ensemble stays ready throughout (its quorum is), grpc.health.v1's
//    readiness goes NOT_SERVING while its `liveness` stays SERVING; /metrics counts the
//    degraded answers by the missing member, and the members' latencies.
//  - Stuck member: an ensemble of two `versioned` copies (x + 3) and the
//    `spinner` (x * 3; spins for ever on a large input), min_members 2,
//    member_timeout_ms 300: a large input is answered in well under the
//    spinner's execution limit, from the two others (x + 3), degraded; a
//    small one from all three.
//  - The same stuck member under load from sixteen clients: no request
//    fails, answers go degraded while the spinner's host is stuck and
//    restarting (its execution limit ends it), and whole again after.
//  - Without min_members (the default: all) a killed member's host still
//    fails the request, naming the member (checked in test_host_kill.cc).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>

#include "tests/common/temp_dir.h"
#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/integration/metrics/metrics_support.h"

namespace es::it {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

void AppendToEnsemble(const fs::path& config, const std::string& lines) {
  std::ifstream in(config);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string anchor = "ensemble:\n";
  const size_t at = text.find(anchor);
  ASSERT_NE(at, std::string::npos) << config;
  text.insert(at + anchor.size(), lines);
  std::ofstream(config) << text;
}

int64_t IntParameter(const inference::ModelInferResponse& r, const std::string& key) {
  auto it = r.parameters().find(key);
  return it == r.parameters().end() ? -1 : it->second.int64_param();
}

std::optional<bool> BoolParameter(const inference::ModelInferResponse& r, const std::string& key) {
  auto it = r.parameters().find(key);
  if (it == r.parameters().end()) return std::nullopt;
  return it->second.bool_param();
}

struct Tally {
  std::mutex mu;
  int ok_whole = 0, ok_degraded = 0, failed = 0, odd = 0;
  std::string first_failure;
  Clock::time_point last_degraded{};
  Clock::time_point first_whole_after_degraded{};

  // Lets the clients run until whole answers have come back for 500 ms
  // (at most `limit`), then stops and joins them.
  void LoadUntilWholeAgain(std::chrono::seconds limit, std::atomic<bool>* stop, std::vector<std::thread>* clients) {
    const auto give_up = Clock::now() + limit;
    while (Clock::now() < give_up) {
      std::this_thread::sleep_for(milliseconds(100));
      std::lock_guard<std::mutex> lock(mu);
      if (first_whole_after_degraded != Clock::time_point{} &&
          Clock::now() - first_whole_after_degraded > milliseconds(500)) {
        break;
      }
    }
    stop->store(true);
    for (auto& c : *clients) c.join();
  }
};

TEST(EnsembleQuorumTest, KillingAMemberHostUnderLoadFailsNoRequest) {
  WatchdogScope watchdog(seconds(240), "KillingAMemberHostUnderLoadFailsNoRequest");
  TempDir repo("es_quorum_");
  std::string error;
  ASSERT_TRUE(CopyDemoRepository(repo.path(), &error)) << error;
  AppendToEnsemble(repo.path() / "demo_ensemble" / "config.yaml", "  min_members: 2\n");
  ServerProcess::Options options;
  options.repository = repo.path().string();
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  const auto hosts = server->WaitForHosts(milliseconds(5000));
  ASSERT_EQ(hosts.size(), 2u);

  std::atomic<bool> stop{false};
  std::atomic<bool> killed{false};
  Tally tally;
  std::vector<std::thread> clients;
  for (int t = 0; t < 16; ++t) {
    clients.emplace_back([&, t] {
      auto stub = server->NewConnectionStub();
      const auto request = ImageRequest("demo_ensemble", RandomImages(2, 900 + t));
      while (!stop.load()) {
        InferResult r = Infer(*stub, request, milliseconds(10000));
        const auto now = Clock::now();
        std::lock_guard<std::mutex> lock(tally.mu);
        if (!r.status.ok()) {
          if (tally.failed++ == 0) tally.first_failure = Describe(r.status);
          continue;
        }
        const std::optional<bool> degraded = BoolParameter(r.response, "degraded");
        const int64_t used = IntParameter(r.response, "members_used");
        if (degraded == true && used == 2) {
          ++tally.ok_degraded;
          tally.last_degraded = now;
        } else if (degraded == false && used == 3) {
          ++tally.ok_whole;
          if (killed.load() && tally.ok_degraded > 0 && tally.first_whole_after_degraded == Clock::time_point{}) {
            tally.first_whole_after_degraded = now;
          }
        } else {
          ++tally.odd;
        }
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(1000));
  {
    std::lock_guard<std::mutex> lock(tally.mu);
    EXPECT_GT(tally.ok_whole, 0) << "nothing served before the kill";
    EXPECT_EQ(tally.ok_degraded, 0) << "degraded answers with every host up";
  }
  auto probe = server->Stub();
  const Clock::time_point killed_at = Clock::now();
  ASSERT_EQ(kill(hosts.at("cpu1"), SIGKILL), 0);
  killed.store(true);
  // The ensemble stays ready while its quorum (cpu0's two members) is.
  int not_ready = 0, probes = 0, cnn_not_ready = 0, server_not_serving = 0, not_live = 0;
  auto health = server->HealthStub();
  auto health_of = [&](const std::string& service) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, milliseconds(500));
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    return health->Check(&ctx, req, &resp).ok() && resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  };
  bool back = false;
  while (!back && Clock::now() - killed_at < seconds(20)) {
    ++probes;
    // grpc.health.v1: readiness ("") goes NOT_SERVING while cpu1 is down,
    // "liveness" (a Kubernetes liveness probe) never does.
    server_not_serving += !health_of("");
    not_live += !health_of("liveness");
    not_ready += ModelReady(*probe, "demo_ensemble", milliseconds(500)) != std::optional<bool>(true);
    cnn_not_ready += ModelReady(*probe, "cnn", milliseconds(500)) == std::optional<bool>(false);
    const auto now_hosts = server->HostPids();
    auto it = now_hosts.find("cpu1");
    back = it != now_hosts.end() && it->second != hosts.at("cpu1") &&
           ModelReady(*probe, "cnn", milliseconds(500)) == std::optional<bool>(true);
  }
  ASSERT_TRUE(back) << "cpu1 did not come back: " << server->LogTail();
  EXPECT_GT(cnn_not_ready, 0) << "cnn never reported not ready: was its host down at all?";
  EXPECT_GT(server_not_serving, 0) << "grpc.health.v1 readiness stayed SERVING with a host down";
  EXPECT_EQ(not_live, 0) << "grpc.health.v1 'liveness' said NOT_SERVING while the router ran";
  // Load after the new cpu1 is up, until whole answers come back.
  tally.LoadUntilWholeAgain(seconds(10), &stop, &clients);

  std::lock_guard<std::mutex> lock(tally.mu);
  std::cout << "whole " << tally.ok_whole << ", degraded " << tally.ok_degraded << ", failed " << tally.failed
            << "; ensemble not ready in " << not_ready << " of " << probes << " probes (cnn: " << cnn_not_ready
            << ")\n";
  EXPECT_EQ(tally.failed, 0) << "first failure: " << tally.first_failure;
  EXPECT_EQ(tally.odd, 0) << "answers without members_used/degraded, or inconsistent ones";
  EXPECT_GT(tally.ok_degraded, 0) << "no degraded answer while cpu1 was down";
  ASSERT_NE(tally.first_whole_after_degraded, Clock::time_point{}) << "answers never became whole again";
  EXPECT_EQ(not_ready, 0) << "demo_ensemble reported not ready while its quorum was up";

  auto scrape = metrics_test::Scrape::From(server->metrics_address());
  ASSERT_TRUE(scrape);
  const auto missing_cnn =
      scrape->Value("ensemble_degraded_total", {{"model", "demo_ensemble"}, {"missing_member", "cnn"}});
  ASSERT_TRUE(missing_cnn) << scrape->text();
  EXPECT_EQ(*missing_cnn, static_cast<double>(tally.ok_degraded));
  EXPECT_EQ(scrape->Value("ensemble_degraded_total", {{"model", "demo_ensemble"}, {"missing_member", "mlp"}})
                .value_or(0),
            0.0);
  const auto mlp_latency =
      scrape->Value("ensemble_member_duration_seconds_count", {{"model", "demo_ensemble"}, {"member", "mlp"}});
  ASSERT_TRUE(mlp_latency) << scrape->text();
  EXPECT_EQ(*mlp_latency, static_cast<double>(tally.ok_whole + tally.ok_degraded));
}

// `trio`: two `versioned` copies (x + 3) on cpu0 and the `spinner` (x * 3;
// spins on a large input until its 1000 ms execution limit) alone on cpu1,
// min_members 2, member_timeout_ms 300.
void MakeTrioRepository(const fs::path& repo) {
  std::string error;
  ASSERT_TRUE(MakeTestRepository(repo, {"versioned", "spinner"}, &error)) << error;
  fs::copy(repo / "versioned", repo / "versioned_b", fs::copy_options::recursive);
  // The spinner alone on cpu1, so its spinning blocks no other member.
  {
    std::ifstream in(repo / "spinner" / "config.yaml");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    text.replace(text.find("hosts: [cpu0]"), 13, "hosts: [cpu1]");
    std::ofstream(repo / "spinner" / "config.yaml") << text;
  }
  fs::create_directories(repo / "trio");
  std::ofstream(repo / "trio" / "config.yaml")
      << "platform: ensemble\nmax_batch_size: 8\n"
         "ensemble:\n  min_members: 2\n  member_timeout_ms: 300\n  members:\n"
         "    - {model: versioned}\n    - {model: versioned_b}\n    - {model: spinner}\n";
}

// The trio repository in `repo`, served (a fatal failure if either fails).
void StartTrioServer(const fs::path& repo, std::unique_ptr<ServerProcess>* server) {
  MakeTrioRepository(repo);
  if (::testing::Test::HasFatalFailure()) return;
  ServerProcess::Options options;
  options.repository = repo.string();
  *server = ServerProcess::Start(options);
  ASSERT_TRUE(*server) << ServerProcess::last_start_error();
}

TEST(EnsembleQuorumTest, AMemberStuckPastTheMemberTimeoutIsNotWaitedFor) {
  WatchdogScope watchdog(seconds(240), "AMemberStuckPastTheMemberTimeoutIsNotWaitedFor");
  TempDir repo("es_quorum_");
  std::unique_ptr<ServerProcess> server;
  StartTrioServer(repo.path(), &server);
  if (HasFatalFailure()) return;
  auto stub = server->Stub();

  const std::vector<float> small = {1, 2, 3, 4};
  InferResult whole = Infer(*stub, RawRequest("trio", {1, 4}, small), milliseconds(5000));
  ASSERT_TRUE(whole.status.ok()) << Describe(whole.status);
  EXPECT_EQ(BoolParameter(whole.response, "degraded"), std::optional<bool>(false));
  EXPECT_EQ(IntParameter(whole.response, "members_used"), 3);
  Fp32Tensor out;
  ASSERT_TRUE(GetFp32Output(whole.response, "output", &out));
  for (size_t i = 0; i < small.size(); ++i) {
    EXPECT_FLOAT_EQ(out.values[i], (2 * (small[i] + 3) + 3 * small[i]) / 3) << i;
  }

  const std::vector<float> large = {1e6f, 1e6f, 1e6f, 1e6f};  // the spinner spins
  InferResult degraded = Infer(*stub, RawRequest("trio", {1, 4}, large), milliseconds(5000));
  ASSERT_TRUE(degraded.status.ok()) << Describe(degraded.status);
  std::cout << "answered in " << degraded.latency.count() / 1000 << " ms without the stuck member\n";
  // Not waited for: well before the spinner's execution limit (1000 ms).
  EXPECT_LT(degraded.latency, milliseconds(900));
  EXPECT_GE(degraded.latency, milliseconds(300));
  EXPECT_EQ(BoolParameter(degraded.response, "degraded"), std::optional<bool>(true));
  EXPECT_EQ(IntParameter(degraded.response, "members_used"), 2);
  EXPECT_EQ(degraded.response.parameters().at("member_versions").string_param(), "versioned:3,versioned_b:3");
  ASSERT_TRUE(GetFp32Output(degraded.response, "output", &out));
  for (size_t i = 0; i < large.size(); ++i) EXPECT_FLOAT_EQ(out.values[i], large[i] + 3) << i;

  auto scrape = metrics_test::Scrape::From(server->metrics_address());
  ASSERT_TRUE(scrape);
  EXPECT_EQ(scrape->Value("ensemble_degraded_total", {{"model", "trio"}, {"missing_member", "spinner"}}), 1.0);
}

TEST(EnsembleQuorumTest, AMemberStuckUnderLoadFailsNoRequest) {
  WatchdogScope watchdog(seconds(240), "AMemberStuckUnderLoadFailsNoRequest");
  TempDir repo("es_quorum_");
  std::unique_ptr<ServerProcess> server;
  StartTrioServer(repo.path(), &server);
  if (HasFatalFailure()) return;

  std::atomic<bool> stop{false}, stuck{false};
  Tally tally;
  std::vector<std::thread> clients;
  for (int t = 0; t < 16; ++t) {
    clients.emplace_back([&, t] {
      auto stub = server->NewConnectionStub();
      const std::vector<float> x = {float(t), 1, 2, 3};
      const auto request = RawRequest("trio", {1, 4}, x);
      while (!stop.load()) {
        InferResult r = Infer(*stub, request, milliseconds(10000));
        const auto now = Clock::now();
        Fp32Tensor out;
        const bool parsed = r.status.ok() && GetFp32Output(r.response, "output", &out) && out.values.size() == 4;
        std::lock_guard<std::mutex> lock(tally.mu);
        if (!r.status.ok()) {
          if (tally.failed++ == 0) tally.first_failure = Describe(r.status);
          continue;
        }
        const bool degraded = BoolParameter(r.response, "degraded") == std::optional<bool>(true);
        bool right = parsed;
        for (size_t i = 0; right && i < 4; ++i) {
          const float expected = degraded ? x[i] + 3 : (2 * (x[i] + 3) + 3 * x[i]) / 3;
          right = std::abs(out.values[i] - expected) < 1e-4f;
        }
        if (!right) {
          ++tally.odd;
        } else if (degraded) {
          ++tally.ok_degraded;
          tally.last_degraded = now;
        } else {
          ++tally.ok_whole;
          if (stuck.load() && tally.ok_degraded > 0 && tally.first_whole_after_degraded == Clock::time_point{}) {
            tally.first_whole_after_degraded = now;
          }
        }
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(1000));
  // One request that makes the spinner spin: its host is stuck until the
  // execution limit ends it, and every request meanwhile goes on without it.
  auto stub = server->Stub();
  stuck.store(true);
  InferResult spin = Infer(*stub, RawRequest("trio", {1, 4}, {1e6f, 1e6f, 1e6f, 1e6f}), milliseconds(10000));
  tally.LoadUntilWholeAgain(seconds(20), &stop, &clients);

  ASSERT_TRUE(spin.status.ok()) << Describe(spin.status);
  EXPECT_EQ(BoolParameter(spin.response, "degraded"), std::optional<bool>(true));
  std::lock_guard<std::mutex> lock(tally.mu);
  std::cout << "whole " << tally.ok_whole << ", degraded " << tally.ok_degraded << ", failed " << tally.failed << "\n";
  EXPECT_EQ(tally.failed, 0) << "first failure: " << tally.first_failure;
  EXPECT_EQ(tally.odd, 0) << "answers whose values are not the members' used";
  EXPECT_GT(tally.ok_degraded, 0) << "no degraded answer while the spinner was stuck";
  EXPECT_NE(tally.first_whole_after_degraded, Clock::time_point{}) << "answers never became whole again";
}

}  // namespace
}  // namespace es::it
