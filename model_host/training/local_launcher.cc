#include "model_host/training/local_launcher.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "model_host/launcher.h"
#include "model_host/training/process_group.h"

namespace es {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kGrace = std::chrono::seconds(5);       // beyond the collective timeout
constexpr auto kPollInterval = std::chrono::milliseconds(50);

std::atomic<int> g_forward_signal{0};

void RememberSignal(int signal) { g_forward_signal.store(signal); }

std::vector<int> OnlineCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
    }
  }
  return cpus;
}

std::vector<int> CpusOfRank(const std::vector<int>& cpus, int rank, int ranks) {
  std::vector<int> mine;
  if (cpus.empty()) return mine;
  if (static_cast<size_t>(ranks) >= cpus.size()) return {cpus[rank % cpus.size()]};
  for (size_t i = rank; i < cpus.size(); i += ranks) mine.push_back(cpus[i]);
  return mine;
}

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;
  std::optional<int> wait_status;  // set once reaped
};

}  // namespace

int LaunchLocalRanks(const TrainOptions& options, const TrainConfig& config,
                     const std::vector<std::string>& argv) {
  spdlog::set_pattern("[%H:%M:%S.%e] [launcher] [%l] %v");
  StatusOr<std::vector<std::string>> devices = ParseDevices(options.devices);
  if (!devices.ok()) {
    spdlog::error("{}", devices.status().message());
    return 2;
  }
  // This node's ranks: global ranks node_rank * per_node + local rank.
  const int per_node = static_cast<int>(devices->size());
  const int nnodes = options.nnodes;
  const int node = options.node_rank;
  const int world = nnodes * per_node;
  const bool multi_node = nnodes > 1;
  const std::string node_name = multi_node ? fmt::format("node {} of {}: ", node, nnodes) : "";
  // The store: on one machine a free loopback port. Across machines node
  // 0 hosts it on MASTER_PORT (torch 1.13's TCPStore listens on every
  // address of the machine), and the other nodes' ranks connect to
  // MASTER_ADDR; their launchers host nothing.
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  c10::intrusive_ptr<c10d::TCPStore> store;
  if (!multi_node || node == 0) {
    try {
      c10d::TCPStoreOptions store_options;
      store_options.port = static_cast<std::uint16_t>(multi_node ? options.master_port : 0);  // 0: a free port
      store_options.isServer = true;
      store_options.waitWorkers = false;
      store_options.timeout = std::chrono::milliseconds(config.distributed.collective_timeout_ms);
      store = c10::make_intrusive<c10d::TCPStore>(multi_node ? options.master_addr : master_addr, store_options);
    } catch (const std::exception& e) {
      spdlog::error("{}cannot start the rendezvous store{}: {}", node_name,
                    multi_node ? fmt::format(" on port {}", options.master_port) : "", e.what());
      return 1;
    }
    master_port = store->getPort();
  }
  if (multi_node) {
    master_addr = options.master_addr;
    master_port = options.master_port;
    spdlog::info("{}ranks {}..{} of {}; {} store at {}:{}", node_name, node * per_node, (node + 1) * per_node - 1,
                 world, node == 0 ? "hosting the" : "node 0's", master_addr, master_port);
  }

  struct sigaction action {};
  action.sa_handler = RememberSignal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  const std::vector<int> cpus = OnlineCpus();
  std::vector<RankProcess> ranks;
  for (int local = 0; local < per_node; ++local) {
    const int rank = node * per_node + local;
    RankEnv env;
    env.rank = rank;
    env.world_size = world;
    env.local_rank = local;
    env.local_world_size = per_node;
    env.master_addr = master_addr;
    env.master_port = master_port;
    env.agent_store = true;
    LaunchSpec spec;
    spec.binary = ExecutableDir() + "/ensemble-train";
    spec.args = argv;
    spec.env = RankEnvironment(env);
    const bool cpu = (*devices)[local].rfind("cpu", 0) == 0;
    if (cpu) {
      spec.cpu_affinity = CpusOfRank(cpus, local, per_node);
      const std::string threads = std::to_string(std::max<size_t>(1, spec.cpu_affinity.size()));
      spec.env.emplace_back("ES_TRAIN_PINNED", "1");
      spec.env.emplace_back("OMP_NUM_THREADS", threads);
      spec.env.emplace_back("OPENBLAS_NUM_THREADS", threads);
    }
    StatusOr<pid_t> pid = Spawn(spec);
    if (!pid.ok()) {
      spdlog::error("cannot start rank {}: {}", rank, pid.status().message());
      for (const RankProcess& started : ranks) kill(started.pid, SIGKILL);
      for (const RankProcess& started : ranks) waitpid(started.pid, nullptr, 0);
      return 1;
    }
    spdlog::info("{}rank {} on {}: pid {}", node_name, rank, (*devices)[local], *pid);
    ranks.push_back({rank, *pid, std::nullopt});
  }

  const auto patience =
      std::chrono::milliseconds(config.distributed.collective_timeout_ms) + kGrace;
  std::optional<Clock::time_point> kill_at;
  int forwarded = 0;
  int running = per_node;
  while (running > 0) {
    const int signal = g_forward_signal.exchange(0);
    if (signal != 0) {
      spdlog::warn("got signal {}; stopping the ranks", signal);
      for (const RankProcess& r : ranks) {
        if (!r.wait_status) kill(r.pid, signal);
      }
      forwarded = signal;
      if (!kill_at) kill_at = Clock::now() + kGrace;
    }
    for (RankProcess& r : ranks) {
      if (r.wait_status) continue;
      int status = 0;
      if (waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
      r.wait_status = status;
      --running;
      const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (clean) {
        spdlog::info("rank {} finished", r.rank);
      } else {
        spdlog::error("rank {} (pid {}) {}", r.rank, r.pid, DescribeWaitStatus(status));
        if (!kill_at && running > 0) {
          spdlog::error("stopping: the other ranks get {} ms to notice and exit",
                        std::chrono::duration_cast<std::chrono::milliseconds>(patience).count());
          kill_at = Clock::now() + patience;
        }
      }
    }
    if (kill_at && Clock::now() >= *kill_at) {
      for (const RankProcess& r : ranks) {
        if (!r.wait_status) {
          spdlog::error("rank {} (pid {}) still running; killing it", r.rank, r.pid);
          kill(r.pid, SIGKILL);
        }
      }
      kill_at = Clock::now() + std::chrono::hours(24);  // killed: just reap
    }
    if (running > 0) std::this_thread::sleep_for(kPollInterval);
  }
  // 0 when every rank succeeded; 2 when the ranks that failed all failed on
  // usage (what a rank finds late, e.g. a checkpoint of other members);
  // 128 + N after a forwarded signal N; 1 otherwise.
  bool failed = false;
  bool all_usage = true;
  for (const RankProcess& r : ranks) {
    const int status = *r.wait_status;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    failed = true;
    all_usage = all_usage && WIFEXITED(status) && WEXITSTATUS(status) == 2;
  }
  if (!failed) return 0;
  if (multi_node) {
    // The ranks' own lines say what failed (often a rank on another node:
    // "a peer rank died, or a collective passed its timeout", or node 0's
    // store that never answered).
    std::error_code ec;
    const bool checkpoint = std::filesystem::exists(CheckpointPath(options.out), ec);
    spdlog::error("{}training stopped (a rank here failed; see above). When every node is back, run the same "
                  "command on every node {}",
                  node_name,
                  checkpoint ? "with --resume to continue from the last checkpoint"
                             : "again (no checkpoint was written: nothing to resume)");
  }
  if (forwarded != 0) return 128 + forwarded;
  return all_usage ? 2 : 1;
}

}  // namespace es
