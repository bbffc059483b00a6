#include "training/local_launcher.h"

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

#include "common/launcher.h"
#include "common/steady_clock.h"
#include "training/process_group.h"

namespace es {
namespace {

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

// Where this launcher's ranks sit in the run: global ranks
// node * per_node + 0..per_node-1 of world.
struct NodeLayout {
  int per_node = 1;  // ranks on this machine: one per --devices entry
  int nnodes = 1;
  int node = 0;
  int world = 1;
  bool multi_node = false;
  std::string name;  // "node N of M: " before log lines, empty on one machine
};

NodeLayout LayoutOf(const TrainOptions& options, const std::vector<std::string>& devices) {
  NodeLayout layout;
  layout.per_node = static_cast<int>(devices.size());
  layout.nnodes = options.nnodes;
  layout.node = options.node_rank;
  layout.world = layout.nnodes * layout.per_node;
  layout.multi_node = layout.nnodes > 1;
  layout.name = layout.multi_node ? fmt::format("node {} of {}: ", layout.node, layout.nnodes) : "";
  return layout;
}

// The rendezvous every rank connects to, and the store that serves it when
// this launcher hosts one.
struct StoreEndpoint {
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  c10::intrusive_ptr<c10d::TCPStore> store;  // null on the nodes that host nothing
};

// On one machine a store on a free loopback port. Across machines node 0
// hosts it on MASTER_PORT (torch 1.13's TCPStore listens on every address of
// the machine), and the other nodes' ranks connect to MASTER_ADDR; their
// launchers host nothing.
StatusOr<StoreEndpoint> StartRendezvous(const TrainOptions& options, const TrainConfig& config,
                                        const NodeLayout& layout) {
  StoreEndpoint rendezvous;
  if (!layout.multi_node || layout.node == 0) {
    try {
      c10d::TCPStoreOptions store_options;
      store_options.port = static_cast<std::uint16_t>(layout.multi_node ? options.master_port : 0);  // 0: a free port
      store_options.isServer = true;
      store_options.waitWorkers = false;
      store_options.timeout = std::chrono::milliseconds(config.distributed.collective_timeout_ms);
      rendezvous.store = c10::make_intrusive<c10d::TCPStore>(
          layout.multi_node ? options.master_addr : rendezvous.master_addr, store_options);
    } catch (const std::exception& e) {
      return Status::Unavailable(
          fmt::format("{}cannot start the rendezvous store{}: {}", layout.name,
                      layout.multi_node ? fmt::format(" on port {}", options.master_port) : "", e.what()));
    }
    rendezvous.master_port = rendezvous.store->getPort();
  }
  if (layout.multi_node) {
    rendezvous.master_addr = options.master_addr;
    rendezvous.master_port = options.master_port;
    spdlog::info("{}ranks {}..{} of {}; {} store at {}:{}", layout.name, layout.node * layout.per_node,
                 (layout.node + 1) * layout.per_node - 1, layout.world,
                 layout.node == 0 ? "hosting the" : "node 0's", rendezvous.master_addr, rendezvous.master_port);
  }
  return rendezvous;
}

// SIGINT and SIGTERM are remembered, for WatchRanks to pass on to the ranks.
void CatchStopSignals() {
  struct sigaction action {};
  action.sa_handler = RememberSignal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

// Local rank `local`: this binary with the launcher's arguments plus
// torchrun's variables; a CPU rank pinned to its share of `cpus`.
LaunchSpec RankLaunchSpec(const NodeLayout& layout, const StoreEndpoint& rendezvous, int local,
                          const std::string& device, const std::vector<std::string>& argv,
                          const std::vector<int>& cpus) {
  RankEnv env;
  env.rank = layout.node * layout.per_node + local;
  env.world_size = layout.world;
  env.local_rank = local;
  env.local_world_size = layout.per_node;
  env.master_addr = rendezvous.master_addr;
  env.master_port = rendezvous.master_port;
  env.agent_store = true;
  LaunchSpec spec;
  spec.binary = ExecutableDir() + "/ensemble-train";
  spec.args = argv;
  spec.env = RankEnvironment(env);
  if (device.rfind("cpu", 0) == 0) {
    spec.cpu_affinity = CpusOfRank(cpus, local, layout.per_node);
    const std::string threads = std::to_string(std::max<size_t>(1, spec.cpu_affinity.size()));
    spec.env.emplace_back("ES_TRAIN_PINNED", "1");
    spec.env.emplace_back("OMP_NUM_THREADS", threads);
    spec.env.emplace_back("OPENBLAS_NUM_THREADS", threads);
  }
  return spec;
}

// Starts every local rank; when one cannot be started, the ones already
// running are killed and reaped before the error is returned.
StatusOr<std::vector<RankProcess>> SpawnRanks(const NodeLayout& layout, const StoreEndpoint& rendezvous,
                                              const std::vector<std::string>& devices,
                                              const std::vector<std::string>& argv) {
  const std::vector<int> cpus = OnlineCpus();
  std::vector<RankProcess> ranks;
  for (int local = 0; local < layout.per_node; ++local) {
    const int rank = layout.node * layout.per_node + local;
    StatusOr<pid_t> pid = Spawn(RankLaunchSpec(layout, rendezvous, local, devices[local], argv, cpus));
    if (!pid.ok()) {
      for (const RankProcess& started : ranks) kill(started.pid, SIGKILL);
      for (const RankProcess& started : ranks) waitpid(started.pid, nullptr, 0);
      return Status(pid.status().code(), "cannot start rank " + std::to_string(rank) + ": " + pid.status().message());
    }
    spdlog::info("{}rank {} on {}: pid {}", layout.name, rank, devices[local], *pid);
    ranks.push_back({rank, *pid, std::nullopt});
  }
  return ranks;
}

// Reaps the ranks that ended since the last call and logs each end. After
// the first failure the others get `patience` to notice it and exit: sets
// `kill_at` (when not set yet). Returns how many were reaped.
int ReapEnded(std::vector<RankProcess>& ranks, int running, std::chrono::milliseconds patience,
              std::optional<SteadyClock::time_point>& kill_at) {
  int reaped = 0;
  for (RankProcess& r : ranks) {
    if (r.wait_status) continue;
    int status = 0;
    if (waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
    r.wait_status = status;
    ++reaped;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      spdlog::info("rank {} finished", r.rank);
      continue;
    }
    spdlog::error("rank {} (pid {}) {}", r.rank, r.pid, DescribeWaitStatus(status));
    if (!kill_at && running - reaped > 0) {
      spdlog::error("stopping: the other ranks get {} ms to notice and exit", patience.count());
      kill_at = SteadyClock::now() + patience;
    }
  }
  return reaped;
}

// Polls the ranks until every one has ended: passes on a stop signal, and
// kills whoever outlives kill_at. Returns the signal passed on (0: none).
int WatchRanks(std::vector<RankProcess>& ranks, std::chrono::milliseconds patience) {
  std::optional<SteadyClock::time_point> kill_at;
  int forwarded = 0;
  int running = static_cast<int>(ranks.size());
  while (running > 0) {
    const int signal = g_forward_signal.exchange(0);
    if (signal != 0) {
      spdlog::warn("got signal {}; stopping the ranks", signal);
      for (const RankProcess& r : ranks) {
        if (!r.wait_status) kill(r.pid, signal);
      }
      forwarded = signal;
      if (!kill_at) kill_at = SteadyClock::now() + kGrace;
    }
    running -= ReapEnded(ranks, running, patience, kill_at);
    if (kill_at && SteadyClock::now() >= *kill_at) {
      for (const RankProcess& r : ranks) {
        if (!r.wait_status) {
          spdlog::error("rank {} (pid {}) still running; killing it", r.rank, r.pid);
          kill(r.pid, SIGKILL);
        }
      }
      kill_at = SteadyClock::now() + std::chrono::hours(24);  // killed: just reap
    }
    if (running > 0) std::this_thread::sleep_for(kPollInterval);
  }
  return forwarded;
}

// 0 when every rank succeeded; 2 when the ranks that failed all failed on
// usage (what a rank finds late, e.g. a checkpoint of other members);
// 128 + N after a forwarded signal N; 1 otherwise. Across machines a failure
// also says how to go on.
int ExitCode(const std::vector<RankProcess>& ranks, int forwarded, const TrainOptions& options,
             const NodeLayout& layout) {
  bool failed = false;
  bool all_usage = true;
  for (const RankProcess& r : ranks) {
    const int status = *r.wait_status;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    failed = true;
    all_usage = all_usage && WIFEXITED(status) && WEXITSTATUS(status) == 2;
  }
  if (!failed) return 0;
  if (layout.multi_node) {
    // The ranks' own lines say what failed (often a rank on another node:
    // "a peer rank died, or a collective passed its timeout", or node 0's
    // store that never answered).
    std::error_code ec;
    const bool checkpoint = std::filesystem::exists(CheckpointPath(options.out), ec);
    spdlog::error("{}training stopped (a rank here failed; see above). When every node is back, run the same "
                  "command on every node {}",
                  layout.name,
                  checkpoint ? "with --resume to continue from the last checkpoint"
                             : "again (no checkpoint was written: nothing to resume)");
  }
  if (forwarded != 0) return 128 + forwarded;
  return all_usage ? 2 : 1;
}

}  // namespace

int LaunchLocalRanks(const TrainOptions& options, const TrainConfig& config,
                     const std::vector<std::string>& argv) {
  spdlog::set_pattern("[%H:%M:%S.%e] [launcher] [%l] %v");
  StatusOr<std::vector<std::string>> devices = ParseDevices(options.devices);
  if (!devices.ok()) {
    spdlog::error("{}", devices.status().message());
    return 2;
  }
  const NodeLayout layout = LayoutOf(options, *devices);
  // Holds the store (node 0): it lives here until every rank has ended.
  StatusOr<StoreEndpoint> rendezvous = StartRendezvous(options, config, layout);
  if (!rendezvous.ok()) {
    spdlog::error("{}", rendezvous.status().message());
    return 1;
  }
  CatchStopSignals();
  StatusOr<std::vector<RankProcess>> ranks = SpawnRanks(layout, *rendezvous, *devices, argv);
  if (!ranks.ok()) {
    spdlog::error("{}", ranks.status().message());
    return 1;
  }
  const auto patience = std::chrono::milliseconds(config.distributed.collective_timeout_ms) + kGrace;
  const int forwarded = WatchRanks(*ranks, patience);
  return ExitCode(*ranks, forwarded, options, layout);
}

}  // namespace es
