// Acceptance (isolation): a host cannot break the router.
//
//  - A lying host (tests/fault/lying_host.cc: an honest echo that now and
//    then writes adversarial completions) under load from several clients,
//    each sending a unique canary pattern: the router never crashes, no
//    client ever gets bytes that are not its own answer, every call ends
//    with a status, and the violations are counted in /metrics.
//  - A forward that never returns (the `spinner` model on a large input):
//    the call ends DEADLINE_EXCEEDED after the model's max_compute_ms, the
//    host is killed and restarted, another host's model keeps serving, and
//    the spinner serves again afterwards.
//  - SIGTERM with such a forward in flight (and no execution limit to save
//    it): the server exits within the drain timeout plus the hosts' grace.
//  - A model whose warm-up never ends: start-up fails naming the model.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <random>
#include <thread>

#include "tests/common/test_paths.h"
#include "tests/integration/kserve_helpers.h"
#include "tests/integration/metrics/metrics_support.h"
#include "tests/integration/server_process.h"

namespace es::it {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Two models on host `liar`, FP32 [-1] -> [-1]: `canary` sent request by
// request, `canary_batched` batched by the router (so a lie about a batch
// meets the code that splits it back per request). Both may compute 2 s,
// so a request the host drops is found lost within seconds. The lying host
// loads no model: model.pt only has to exist for the repository to load.
void WriteCanaryRepository(const fs::path& repo) {
  for (const std::string model : {"canary", "canary_batched"}) {
    fs::create_directories(repo / model / "1");
    ASSERT_TRUE(WriteTextFile(repo / model / "1" / "model.pt", "not a model: served by ensemble-lying-host\n"));
    ASSERT_TRUE(WriteTextFile(repo / model / "config.yaml",
                              "platform: torchscript\n"
                              "max_batch_size: 8\n"
                              "inputs:\n  - {name: input, datatype: FP32, dims: [-1]}\n"
                              "outputs:\n  - {name: output, datatype: FP32, dims: [-1]}\n"
                              "hosts: [liar]\n"
                              "max_compute_ms: 2000\n" +
                                  std::string(model == "canary_batched" ? "dynamic_batching: {max_queue_delay_us: 500}\n"
                                                                        : "")));
  }
}

struct CanaryTally {
  std::atomic<int> ok{0}, internal{0}, unavailable{0}, overran{0}, other{0}, foreign_bytes{0}, hung{0};
  int total() const { return ok + internal + unavailable + overran + other + foreign_bytes + hung; }
};

// One client: unique canary payloads, each answer checked byte for byte.
void CanaryClient(const ServerProcess& server, int client, Clock::time_point until, CanaryTally* tally) {
  auto stub = server.NewConnectionStub();
  std::mt19937 rng(static_cast<unsigned>(client) * 7919u + 1);
  for (uint32_t n = 0; Clock::now() < until; ++n) {
    const int64_t elements = 1 + static_cast<int64_t>(rng() % 256);
    std::vector<float> canary(static_cast<size_t>(elements));
    // client and call number in every element: another call's bytes can never match.
    for (int64_t i = 0; i < elements; ++i) {
      canary[static_cast<size_t>(i)] = static_cast<float>(client * 1000000 + static_cast<int>(n % 100000)) +
                                       static_cast<float>(i % 7) * 0.125f;
    }
    const std::string model = n % 2 == 0 ? "canary" : "canary_batched";
    InferResult r = Infer(*stub, RawRequest(model, {1, elements}, canary), milliseconds(20000));
    const auto code = r.status.error_code();
    if (code == grpc::StatusCode::OK) {
      const bool same = r.response.raw_output_contents_size() == 1 &&
                        r.response.raw_output_contents(0).size() == canary.size() * sizeof(float) &&
                        std::memcmp(r.response.raw_output_contents(0).data(), canary.data(),
                                    canary.size() * sizeof(float)) == 0;
      (same ? tally->ok : tally->foreign_bytes)++;
    } else if (code == grpc::StatusCode::INTERNAL) {
      tally->internal++;
    } else if (code == grpc::StatusCode::UNAVAILABLE) {
      tally->unavailable++;
      std::this_thread::sleep_for(milliseconds(2));  // the host restarts: do not spin
    } else if (code == grpc::StatusCode::DEADLINE_EXCEEDED && r.status.error_message().find("max_compute_ms") !=
                                                                   std::string::npos) {
      tally->overran++;  // the watchdog, fooled by a scribbled executor slot: the router's own answer
    } else if (code == grpc::StatusCode::DEADLINE_EXCEEDED) {
      tally->hung++;  // the client's own 20 s deadline: the router never answered
    } else {
      tally->other++;
      ADD_FAILURE() << "unexpected status " << Describe(r.status);
    }
  }
}

// Six clients for `how_long`, then the tally, printed.
std::unique_ptr<CanaryTally> RunCanaryClients(const ServerProcess& server, std::chrono::seconds how_long) {
  auto result = std::make_unique<CanaryTally>();
  CanaryTally& tally = *result;
  const auto until = Clock::now() + how_long;
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c) clients.emplace_back(CanaryClient, std::cref(server), c, until, &tally);
  for (auto& t : clients) t.join();
  std::printf("%d calls: %d OK (canary intact), %d INTERNAL, %d UNAVAILABLE, %d DEADLINE_EXCEEDED (watchdog), "
              "%d foreign bytes, %d hung\n",
              tally.total(), tally.ok.load(), tally.internal.load(), tally.unavailable.load(), tally.overran.load(),
              tally.foreign_bytes.load(), tally.hung.load());
  return result;
}

