// ensemble-train across machines: two network namespaces joined by a veth
// pair stand for two machines (10.77.0.1 and 10.77.0.2, each with its own
// loopback), and one `ensemble-train` node runs in each, two ranks per node
// (the real binary, real Gloo over the veth, the real c10d store hosted by
// node 0's launcher).
//
//   two machines = one     the 4-rank run ends with identical parameters on
//                          every rank (report.json's parameter_divergence,
//                          a MAX/MIN all-reduce over all ranks) and the
//                          same weights as a 1-rank run with the same seed
//                          and global batch, within float tolerance
//   a node killed          the other node's launcher exits non-zero within
//                          the collective timeout naming the failure;
//                          --resume on both nodes completes the run
//   a node vanished        its link cut first (no FIN ever arrives): the
//                          other node ends on the collective timeout
//
// Needs root and `ip netns` (CI runs as root); skipped otherwise, saying
// why. Namespaces are named after the test's pid, so parallel runs do not
// collide, and are deleted (with the veth pair) whatever the outcome.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <torch/script.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "tests/common/temp_dir.h"
#include "tests/common/test_paths.h"
#include "tests/training/integration/background_process.h"
#include "tests/training/training_test_util.h"

namespace es::training_test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kCollectiveTimeoutMs = 3000;
constexpr const char* kNode0Address = "10.77.0.1";
constexpr const char* kNode1Address = "10.77.0.2";
// Inside a fresh namespace nothing else listens: a fixed port cannot collide.
constexpr const char* kMasterPort = "29500";

// `optimizer`: sgd (momentum) follows the same trajectory on any number of
// ranks to within float noise (1e-7 here after 48 steps); Adam divides by
// the root of tiny second moments and blows that noise up to ~1e-3.
std::string Config(int epochs, int checkpoint_every, const std::string& optimizer = "adam") {
  return "run: multi-machine\n"
         "data: {dataset: synthetic, synthetic_train_rows: 512, synthetic_test_rows: 128}\n"
         "training: {epochs: " +
         std::to_string(epochs) + ", batch_size: 32, optimizer: " + optimizer +
         ", learning_rate: " + (optimizer == "sgd" ? "0.05" : "0.003") +
         ", schedule: constant, seed: 4}\n"
         "distributed: {collective_timeout_ms: " +
         std::to_string(kCollectiveTimeoutMs) +
         "}\n"
         "checkpoint: {every_steps: " +
         std::to_string(checkpoint_every) +
         "}\n"
         "members:\n"
         "  - {name: syn_mlp, architecture: mlp, seed: 1}\n"
         "  - {name: syn_cnn, architecture: cnn, seed: 2}\n"
         "ensemble: {name: syn_ensemble}\n";
}

std::string ReadText(const fs::path& path) { return testing::ReadWholeFile(path); }

// A child process in its own process group, its output in a log file;
// SIGKILLed (with its group) when the object goes.
using Process = testing::BackgroundProcess;

