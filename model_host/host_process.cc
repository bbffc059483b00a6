#include "model_host/host_process.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "config/server_config.h"
#include "ipc/channel.h"
#include "ipc/channel_ends.h"
#include "model_host/device_setup.h"
#include "model_host/request_executor.h"

namespace es {
namespace {

std::atomic<bool> g_stop{false};

void Fail(ipc::Channel& channel, const std::string& message) {
  std::fprintf(stderr, "ensemble-model-host: %s\n", message.c_str());
  auto& h = channel.header();
  const size_t n = std::min(message.size(), sizeof(h.host_message) - 1);
  std::memcpy(h.host_message, message.data(), n);
  h.host_message[n] = '\0';
  h.host_state.store(static_cast<uint32_t>(ipc::HostState::kFailed), std::memory_order_release);
}

Status PinToCpus(const HostConfig& host) {
  if (host.cpu_affinity.empty()) return Status::Ok();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : host.cpu_affinity) CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return Status::InvalidArgument("host '" + host.name + "': cannot pin to the configured CPUs");
  }
  return Status::Ok();
}

Status LoadModels(const ServerConfig& config, const HostConfig& host, RequestExecutor* executor) {
  for (const auto& [name, model] : config.models) {
    if (model.is_ensemble()) continue;
    bool mine = false;
    for (const auto& h : model.hosts) mine = mine || h == host.name;
    if (!mine) continue;
    auto runner = ModelRunner::Load(model, model.LatestVersion(), host.device);
    if (!runner.ok()) return runner.status();
    executor->AddModel(std::move(runner).value());
  }
  return Status::Ok();
}

void HeartbeatLoop(ipc::Channel* channel, pid_t router_pid) {
  auto& h = channel->header();
  while (!g_stop.load()) {
    h.heartbeat.fetch_add(1, std::memory_order_relaxed);
    if (h.stop_requested.load(std::memory_order_acquire) != 0) g_stop.store(true);
    if (getppid() != router_pid) _exit(3);  // orphaned: the router is gone
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  channel->requests().NotifyConsumer();  // wake executors so they see the stop
}

void ExecutorLoop(ipc::HostEnd* end, const RequestExecutor* executor) {
  ipc::RequestDesc request;
  ipc::CompletionDesc completion;
  while (!g_stop.load(std::memory_order_relaxed)) {
    if (!end->NextRequest(&request)) continue;
    executor->Execute(request, &completion);
    if (!end->Complete(completion, g_stop)) break;
  }
}

}  // namespace

int RunModelHost(const HostOptions& options) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGTERM, [](int) { g_stop.store(true); });
  signal(SIGINT, SIG_IGN);  // Ctrl-C goes to the router, which stops us in order

  auto attached = ipc::Channel::Attach(options.channel_fd);
  if (!attached.ok()) {
    std::fprintf(stderr, "ensemble-model-host: %s\n", attached.status().message().c_str());
    return 1;
  }
  ipc::Channel channel = std::move(attached).value();
  auto& header = channel.header();
  header.host_pid.store(getpid(), std::memory_order_release);
  const pid_t router_pid = header.router_pid;

  std::thread heartbeat(HeartbeatLoop, &channel, router_pid);
  auto fail = [&](const std::string& message) {
    Fail(channel, message);
    g_stop.store(true);
    heartbeat.join();
    return 1;
  };

  auto config = LoadServerConfig(options.config_path);
  if (!config.ok()) return fail(config.status().message());
  const HostConfig* host = config->FindHost(options.host_name);
  if (host == nullptr) return fail("host '" + options.host_name + "' is not in " + options.config_path);
  if (Status s = PinToCpus(*host); !s.ok()) return fail(s.message());
  if (Status s = SetUpDevice(*host); !s.ok()) return fail(s.message());

  RequestExecutor executor(&channel);
  if (Status s = LoadModels(*config, *host, &executor); !s.ok()) return fail(s.message());

  ipc::WaitPolicy wait;
  wait.spin = static_cast<int>(config->limits.channel_spin_polls);
  ipc::HostEnd end(&channel, wait);
  header.host_state.store(static_cast<uint32_t>(ipc::HostState::kReady), std::memory_order_release);
  std::fprintf(stderr, "ensemble-model-host: host '%s' (pid %d) ready with %zu model(s)\n",
               host->name.c_str(), getpid(), executor.model_count());

  std::vector<std::thread> executors;
  for (int i = 0; i < std::max(1, host->executors); ++i) executors.emplace_back(ExecutorLoop, &end, &executor);
  for (auto& t : executors) t.join();
  heartbeat.join();
  header.host_state.store(static_cast<uint32_t>(ipc::HostState::kStopping), std::memory_order_release);
  return 0;
}

}  // namespace es
