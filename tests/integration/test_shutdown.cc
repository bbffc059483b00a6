// Acceptance: how the server ends (and refuses to start).
//  - SIGTERM: exit 0 within 10 s, no ensemble-model-host left, nothing new in
//    /dev/shm, nothing on stdout after the listening line.
//  - SIGINT while calls are in flight: those calls finish OK (drain), exit 0.
//  - SIGTERM with a request still queued after the drain timeout: it is
//    answered UNAVAILABLE before the front ends go, exit 0.
//  - SIGKILL of the router: its hosts are gone within 1 s.
//  - Bad flags exit 2; a bad config or a host that cannot start exits 1 with a
//    one-line error, leaving no process and no shared memory behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "tests/common/test_paths.h"
#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"

namespace es::it {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The live ensemble-model-host processes of the server this test started:
// those in its process group (the server runs in a group of its own, which
// its hosts inherit and keep after it dies). Hosts of any other server on the
// machine (a demo a user runs beside the suite) are not counted.
std::vector<pid_t> ModelHosts(pid_t group) {
  std::vector<pid_t> hosts;
  if (group <= 0) return hosts;
  for (pid_t pid : ProcessesWithArg("--channel-fd")) {
    const auto args = ProcessArgs(pid);
    if (args.empty() || fs::path(args[0]).filename() != "ensemble-model-host") continue;
    if (getpgid(pid) == group) hosts.push_back(pid);
  }
  return hosts;
}

// The named shared-memory objects the router and its hosts have mapped (the
// channels are anonymous memfds, so today none): each must be gone once they
// have exited.
std::set<std::string> ServerShmObjects(const ServerProcess& server, const std::map<std::string, pid_t>& hosts) {
  std::vector<pid_t> pids = {server.pid()};
  for (const auto& [name, pid] : hosts) pids.push_back(pid);
  return ShmObjectsMappedBy(pids);
}

std::string Join(const std::set<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += " " + n;
  return s;
}

TEST(ShutdownTest, SigtermExitsZeroAndLeavesNothingBehind) {
  WatchdogScope watchdog(seconds(180), "SigtermExitsZero");
  auto server = ServerProcess::Start(ServerProcess::Options());
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();
  ASSERT_TRUE(Infer(*stub, ImageRequest("demo_ensemble", RandomImages(8, 1))).status.ok());
  const auto hosts = server->WaitForHosts(milliseconds(5000));
  const std::set<std::string> shm_objects = ServerShmObjects(*server, hosts);
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(ModelHosts(server->pid()).size(), 2u);

  const auto signalled = Clock::now();
  server->Signal(SIGTERM);
  int status = 0;
  ASSERT_TRUE(server->WaitExit(milliseconds(10000), &status)) << "no exit within 10 s of SIGTERM";
  const double took = Ms(Clock::now() - signalled);
  std::printf("SIGTERM -> exit in %.1f ms\n", took);
  ASSERT_TRUE(WIFEXITED(status)) << "not a normal exit, wait status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);

  // Right at the router's exit: its hosts were stopped before it, not after.
  for (const auto& [name, pid] : hosts) EXPECT_FALSE(ProcessAlive(pid)) << "host " << name << " still running";
  EXPECT_TRUE(ModelHosts(server->pid()).empty());
  EXPECT_EQ(StillInShm(shm_objects), std::set<std::string>()) << "left in /dev/shm:" << Join(StillInShm(shm_objects));
  EXPECT_EQ(server->RemainingStdout(), "") << "stdout has more than the listening line";
}

// SIGTERM to the whole process group (systemd, `kill -- -PGID`, Ctrl-C in a
// terminal) reaches the hosts too: they leave stopping to the router, so the
// router sees no host die under it and restarts nothing on the way out.
TEST(ShutdownTest, SigtermToTheProcessGroupStopsInOrder) {
  WatchdogScope watchdog(std::chrono::seconds(120), "process-group SIGTERM");
  ServerProcess::Options options;
  options.metrics = false;
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();
  ASSERT_TRUE(Infer(*stub, ImageRequest("demo_ensemble", RandomImages(8, 1))).status.ok());
  ASSERT_EQ(server->WaitForHosts(milliseconds(5000)).size(), 2u);

  ASSERT_EQ(kill(-server->pid(), SIGTERM), 0);
  int status = 0;
  ASSERT_TRUE(server->WaitExit(milliseconds(10000), &status)) << "no exit within 10 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  const std::string log = server->LogTail(20000);
  EXPECT_EQ(log.find("exited with code"), std::string::npos) << log;
  EXPECT_EQ(log.find("restart"), std::string::npos) << log;
  EXPECT_TRUE(ModelHosts(server->pid()).empty());
}

// The drain timeout bounds how long in-flight calls may take to finish; with
// nothing in flight there is nothing to wait for, even if a client is still
// connected (as clients usually are: channels are long-lived).
TEST(ShutdownTest, SigtermWithNothingInFlightDoesNotWaitForTheDrainTimeout) {
  WatchdogScope watchdog(seconds(180), "SigtermIdle");
  ServerProcess::Options options;
  options.drain_timeout_ms = 5000;
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();  // stays connected, idle after this call
  ASSERT_TRUE(Infer(*stub, ImageRequest("mlp", RandomImages(1, 1))).status.ok());

  const auto signalled = Clock::now();
  server->Signal(SIGTERM);
  int status = 0;
  ASSERT_TRUE(server->WaitExit(milliseconds(10000), &status)) << "no exit within 10 s of SIGTERM";
  const double took = Ms(Clock::now() - signalled);
  std::printf("idle server with a connected client: SIGTERM -> exit in %.1f ms (drain_timeout_ms %lld)\n", took,
              static_cast<long long>(options.drain_timeout_ms));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  EXPECT_LT(took, 2500.0) << "with no call in flight the server waited " << took
                          << " ms to exit, about its drain timeout (" << options.drain_timeout_ms << " ms)";
}

TEST(ShutdownTest, SigintDrainsInFlightCallsAndExitsZero) {
  WatchdogScope watchdog(seconds(180), "SigintDrains");
  auto server = ServerProcess::Start(ServerProcess::Options());
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  const auto hosts = server->WaitForHosts(milliseconds(5000));
  const std::set<std::string> shm_objects = ServerShmObjects(*server, hosts);
  ASSERT_EQ(hosts.size(), 2u);

  struct Call {
    Clock::time_point start, end;
    grpc::Status status;
  };
  std::mutex mu;
  std::vector<Call> calls;  // GUARDED_BY(mu)
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      auto stub = server->NewConnectionStub();
      const auto request = ImageRequest("demo_ensemble", RandomImages(64, 40 + t));
      while (!stop.load()) {
        Call c;
        c.start = Clock::now();
        c.status = Infer(*stub, request, milliseconds(8000)).status;
        c.end = Clock::now();
        std::lock_guard<std::mutex> lock(mu);
        calls.push_back(std::move(c));
        if (!calls.back().status.ok()) break;  // the server is going away
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(1000));
  const auto signalled = Clock::now();
  server->Signal(SIGINT);
  int status = 0;
  const bool exited = server->WaitExit(milliseconds(10000), &status);
  stop.store(true);
  for (auto& c : clients) c.join();
  ASSERT_TRUE(exited) << "no exit within 10 s of SIGINT";
  std::printf("SIGINT under load -> exit in %.1f ms\n", Ms(Clock::now() - signalled));
  ASSERT_TRUE(WIFEXITED(status)) << "not a normal exit, wait status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);

  size_t drained = 0, ok = 0, in_flight = 0;
  for (const auto& c : calls) {
    ok += c.status.ok();
    if (c.start < signalled && c.end > signalled) {
      ++in_flight;
      std::printf("  in flight at SIGINT: started %.1f ms before it, ended %.1f ms after: %s\n",
                  Ms(signalled - c.start), Ms(c.end - signalled), Describe(c.status).c_str());
    }
    // Calls that were surely at the server when the signal came must finish.
    if (c.start < signalled - milliseconds(10) && c.end > signalled) {
      ++drained;
      EXPECT_TRUE(c.status.ok()) << "a call in flight at SIGINT ended with " << Describe(c.status);
    }
    if (!c.status.ok()) {
      EXPECT_TRUE(c.status.error_code() == grpc::UNAVAILABLE)
          << "a call during shutdown ended with " << Describe(c.status);
    }
  }
  std::printf("SIGINT under load: %zu calls, %zu OK, %zu in flight at the signal (%zu for 10 ms or more)\n",
              calls.size(), ok, in_flight, drained);
  EXPECT_GT(ok, 0u);
  EXPECT_GT(in_flight, 0u) << "the test did not catch any call in flight";
  for (const auto& [name, pid] : hosts) EXPECT_FALSE(ProcessAlive(pid)) << "host " << name << " still running";
  EXPECT_TRUE(ModelHosts(server->pid()).empty());
  EXPECT_EQ(StillInShm(shm_objects), std::set<std::string>()) << "left in /dev/shm:" << Join(StillInShm(shm_objects));
}

// A request still in a batch queue when the drain times out (its model
// waits long for a batch) is answered UNAVAILABLE at shutdown, while the
// front end that waits for it still exists, instead of being dropped when
// the dispatchers go (an HTTP request's answer holds its connection's
// session, which must not outlive the HTTP server); the server exits 0.
TEST(ShutdownTest, RequestsStillQueuedAfterTheDrainTimeoutAreAnswered) {
  WatchdogScope watchdog(seconds(180), "QueuedAtShutdown");
  TempDir repo("es_shutdown_queue_repo_");
  std::string error;
  ASSERT_TRUE(CopyDemoRepository(repo.path(), &error)) << error;
  fs::create_directories(repo.path() / "mlp_slow" / "1");
  fs::copy_file(repo.path() / "mlp" / "1" / "model.pt", repo.path() / "mlp_slow" / "1" / "model.pt");
  ASSERT_TRUE(WriteTextFile(repo.path() / "mlp_slow" / "config.yaml",
                            "platform: torchscript\nmax_batch_size: 64\n"
                            "inputs:\n  - {name: input, datatype: FP32, dims: [1, 28, 28]}\n"
                            "outputs:\n  - {name: probabilities, datatype: FP32, dims: [10]}\n"
                            "hosts: [cpu1]\ndynamic_batching: {max_queue_delay_us: 30000000}\n"));
  ServerProcess::Options options;
  options.repository = repo.path().string();
  options.drain_timeout_ms = 300;
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server) << ServerProcess::last_start_error();

