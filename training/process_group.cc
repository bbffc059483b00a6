#include "training/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#if defined(ES_TORCH_CUDA)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <exception>

namespace es {
namespace {

constexpr const char* kRankVariables[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                          "MASTER_ADDR", "MASTER_PORT"};
constexpr const char* kPerProcessVariables[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};

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

// The local address this machine sends from to reach `host` (a UDP
// connect() sends nothing; the kernel picks the route and its source
// address), so the address the other machines can reach this rank at;
// "" when `host` does not resolve or has no route.
std::string LocalAddressTowards(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  // Any port: only the route matters.
  if (getaddrinfo(host.c_str(), "9", &hints, &found) != 0) return "";
  std::string address;
  for (addrinfo* a = found; a != nullptr && address.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    char text[INET6_ADDRSTRLEN] = {};
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&local), length, text, sizeof(text), nullptr, 0,
                    NI_NUMERICHOST) == 0) {
      address = text;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return address;
}

// The Gloo device: the interfaces in GLOO_SOCKET_IFNAME (as PyTorch does);
// else loopback on one machine; else the address of the route to
// MASTER_ADDR. Not the hostname's address, which is what Gloo's default
// would take: Debian maps the hostname to 127.0.1.1 (here 127.0.0.1), and
// the other machines would then be told to connect to their own loopback.
std::vector<std::shared_ptr<::gloo::transport::Device>> GlooDevices(const std::string& master_addr) {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  const char* interfaces = std::getenv("GLOO_SOCKET_IFNAME");
  if (interfaces != nullptr && *interfaces != '\0') {
    std::string list = interfaces;
    size_t begin = 0;
    while (begin <= list.size()) {
      const size_t comma = std::min(list.find(',', begin), list.size());
      if (comma > begin) {
        devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(list.substr(begin, comma - begin)));
      }
      begin = comma + 1;
    }
    if (!devices.empty()) return devices;
  }
  if (IsLoopback(master_addr)) {
    devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    return devices;
  }
  const std::string local = LocalAddressTowards(master_addr);
  devices.push_back(local.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                  : c10d::ProcessGroupGloo::createDeviceForHostname(local));
  return devices;
}

}  // namespace

StatusOr<std::optional<RankEnv>> RankEnvFromEnvironment() {
  // RANK, WORLD_SIZE, LOCAL_RANK or LOCAL_WORLD_SIZE make this process one
  // rank; MASTER_ADDR and MASTER_PORT alone are also a node launcher's
  // (NNODES > 1), so they do not.
  bool per_process = false;
  for (const char* name : kPerProcessVariables) per_process = per_process || std::getenv(name) != nullptr;
  if (!per_process) return std::optional<RankEnv>();
  std::string missing;
  for (const char* name : kRankVariables) {
    if (std::getenv(name) == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
  }
  if (!missing.empty()) {
    return Status::InvalidArgument(
        "some of torchrun's rank variables are set but not " + missing +
        "; set all of RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT "
        "or none of the first four (to let ensemble-train launch its own ranks)");
  }
  RankEnv env;
  const std::pair<const char*, int*> ints[] = {{"WORLD_SIZE", &env.world_size},
                                               {"LOCAL_WORLD_SIZE", &env.local_world_size}};
  for (const auto& [name, out] : ints) {
    ES_ASSIGN_OR_RETURN(int value, ReadIntVariable(name, 1, 1 << 20));
    *out = value;
  }
  ES_ASSIGN_OR_RETURN(int rank, ReadIntVariable("RANK", 0, env.world_size - 1));
  env.rank = rank;
  ES_ASSIGN_OR_RETURN(int local_rank, ReadIntVariable("LOCAL_RANK", 0, env.local_world_size - 1));
  env.local_rank = local_rank;
  ES_ASSIGN_OR_RETURN(int port, ReadIntVariable("MASTER_PORT", 1, 65535));
  env.master_port = port;
  env.master_addr = std::getenv("MASTER_ADDR");
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent != nullptr && std::string(agent) == "True";
  if (std::getenv("TORCHELASTIC_RESTART_COUNT") != nullptr) {
    ES_ASSIGN_OR_RETURN(int restarts, ReadIntVariable("TORCHELASTIC_RESTART_COUNT", 0, 1 << 20));
    env.restart_count = restarts;
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
    options->devices = GlooDevices(master_addr);
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
