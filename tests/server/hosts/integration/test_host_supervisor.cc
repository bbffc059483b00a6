// HostSupervisor (server/hosts/host_supervisor.h) with a real host process:
// ensemble-lying-host (tests/fault/lying_host.cc) in its honest mode, which
// attaches to the channel, says READY and answers every load with yes. The
// supervisor starts it, loads its assignment and publishes the connection;
// restarts it after it is SIGKILLed, loading the assignment again; stops it
// cleanly (the process is gone and reaped, the connection withdrawn); and
// reports a host binary that cannot start. Waits are on conditions, bounded.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "server/hosts/host_supervisor.h"
#include "tests/common/test_paths.h"

namespace es {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Polls `condition` until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& condition, milliseconds timeout = milliseconds(10000)) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return condition();
}

// Whether a process `pid` still exists (a zombie counts: it was not reaped).
bool ProcessExists(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

class HostSupervisorTest : public ::testing::Test {
 protected:
  HostSupervisorTest() {
    setenv("ES_LIE_MODE", "never", 1);  // the host inherits it: an honest echo
    host_.name = "liar";
    limits_.arena_bytes = 4 << 20;
    limits_.host_startup_timeout_ms = 10000;
    limits_.heartbeat_timeout_ms = 5000;
  }

  // The assignment: one model version; counts how often a start asks for it.
  HostAssignment Assignment() {
    return HostAssignment{[this] {
                            ++assignment_reads_;
                            return std::vector<HostModelLoad>{{"m", 1, "spec"}};
                          },
                          [] { return uint64_t{1}; }};
  }

  std::unique_ptr<HostSupervisor> Make(const std::string& binary = es::test_paths::kLyingHostBin) {
    return std::make_unique<HostSupervisor>(host_, limits_, Assignment(), binary);
  }

  HostConfig host_;
  Limits limits_;
  std::atomic<int> assignment_reads_{0};
};

TEST_F(HostSupervisorTest, StartsTheHostLoadsItsAssignmentAndPublishesTheConnection) {
  auto supervisor = Make();
  EXPECT_FALSE(supervisor->ready());
  supervisor->Start();
  ASSERT_TRUE(supervisor->WaitFirstStart()) << supervisor->last_error();
  EXPECT_TRUE(supervisor->ready());
  EXPECT_NE(supervisor->connection(), nullptr);
  const pid_t pid = supervisor->pid();
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(ProcessExists(pid));
  EXPECT_GE(assignment_reads_.load(), 1) << "the assignment was never asked for";
  EXPECT_EQ(supervisor->restarts(), 0);
  const HostFigures figures = supervisor->figures();
  EXPECT_TRUE(figures.up);
  EXPECT_EQ(figures.pid, pid);
  // Control requests reach the live host (which says yes to every load).
  const Status loaded = supervisor->Control(ipc::RequestKind::kLoad, {"other", 2, "spec"}, milliseconds(5000));
  EXPECT_TRUE(loaded.ok()) << loaded.ToString();
  supervisor->Stop();
}

TEST_F(HostSupervisorTest, RestartsTheHostAfterItIsKilledAndLoadsTheAssignmentAgain) {
  auto supervisor = Make();
  supervisor->Start();
  ASSERT_TRUE(supervisor->WaitFirstStart()) << supervisor->last_error();
  const pid_t first = supervisor->pid();
  ASSERT_GT(first, 0);
  const int reads_before = assignment_reads_.load();
  const std::shared_ptr<HostConnection> old_connection = supervisor->connection();

  ASSERT_EQ(kill(first, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] {
    const pid_t now = supervisor->pid();
    return supervisor->restarts() >= 1 && supervisor->ready() && now > 0 && now != first;
  })) << "no new host after SIGKILL; last error: " << supervisor->last_error();
  EXPECT_EQ(supervisor->restarts(), 1);
  EXPECT_FALSE(ProcessExists(first)) << "the killed host was not reaped";
  EXPECT_TRUE(ProcessExists(supervisor->pid()));
  EXPECT_NE(supervisor->connection(), old_connection) << "the dead host's connection is still published";
  EXPECT_GT(assignment_reads_.load(), reads_before) << "the new host was not given its assignment";
  const std::string error = supervisor->last_error();
  EXPECT_NE(error.find(std::to_string(first)), std::string::npos) << error;
  EXPECT_NE(error.find("SIGKILL"), std::string::npos) << error;
  supervisor->Stop();
}

TEST_F(HostSupervisorTest, StopEndsAndReapsTheHostAndWithdrawsTheConnection) {
  auto supervisor = Make();
  supervisor->Start();
  ASSERT_TRUE(supervisor->WaitFirstStart()) << supervisor->last_error();
  const pid_t pid = supervisor->pid();
  ASSERT_GT(pid, 0);
  supervisor->Stop(milliseconds(5000));
  EXPECT_FALSE(supervisor->ready());
  EXPECT_EQ(supervisor->connection(), nullptr);
  EXPECT_EQ(supervisor->pid(), 0);
  EXPECT_FALSE(ProcessExists(pid)) << "the host outlived Stop() or was not reaped";
  EXPECT_EQ(supervisor->restarts(), 0) << "a stop is not a restart";
  const Status control = supervisor->Control(ipc::RequestKind::kLoad, {"m", 1, "spec"}, milliseconds(100));
  EXPECT_EQ(control.code(), StatusCode::kUnavailable) << control.ToString();
  EXPECT_NE(control.message().find("'liar'"), std::string::npos) << control.message();
  supervisor->Stop();  // idempotent
}

TEST_F(HostSupervisorTest, AHostBinaryThatCannotStartFailsTheFirstStartNamingTheHost) {
  auto supervisor = Make("/nonexistent/ensemble-model-host");
  supervisor->Start();
  EXPECT_FALSE(supervisor->WaitFirstStart());
  EXPECT_FALSE(supervisor->ready());
  const std::string error = supervisor->last_error();
  EXPECT_NE(error.find("'liar'"), std::string::npos) << error;
  supervisor->Stop();
}

}  // namespace
}  // namespace es