// Two "machines": network namespaces joined by a veth pair.
class MultiMachineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces (CI runs as root)";
    if (IpBinary() == "ip") GTEST_SKIP() << "needs iproute2's ip (apt-get install iproute2)";
    const std::string id = std::to_string(getpid());
    namespaces_ = {"esmm" + id + "n0", "esmm" + id + "n1"};
    links_ = {"esmm" + id + "v0", "esmm" + id + "v1"};  // at most 15 characters
    std::string output;
    if (Ip({"netns", "add", namespaces_[0]}, &output) != 0) {
      namespaces_.clear();
      GTEST_SKIP() << "ip netns add failed (no iproute2 or no namespaces here): " << output;
    }
    const std::vector<std::vector<std::string>> steps = {
        {"netns", "add", namespaces_[1]},
        {"link", "add", links_[0], "type", "veth", "peer", "name", links_[1]},
        {"link", "set", links_[0], "netns", namespaces_[0]},
        {"link", "set", links_[1], "netns", namespaces_[1]},
        {"-n", namespaces_[0], "addr", "add", std::string(kNode0Address) + "/24", "dev", links_[0]},
        {"-n", namespaces_[1], "addr", "add", std::string(kNode1Address) + "/24", "dev", links_[1]},
        {"-n", namespaces_[0], "link", "set", "lo", "up"},
        {"-n", namespaces_[1], "link", "set", "lo", "up"},
        {"-n", namespaces_[0], "link", "set", links_[0], "up"},
        {"-n", namespaces_[1], "link", "set", links_[1], "up"},
    };
    for (const std::vector<std::string>& step : steps) {
      ASSERT_EQ(Ip(step, &output), 0) << "ip " << ::testing::PrintToString(step) << ": " << output;
    }
  }

  void TearDown() override {
    nodes_.clear();  // kills what is still running
    std::string output;
    for (const std::string& ns : namespaces_) {
      KillNamespace(ns);
      Ip({"netns", "delete", ns}, &output);  // takes its end of the veth pair, and so the pair
    }
    if (!links_.empty()) Ip({"link", "delete", links_[0]}, &output);  // if setup stopped before moving it
  }

  static int Ip(const std::vector<std::string>& args, std::string* output) {
    std::vector<std::string> argv{IpBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    Process ip(argv, TempDirHolder().path() / "ip.log");
    const int code = ip.ExitCode(seconds(30));
    *output = ip.Log();
    return code;
  }
  // iproute2's ip (root's PATH has /usr/sbin; ctest's may not).
  static std::string IpBinary() {
    for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
      if (access(path, X_OK) == 0) return path;
    }
    return "ip";
  }
  static es::testing::TempDir& TempDirHolder() {
    static es::testing::TempDir dir("es_mm_ip_");
    return dir;
  }

  // Every process in the namespace, SIGKILLed: the machine dies.
  static void KillNamespace(const std::string& ns) {
    std::string pids;
    Ip({"netns", "pids", ns}, &pids);
    std::istringstream in(pids);
    for (pid_t pid = 0; in >> pid;) kill(pid, SIGKILL);
  }

  // Starts node `node` (0 or 1) of 2 in its namespace. Node 0 is told its
  // place through torchrun's variables, node 1 through the flags.
  Process& StartNode(int node, const std::vector<std::string>& args, const std::string& log_name) {
    std::vector<std::string> argv{IpBinary(), "netns", "exec", namespaces_[node]};
    if (node == 0) {
      argv.insert(argv.end(), {"env", "NNODES=2", "NODE_RANK=0", "MASTER_ADDR=" + std::string(kNode0Address),
                               "MASTER_PORT=" + std::string(kMasterPort), es::test_paths::kTrainBin});
    } else {
      argv.insert(argv.end(), {es::test_paths::kTrainBin, "--nnodes", "2", "--node-rank", "1", "--master-addr",
                               kNode0Address, "--master-port", kMasterPort});
    }
    argv.insert(argv.end(), args.begin(), args.end());
    nodes_.push_back(std::make_unique<Process>(argv, dir_.path() / log_name));
    return *nodes_.back();
  }

  // Kills node 1 once the run has written a checkpoint, after cutting its link
  // first when `vanish` (a machine gone without closing its connections).
  // Returns node 0's log; *seconds_to_exit: from the kill to node 0's exit.
  std::string KillNodeOne(Process& node0, Process& node1, const fs::path& out, bool vanish, double* seconds_to_exit) {
    EXPECT_TRUE(node0.WaitForLog("epoch 3/", milliseconds(90000))) << node0.Log() << node1.Log();
    EXPECT_TRUE(fs::exists(out / ".checkpoints" / "latest.pt"));
    std::string output;
    if (vanish) {
      EXPECT_EQ(Ip({"-n", namespaces_[1], "link", "set", links_[1], "down"}, &output), 0) << output;
    }
    const auto killed_at = Clock::now();
    KillNamespace(namespaces_[1]);
    EXPECT_EQ(node1.ExitCode(seconds(10)), -1) << node1.Log();
    std::optional<int> status = node0.Wait(milliseconds(kCollectiveTimeoutMs + 15000));
    *seconds_to_exit = std::chrono::duration<double>(Clock::now() - killed_at).count();
    EXPECT_TRUE(status.has_value()) << "node 0 still runs " << *seconds_to_exit << " s after node 1 died\n"
                                    << node0.Log();
    if (status) {
      EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << node0.Log();
    }
    return node0.Log();
  }

  es::testing::TempDir dir_;
  std::vector<std::string> namespaces_;
  std::vector<std::string> links_;
  std::vector<std::unique_ptr<Process>> nodes_;
};

std::vector<torch::jit::Module> LoadMembers(const fs::path& repository) {
  std::vector<torch::jit::Module> members;
  for (const char* name : {"syn_mlp", "syn_cnn"})
    members.push_back(torch::jit::load(repository / name / "1" / "model.pt"));
  return members;
}

nlohmann::json ReadReport(const fs::path& out) {
  return nlohmann::json::parse(ReadText(out / "report.json"), nullptr, /*allow_exceptions=*/false);
}