  const int fd = SendHttpImageRequest(server->http_address(), "mlp_slow");
  ASSERT_GE(fd, 0);
  std::this_thread::sleep_for(milliseconds(300));  // queued: its batch waits 30 s

  server->Signal(SIGTERM);
  int status = 0;
  ASSERT_TRUE(server->WaitExit(milliseconds(15000), &status)) << "no exit within 15 s of SIGTERM";
  close(fd);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  const std::string log = server->LogTail(20000);
  EXPECT_NE(log.find("shutdown: 1 request(s) still queued answered UNAVAILABLE"), std::string::npos) << log;
}

TEST(ShutdownTest, SigkillOfTheRouterTakesItsHostsWithinOneSecond) {
  WatchdogScope watchdog(seconds(180), "SigkillRouter");
  auto server = ServerProcess::Start(ServerProcess::Options());
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  ASSERT_TRUE(Infer(*server->Stub(), ImageRequest("demo_ensemble", RandomImages(2, 1))).status.ok());
  const auto hosts = server->WaitForHosts(milliseconds(5000));
  const std::set<std::string> shm_objects = ServerShmObjects(*server, hosts);
  ASSERT_EQ(hosts.size(), 2u);

  const auto killed = Clock::now();
  server->Signal(SIGKILL);
  int status = 0;
  ASSERT_TRUE(server->WaitExit(milliseconds(5000), &status));
  bool gone = false;
  while (Ms(Clock::now() - killed) < 1000) {
    gone = true;
    for (const auto& [name, pid] : hosts) gone &= !ProcessAlive(pid);
    if (gone) break;
    std::this_thread::sleep_for(milliseconds(2));
  }
  const double took = Ms(Clock::now() - killed);
  std::printf("router SIGKILL -> hosts gone in %.1f ms\n", took);
  for (const auto& [name, pid] : hosts) {
    EXPECT_FALSE(ProcessAlive(pid)) << "host " << name << " (pid " << pid << ") alive 1 s after the router died";
  }
  EXPECT_TRUE(gone);
  EXPECT_TRUE(ModelHosts(server->pid()).empty());
  EXPECT_EQ(StillInShm(shm_objects), std::set<std::string>()) << "left in /dev/shm:" << Join(StillInShm(shm_objects));
}

