#include "model_host/training/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#if defined(ES_TORCH_CUDA)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>
#include <exception>

namespace es {
namespace {

constexpr const char* kRankVariables[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                          "MASTER_ADDR", "MASTER_PORT"};

StatusOr<int> ReadIntVariable(const char* name, int min, int max) {
  const char* text = std::getenv(name);
  std::string value = text ? text : "";
  char* end = nullptr;
  const long parsed = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || parsed < min || parsed > max) {
    return Status::InvalidArgument("environment variable " + std::string(name) + "='" + value +
                                   "' is not an integer in [" + std::to_string(min) + ", " +
                                   std::to_string(max) + "]");
  }
  return static_cast<int>(parsed);
}

bool IsLoopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

}  // namespace

StatusOr<std::optional<RankEnv>> RankEnvFromEnvironment() {
  int set = 0;
  std::string missing;
  for (const char* name : kRankVariables) {
    if (std::getenv(name) != nullptr) {
      ++set;
    } else {
      missing += (missing.empty() ? "" : ", ") + std::string(name);
    }
  }
  if (set == 0) return std::optional<RankEnv>();
  if (!missing.empty()) {
    return Status::InvalidArgument(
        "some of torchrun's rank variables are set but not " + missing +
        "; set all of RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT "
        "or none (to let ensemble-train launch its own ranks)");
  }
  RankEnv env;
  const std::pair<const char*, int*> ints[] = {{"WORLD_SIZE", &env.world_size},
                                               {"LOCAL_WORLD_SIZE", &env.local_world_size}};
  for (const auto& [name, out] : ints) {
    StatusOr<int> value = ReadIntVariable(name, 1, 1 << 20);
    if (!value.ok()) return value.status();
    *out = *value;
  }
  StatusOr<int> rank = ReadIntVariable("RANK", 0, env.world_size - 1);
  if (!rank.ok()) return rank.status();
  env.rank = *rank;
  StatusOr<int> local_rank = ReadIntVariable("LOCAL_RANK", 0, env.local_world_size - 1);
  if (!local_rank.ok()) return local_rank.status();
  env.local_rank = *local_rank;
  StatusOr<int> port = ReadIntVariable("MASTER_PORT", 1, 65535);
  if (!port.ok()) return port.status();
  env.master_port = *port;
  env.master_addr = std::getenv("MASTER_ADDR");
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent != nullptr && std::string(agent) == "True";
  if (std::getenv("TORCHELASTIC_RESTART_COUNT") != nullptr) {
    StatusOr<int> restarts = ReadIntVariable("TORCHELASTIC_RESTART_COUNT", 0, 1 << 20);
    if (!restarts.ok()) return restarts.status();
    env.restart_count = *restarts;
  }
  return std::optional<RankEnv>(env);
}

std::vector<std::pair<std::string, std::string>> RankEnvironment(const RankEnv& env) {
  return {{"RANK", std::to_string(env.rank)},
          {"WORLD_SIZE", std::to_string(env.world_size)},
          {"LOCAL_RANK", std::to_string(env.local_rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(env.local_world_size)},
          {"MASTER_ADDR", env.master_addr},
          {"MASTER_PORT", std::to_string(env.master_port)},
          {"TORCHELASTIC_USE_AGENT_STORE", env.agent_store ? "True" : "False"},
          {"TORCHELASTIC_RESTART_COUNT", std::to_string(env.restart_count)}};
}

StatusOr<c10::intrusive_ptr<c10d::Store>> Rendezvous(const RankEnv& env, const std::string& run,
                                                     std::chrono::milliseconds timeout) {
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(env.master_port);
    options.isServer = env.rank == 0 && !env.agent_store;
    options.waitWorkers = false;  // the process group's own rendezvous waits for everyone
    options.timeout = timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    const std::string prefix = run + "/" + std::to_string(env.restart_count);
    return c10::intrusive_ptr<c10d::Store>(c10::make_intrusive<c10d::PrefixStore>(prefix, store));
  } catch (const std::exception& e) {
    return Status::Unavailable("rendezvous at " + env.master_addr + ":" +
                               std::to_string(env.master_port) + " failed: " + e.what());
  }
}

StatusOr<c10::intrusive_ptr<CollectiveGroup>> MakeProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
    const std::string& device_kind, const std::string& master_addr,
    std::chrono::milliseconds timeout) {
  try {
    if (device_kind == "cuda") {
#if defined(ES_TORCH_CUDA)
      // Async error handling turns a collective that failed or passed its
      // timeout on a dead peer into an exception instead of a hang. Mode 2
      // (CleanUpOnly): the watchdog aborts the communicators and our
      // Work::wait(timeout) throws, so the rank reports why and exits 1;
      // mode 1 (TearDown) would abort the process from the watchdog first.
      // The variable's name changed in torch 2.2: set both, keep the user's.
      setenv("NCCL_ASYNC_ERROR_HANDLING", "2", /*overwrite=*/0);
      setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", /*overwrite=*/0);
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;
      return c10::intrusive_ptr<CollectiveGroup>(
          c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options));
#else
      return Status::FailedPrecondition(
          "training on cuda needs a CUDA-enabled LibTorch; this build's LibTorch is CPU-only");
#endif
    }
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    // On one machine bind loopback: resolving the hostname may pick an
    // interface that is down or firewalled.
    options->devices.push_back(IsLoopback(master_addr)
                                   ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                   : c10d::ProcessGroupGloo::createDefaultDevice());
    options->threads = 2;
    return c10::intrusive_ptr<CollectiveGroup>(
        c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options));
  } catch (const std::exception& e) {
    return Status::Unavailable("joining the " + device_kind + " process group as rank " +
                               std::to_string(rank) + " of " + std::to_string(world_size) +
                               " failed: " + e.what());
  }
}

}  // namespace es