TEST_F(MultiMachineTest, TwoMachinesTrainAsOneMachineDoes) {
  const std::string config = dir_.Write("train.yaml", Config(3, 16, "sgd"));
  const fs::path out = dir_.path() / "out";
  const std::vector<std::string> args{"--config", config, "--devices", "cpu:2", "--out", out.string()};
  const auto start = Clock::now();
  Process& node0 = StartNode(0, args, "node0.log");
  Process& node1 = StartNode(1, args, "node1.log");
  ASSERT_EQ(node0.ExitCode(seconds(120)), 0) << node0.Log() << node1.Log();
  ASSERT_EQ(node1.ExitCode(seconds(30)), 0) << node1.Log();
  std::cout << "two nodes of two ranks: " << std::chrono::duration<double>(Clock::now() - start).count() << " s\n";
  EXPECT_NE(node0.Log().find("node 0 of 2: ranks 0..1 of 4; hosting the store at 10.77.0.1:29500"), std::string::npos)
      << node0.Log();
  EXPECT_NE(node1.Log().find("node 1 of 2: rank 3 on cpu:1"), std::string::npos) << node1.Log();
  EXPECT_NE(node1.Log().find("rank 2 of 4"), std::string::npos) << node1.Log();
  EXPECT_NE(node0.Log().find("all 4 rank(s) hold identical parameters"), std::string::npos) << node0.Log();

  const nlohmann::json report = ReadReport(out);
  ASSERT_FALSE(report.is_discarded()) << node0.Log();
  EXPECT_EQ(report["world_size"], 4);
  EXPECT_EQ(report["steps"], 3 * (512 / 32));
  // MAX minus MIN over all four ranks of every parameter.
  EXPECT_EQ(report["parameter_divergence"].get<double>(), 0.0) << report.dump(2);

  // One machine, one rank, the same seed and global batch (loopback, here).
  const fs::path single = dir_.path() / "single";
  Process one({es::test_paths::kTrainBin, "--config", config, "--devices", "cpu:1", "--out", single.string()},
              dir_.path() / "single.log");
  ASSERT_EQ(one.ExitCode(seconds(120)), 0) << one.Log();
  EXPECT_EQ(ReadReport(single)["world_size"], 1);
  const at::Tensor four = FlatParameters(LoadMembers(out));
  const at::Tensor reference = FlatParameters(LoadMembers(single));
  ASSERT_EQ(four.numel(), reference.numel());
  const double diff = (four - reference).abs().max().item<double>();
  EXPECT_LE(diff, 1e-5);
  EXPECT_GT(report["ensemble"]["accuracy"].get<double>(), 0.3) << "did it train at all? " << report.dump(2);
  std::cout << "max |4 ranks on 2 machines - 1 rank| over " << four.numel() << " parameters: " << diff << "\n";
}