TEST(ShutdownTest, BadFlagsExitTwo) {
  WatchdogScope watchdog(seconds(60), "BadFlags");
  const std::string& repo = DemoRepository();
  ASSERT_FALSE(repo.empty());
  TempDir dir;
  const fs::path config = dir.path() / "server.yaml";
  ASSERT_TRUE(WriteTextFile(config, ServerConfigYaml(repo, ServerProcess::Options())));
  const std::vector<std::vector<std::string>> cases = {
      {es::test_paths::kServerBin},                                                              // --config is required
      {es::test_paths::kServerBin, "--config", config.string(), "--no-such-flag"},               // unknown flag
      {es::test_paths::kServerBin, "--config", config.string(), "--grpc-port", "not-a-number"},  // bad value
      {es::test_paths::kServerBin, "--config", config.string(), "--grpc-port", "70000"},         // out of range
  };
  for (const auto& argv : cases) {
    std::string output;
    const int rc = RunCommand(argv, seconds(30), &output);
    std::string cmd;
    for (const auto& a : argv) cmd += a + " ";
    EXPECT_EQ(rc, 2) << cmd << "\n" << output;
    EXPECT_FALSE(output.empty()) << cmd;
    EXPECT_EQ(output.find("grpc listening"), std::string::npos) << cmd;
    EXPECT_TRUE(ModelHosts(LastCommandProcessGroup()).empty()) << cmd;
  }
}