// A server whose one host `liar` is the lying host, in the mode `env` sets,
// serving the canary repository written into `dir`.
std::unique_ptr<ServerProcess> StartWithLyingHost(const TempDir& dir, std::vector<std::string> env) {
  WriteCanaryRepository(dir.path() / "repo");
  ServerProcess::Options options;
  options.repository = (dir.path() / "repo").string();
  options.hosts = {{"liar", 0, es::test_paths::kLyingHostBin}};
  options.env = std::move(env);
  return ServerProcess::Start(options);
}

TEST(IsolationTest, LyingHostNeverCrashesTheRouterNorLeaksAnotherClientsBytes) {
  WatchdogScope watchdog(seconds(180), "IsolationTest: lying host");
  TempDir dir("es_isolation_");
  // Lie often enough to see every kind, seldom enough that honest answers
  // (whose bytes the clients check) make up most of the run.
  auto server = StartWithLyingHost(dir, {"ES_LIE_MODE=random", "ES_LIE_PERCENT=3"});
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  const pid_t router = server->pid();

  const auto counted = RunCanaryClients(*server, seconds(25));
  const CanaryTally& tally = *counted;
  EXPECT_EQ(tally.foreign_bytes.load(), 0) << "a client got bytes that are not its own answer";
  EXPECT_EQ(tally.hung.load(), 0) << "a call never got an answer";
  EXPECT_EQ(tally.other.load(), 0);
  EXPECT_GT(tally.ok.load(), 50) << "too few honest answers to mean anything";
  EXPECT_GT(tally.internal.load(), 0) << "no lie was caught: is the host lying?";
  EXPECT_TRUE(ProcessAlive(router)) << server->LogTail();

  auto scrape = metrics_test::Scrape::From(server->metrics_address());
  ASSERT_TRUE(scrape);
  const auto violations = scrape->Value("ensemble_host_protocol_violations_total", {{"host", "liar"}});
  ASSERT_TRUE(violations);
  EXPECT_GE(*violations, 1.0);
  EXPECT_GE(scrape->Value("ensemble_host_restarts_total", {{"host", "liar"}}).value_or(0), 1.0);
  const std::string log = server->LogTail(200000);
  EXPECT_NE(log.find("protocol violation"), std::string::npos);

  // Still the same router, and it answers once the host is honest again.
  auto stub = server->Stub();
  EXPECT_TRUE(ServerReady(*stub, milliseconds(2000)).has_value());
}

// A host that keeps scribbling over the header (geometry, executor slots,
// its message, its metrics) while it answers honestly: the router never
// reads through any of it, and every answer is still the client's own.
TEST(IsolationTest, ScribbledHeaderIsNeverTrusted) {
  WatchdogScope watchdog(seconds(120), "IsolationTest: scribbling host");
  TempDir dir("es_isolation_");
  auto server = StartWithLyingHost(dir, {"ES_LIE_MODE=scribble"});
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  const auto counted = RunCanaryClients(*server, seconds(10));
  const CanaryTally& tally = *counted;
  EXPECT_EQ(tally.foreign_bytes.load(), 0);
  EXPECT_EQ(tally.hung.load(), 0);
  EXPECT_EQ(tally.other.load(), 0);
  EXPECT_GT(tally.ok.load(), 50);
  EXPECT_TRUE(ProcessAlive(server->pid())) << server->LogTail();
  auto scrape = metrics_test::Scrape::From(server->metrics_address());
  ASSERT_TRUE(scrape);  // the scribbled metrics block did not break /metrics
}

class HungForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(MakeTestRepository(dir_.path() / "repo", {"spinner"}, &error)) << error;
  }
  // The spinner's input: its sum decides whether it spins.
  static inference::ModelInferRequest SpinnerRequest(bool spin) {
    return RawRequest("spinner", {1, 4}, std::vector<float>(4, spin ? 1e7f : 1.0f));
  }
  TempDir dir_{"es_hung_"};
};