TEST_F(MultiMachineTest, AKilledNodeStopsTheOtherAndResumeOnBothCompletesTheRun) {
  const int epochs = 40;  // 640 steps: still training when node 1 is killed
  const std::string config = dir_.Write("train.yaml", Config(epochs, 16));
  const fs::path out = dir_.path() / "out";
  const std::vector<std::string> args{"--config", config, "--devices", "cpu:2", "--out", out.string()};
  Process& node0 = StartNode(0, args, "node0.log");
  Process& node1 = StartNode(1, args, "node1.log");
  double seconds_to_exit = 0;
  const std::string log = KillNodeOne(node0, node1, out, /*vanish=*/false, &seconds_to_exit);
  // Its connections closed: the next all-reduce fails at once.
  EXPECT_LE(seconds_to_exit, kCollectiveTimeoutMs / 1000.0 + 2.0) << log;
  EXPECT_NE(log.find("gradient all-reduce failed (a peer rank died, or a collective passed its timeout)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("node 0 of 2: training stopped"), std::string::npos) << log;
  EXPECT_NE(log.find("with --resume"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(out / "report.json")) << "the run cannot have finished";
  std::cout << "node 0 exited " << seconds_to_exit << " s after node 1 was killed\n";

  std::vector<std::string> resume = args;
  resume.push_back("--resume");
  Process& again0 = StartNode(0, resume, "resume0.log");
  Process& again1 = StartNode(1, resume, "resume1.log");
  ASSERT_EQ(again0.ExitCode(seconds(120)), 0) << again0.Log() << again1.Log();
  ASSERT_EQ(again1.ExitCode(seconds(30)), 0) << again1.Log();
  const std::string resumed = again0.Log();
  const size_t at = resumed.find("resumed from " + (out / ".checkpoints" / "latest.pt").string() + ": step ");
  ASSERT_NE(at, std::string::npos) << resumed;
  const int64_t step = std::stoll(resumed.substr(resumed.find("step ", at) + 5));
  const int64_t total = epochs * (512 / 32);
  EXPECT_GT(step, 0);
  EXPECT_LT(step, total) << "resumed at the end: node 1 was killed too late to test anything";
  const nlohmann::json report = ReadReport(out);
  ASSERT_FALSE(report.is_discarded()) << resumed;
  EXPECT_EQ(report["steps"], total);
  EXPECT_EQ(report["world_size"], 4);
  EXPECT_EQ(report["parameter_divergence"].get<double>(), 0.0);
  EXPECT_GT(report["ensemble"]["accuracy"].get<double>(), 0.5) << report.dump(2);
  std::cout << "resumed at step " << step << " of " << total << "\n";
}

TEST_F(MultiMachineTest, AVanishedNodeStopsTheOtherOnTheCollectiveTimeout) {
  const std::string config = dir_.Write("train.yaml", Config(40, 16));
  const fs::path out = dir_.path() / "out";
  const std::vector<std::string> args{"--config", config, "--devices", "cpu:2", "--out", out.string()};
  Process& node0 = StartNode(0, args, "node0.log");
  Process& node1 = StartNode(1, args, "node1.log");
  double seconds_to_exit = 0;
  const std::string log = KillNodeOne(node0, node1, out, /*vanish=*/true, &seconds_to_exit);
  // Nothing arrives from node 1 any more: only the timeout can tell (the
  // bound leaves time for the ranks to exit on a loaded machine).
  EXPECT_LE(seconds_to_exit, kCollectiveTimeoutMs / 1000.0 + 4.0) << log;
  EXPECT_NE(log.find("Operation timed out"), std::string::npos) << log;
  EXPECT_NE(log.find("a peer rank died, or a collective passed its timeout"), std::string::npos) << log;
  EXPECT_NE(log.find("node 0 of 2: training stopped"), std::string::npos) << log;
  std::cout << "node 0 exited " << seconds_to_exit << " s after node 1 vanished (collective timeout "
            << kCollectiveTimeoutMs << " ms)\n";
}

TEST_F(MultiMachineTest, ANodeWhoseNodeZeroNeverComesFailsNamingTheStore) {
  const std::string config = dir_.Write("train.yaml", Config(1, 16));
  Process& node1 = StartNode(1, {"--config", config, "--devices", "cpu:2", "--out", dir_.Path("out")}, "node1.log");
  // Each rank waits the collective timeout for the store; the launcher then
  // gives the other rank that long again at most.
  ASSERT_EQ(node1.ExitCode(milliseconds(2 * kCollectiveTimeoutMs + 20000)), 1) << node1.Log();
  const std::string log = node1.Log();
  EXPECT_NE(log.find("rendezvous at 10.77.0.1:29500 failed"), std::string::npos) << log;
  EXPECT_NE(log.find("node 1 of 2: training stopped"), std::string::npos) << log;
  EXPECT_NE(log.find("no checkpoint was written: nothing to resume"), std::string::npos) << log;
}

// Without namespaces: the node flags are checked before anything starts.
TEST(MultiMachineUsageTest, BadNodeSettingsExitTwoNamingThem) {
  es::testing::TempDir dir;
  const std::string config = dir.Write("train.yaml", Config(1, 16));
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const Case cases[] = {
      {{"--nnodes", "2"}, "--nnodes 2 needs --master-addr (MASTER_ADDR)"},
      {{"--nnodes", "2", "--node-rank", "2", "--master-addr", "10.77.0.1"},
       "--node-rank (NODE_RANK) 2 is not below --nnodes (NNODES) 2"},
      {{"--nnodes", "0"}, "--nnodes"},
      // 32 rows over 2 machines x 3 ranks.
      {{"--nnodes", "2", "--master-addr", "10.77.0.1", "--devices", "cpu:3"}, "does not split evenly over 6 ranks"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv{es::test_paths::kTrainBin, "--config", config, "--out", dir.Path("out")};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    Process train(argv, dir.path() / "train.log");
    EXPECT_EQ(train.ExitCode(seconds(60)), 2) << train.Log();
    EXPECT_NE(train.Log().find(c.needle), std::string::npos) << "wanted '" << c.needle << "' in:\n" << train.Log();
  }
  EXPECT_FALSE(fs::exists(dir.path() / "out")) << "nothing may start on bad node settings";
}

}  // namespace
}  // namespace es::training_test