// Lines of `text` that are not empty.
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

TEST(ShutdownTest, BadConfigExitsOneWithAOneLineError) {
  WatchdogScope watchdog(seconds(60), "BadConfig");
  const std::string& repo = DemoRepository();
  ASSERT_FALSE(repo.empty());
  TempDir dir;
  struct Case {
    std::string what, yaml, needle;
  };
  const std::string good = ServerConfigYaml(repo, ServerProcess::Options());
  const std::vector<Case> cases = {
      {"unknown key", good + "no_such_key: 1\n", "no_such_key"},
      {"missing repository",
       "repository: " + (dir.path() / "nowhere").string() + "\nhosts:\n  - {name: cpu0, device: cpu}\n", "nowhere"},
      {"unknown host device", "repository: " + repo + "\nhosts:\n  - {name: cpu0, device: tpu9}\n", "tpu9"},
      {"model on a host that is not configured", "repository: " + repo + "\nhosts:\n  - {name: cpu0, device: cpu}\n",
       "cpu1"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const fs::path config = dir.path() / "bad.yaml";
    ASSERT_TRUE(WriteTextFile(config, c.yaml));
    std::string output;
    const int rc = RunCommand({es::test_paths::kServerBin, "--config", config.string(), "--grpc-port", "0",
                               "--http-port", "0", "--metrics-port", "0"},
                              seconds(60), &output);
    EXPECT_EQ(rc, 1) << output;
    const auto lines = Lines(output);
    EXPECT_EQ(lines.size(), 1u) << "expected a one-line error, got:\n" << output;
    EXPECT_NE(output.find(c.needle), std::string::npos) << output;
    EXPECT_EQ(output.find("grpc listening"), std::string::npos) << output;
    EXPECT_TRUE(ModelHosts(LastCommandProcessGroup()).empty());
  }
}

TEST(ShutdownTest, HostThatCannotStartExitsOneAndLeavesNothing) {
  WatchdogScope watchdog(seconds(120), "HostCannotStart");
  TempDir dir;
  const fs::path repo = dir.path() / "repo";
  std::string error;
  ASSERT_TRUE(CopyDemoRepository(repo, &error)) << error;
  ASSERT_TRUE(WriteTextFile(repo / "cnn" / "1" / "model.pt", "this is not a TorchScript archive"));
  const fs::path config = dir.path() / "server.yaml";
  ASSERT_TRUE(WriteTextFile(config, ServerConfigYaml(repo.string(), ServerProcess::Options())));
  std::string output;
  const auto start = Clock::now();
  // Free ports for every listener: a port in use would fail the start for
  // another reason (before the hosts), and prove nothing.
  const int rc = RunCommand({es::test_paths::kServerBin, "--config", config.string(), "--grpc-port", "0", "--http-port",
                             "0", "--metrics-port", "0"},
                            seconds(100), &output);
  std::printf("host start failure -> exit %d in %.1f ms\n", rc, Ms(Clock::now() - start));
  EXPECT_EQ(rc, 1) << output;
  EXPECT_EQ(output.find("grpc listening"), std::string::npos) << output;
  const auto lines = Lines(output);
  ASSERT_FALSE(lines.empty());
  // Logs may precede it; the last line is the error, and it says which host.
  EXPECT_EQ(lines.back().rfind("ensemble-server:", 0), 0u) << lines.back();
  EXPECT_NE(lines.back().find("cpu1"), std::string::npos) << lines.back();
  EXPECT_TRUE(ModelHosts(LastCommandProcessGroup()).empty());
}

}  // namespace
}  // namespace es::it