TEST_F(HungForwardTest, ForwardPastItsLimitIsKilledAndOnlyItsHostRestarts) {
  WatchdogScope watchdog(seconds(180), "HungForwardTest: limit");
  ServerProcess::Options options;
  options.repository = (dir_.path() / "repo").string();
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();
  const auto hosts = server->HostPids();
  ASSERT_EQ(hosts.size(), 2u);

  // The spinner (cpu0, max_compute_ms 1000) goes into its endless loop.
  InferResult spun;
  std::thread spinner([&] {
    auto own = server->NewConnectionStub();
    spun = Infer(*own, SpinnerRequest(true), milliseconds(60000));
  });
  std::this_thread::sleep_for(milliseconds(300));
  // cnn runs on cpu1 only: it keeps serving while cpu0 is stuck.
  const InferResult other = Infer(*stub, ImageRequest("cnn", RandomImages(1, 3)), milliseconds(5000));
  EXPECT_TRUE(other.status.ok()) << Describe(other.status);
  spinner.join();

  EXPECT_TRUE(HasError(spun.status, grpc::StatusCode::DEADLINE_EXCEEDED, {"spinner", "max_compute_ms", "1000"}));
  EXPECT_LT(spun.latency, seconds(10)) << "the watchdog should end it soon after 1 s";
  EXPECT_GE(spun.latency, milliseconds(900));

  // cpu0 was restarted, cpu1 was not; the spinner answers again.
  const auto after = server->WaitForHosts(milliseconds(30000), {{"cpu0", hosts.at("cpu0")}});
  ASSERT_EQ(after.size(), 2u) << server->LogTail();
  EXPECT_NE(after.at("cpu0"), hosts.at("cpu0"));
  EXPECT_EQ(after.at("cpu1"), hosts.at("cpu1"));
  InferResult again;
  for (int i = 0; i < 100; ++i) {
    again = Infer(*stub, SpinnerRequest(false), milliseconds(5000));
    if (again.status.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(again.status.ok()) << Describe(again.status);

  auto scrape = metrics_test::Scrape::From(server->metrics_address());
  ASSERT_TRUE(scrape);
  EXPECT_EQ(scrape->Value("ensemble_host_hung_forwards_total", {{"host", "cpu0"}}).value_or(-1), 1.0);
  EXPECT_EQ(scrape->Value("ensemble_host_hung_forwards_total", {{"host", "cpu1"}}).value_or(-1), 0.0);
  EXPECT_NE(server->LogTail(200000).find("past its max_compute_ms"), std::string::npos);
}

TEST_F(HungForwardTest, SigtermEndsTheServerWithinTheDrainTimeoutWhateverTheHostsDo) {
  WatchdogScope watchdog(seconds(180), "HungForwardTest: SIGTERM");
  // No execution limit to rescue the call: only the shutdown path can.
  // The spinner's own limit (1000 ms) would end the call; raise it to an hour.
  std::string error;
  ASSERT_TRUE(SetSpinnerLimitMs(dir_.path() / "repo", 3600000, &error)) << error;
  ServerProcess::Options options;
  options.repository = (dir_.path() / "repo").string();
  options.drain_timeout_ms = 2000;
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server) << ServerProcess::last_start_error();

  InferResult spun;
  std::thread spinner([&] {
    auto own = server->NewConnectionStub();
    spun = Infer(*own, SpinnerRequest(true), milliseconds(60000));
  });
  std::this_thread::sleep_for(milliseconds(500));
  const auto signalled = Clock::now();
  server->Signal(SIGTERM);
  int status = 0;
  // Drain (2 s) + the host's stop grace (2 s) + start-up slack.
  const bool exited = server->WaitExit(milliseconds(2000 + 2000 + 4000), &status);
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - signalled);
  spinner.join();
  ASSERT_TRUE(exited) << "still running " << took.count() << " ms after SIGTERM\n" << server->LogTail();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << server->LogTail();
  std::printf("SIGTERM with a hung forward: exited after %lld ms; the call got %s\n",
              static_cast<long long>(took.count()), Describe(spun.status).c_str());
  EXPECT_EQ(spun.status.error_code(), grpc::StatusCode::UNAVAILABLE) << Describe(spun.status);
}

TEST(WarmupHangTest, StartupFailsNamingTheModel) {
  WatchdogScope watchdog(seconds(180), "WarmupHangTest");
  TempDir dir("es_warmup_hang_");
  const fs::path repo = dir.path() / "repo";
  std::string error;
  ASSERT_TRUE(MakeTestRepository(repo, {"hang_warmup"}, &error)) << error;
  // Only the hanging model: the start-up limit covers a host's spawn and
  // every load before it, and on a busy machine (tests run side by side) the
  // demo's models loaded first could use it up before the host reached the
  // one that hangs.
  for (const auto& entry : fs::directory_iterator(repo)) {
    if (entry.is_directory() && entry.path().filename() != "hang_warmup") fs::remove_all(entry.path());
  }
  ServerProcess::Options options;
  options.repository = repo.string();
  // Long enough for a host to start LibTorch on a busy machine: a CI run saw
  // one host not yet ready after 12 s while a dozen tests started beside it.
  options.extra_limits = "host_startup_timeout_ms: 30000";
  const auto started = Clock::now();
  auto server = ServerProcess::Start(options);
  ASSERT_FALSE(server) << "the server started although a model's warm-up never ends";
  const std::string why = ServerProcess::last_start_error();
  EXPECT_NE(why.find("did not become ready within 30000 ms"), std::string::npos) << why;
  EXPECT_NE(why.find("model 'hang_warmup'"), std::string::npos) << why;
  EXPECT_LT(Clock::now() - started, seconds(90));
}

}  // namespace
}  // namespace es::it
