#include "model_host/host_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>
#if defined(ES_TORCH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "common/allocator.h"
#include "common/log_setup.h"
#include "common/steady_clock.h"
#include "ipc/channel.h"
#include "ipc/channel_ends.h"
#include "model_host/device_setup.h"
#include "model_host/model_loader.h"
#include "model_host/request_executor.h"
#include "torch_utils/blas_kernels.h"

namespace es {
namespace {

std::atomic<bool> g_stop{false};
// The CUDA device index once models are loaded (the CUDA context exists), -1
// before that and on CPU hosts: the heartbeat thread reads device memory only then.
std::atomic<int> g_cuda_device{-1};

// One line per event on stderr (the router's log), with the settings the
// router passes in ES_LOG_SETTINGS (common/log_setup.h; later changes come
// as control requests), else at SPDLOG_LEVEL's level when it is set.
// getenv is not thread-safe against setenv; this runs first, before the
// host starts any thread, and nothing here sets the environment.
void SetUpLogging(const std::string& host_name) {
  InstallProcessLogger("ensemble-model-host", "host " + host_name);
  if (const char* encoded = std::getenv("ES_LOG_SETTINGS")) {  // NOLINT(concurrency-mt-unsafe): see above
    StatusOr<LogSettings> settings = DecodeLogSettings(encoded);
    if (settings.ok()) {
      ApplyLogSettings(*settings);
    } else {
      spdlog::warn("ES_LOG_SETTINGS ignored: {}", settings.status().message());
    }
  } else if (const char* level = std::getenv("SPDLOG_LEVEL")) {  // NOLINT(concurrency-mt-unsafe): see above
    StatusOr<LogSettings> settings = SettingsForLevel(level);
    if (settings.ok()) ApplyLogSettings(*settings);
  }
}

// host_message: while starting, what the host is doing (the router quotes
// it if the start-up times out); on failure, why it failed.
void SetHostMessage(ipc::Channel& channel, const std::string& message) {
  auto& h = channel.header();
  const size_t n = std::min(message.size(), sizeof(h.host_message) - 1);
  std::memcpy(h.host_message, message.data(), n);
  h.host_message[n] = '\0';
}

void Fail(ipc::Channel& channel, const std::string& message) {
  spdlog::error("{}", message);
  SetHostMessage(channel, message);
  channel.header().host_state.store(static_cast<uint32_t>(ipc::HostState::kFailed), std::memory_order_release);
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

uint64_t ResidentBytes() {
  // statm: size resident shared ... in pages. A plain read: no stdio buffer.
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  char* rest = nullptr;
  std::strtoull(buf, &rest, 10);  // total program size: skipped
  const unsigned long long pages = std::strtoull(rest, nullptr, 10);
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

uint64_t CpuNs() {
  timespec ts{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// LibTorch's CUDA caching allocator: bytes in live tensors and bytes it holds
// from the driver. Only in CUDA builds, only once the device is set up.
void DeviceMemory(uint64_t* allocated, uint64_t* reserved) {
  *allocated = 0;
  *reserved = 0;
#if defined(ES_TORCH_CUDA)
  const int device = g_cuda_device.load(std::memory_order_relaxed);
  if (device < 0) return;
  try {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    constexpr size_t kAggregate = 0;  // StatType::AGGREGATE: all pools together
    *allocated = static_cast<uint64_t>(stats.allocated_bytes[kAggregate].current);
    *reserved = static_cast<uint64_t>(stats.reserved_bytes[kAggregate].current);
  } catch (const std::exception& e) {
    spdlog::debug("device memory statistics unavailable: {}", e.what());
  }
#endif
}

// The figures of ipc::HostMetricsBlock, refreshed with every heartbeat.
void PublishMetrics(ipc::HostMetricsBlock* m) {
  uint64_t allocated = 0, reserved = 0;
  DeviceMemory(&allocated, &reserved);
  m->resident_bytes.store(ResidentBytes(), std::memory_order_relaxed);
  m->cpu_ns.store(CpuNs(), std::memory_order_relaxed);
  m->device_allocated_bytes.store(allocated, std::memory_order_relaxed);
  m->device_reserved_bytes.store(reserved, std::memory_order_relaxed);
  m->publishes.fetch_add(1, std::memory_order_release);
}

// "cuda:N" -> N; -1 for anything else.
int CudaIndex(const std::string& device) {
  if (device.rfind("cuda", 0) != 0) return -1;
  const size_t colon = device.find(':');
  return colon == std::string::npos ? 0 : std::atoi(device.c_str() + colon + 1);
}

void HeartbeatLoop(ipc::Channel* channel, pid_t router_pid) {
  auto& h = channel->header();
  while (!g_stop.load()) {
    h.heartbeat.fetch_add(1, std::memory_order_relaxed);
    PublishMetrics(&h.host_metrics);
    if (h.stop_requested.load(std::memory_order_acquire) != 0) g_stop.store(true);
    if (getppid() != router_pid) _exit(3);  // orphaned: the router is gone
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  channel->requests().NotifyConsumer();  // wake executors so they see the stop
}

// `slot` tells the router's watchdog which request this executor computes
// and since when (ipc::ExecutorSlot): a forward that never returns is seen
// there, while the heartbeat thread goes on beating.
void ExecutorLoop(ipc::HostEnd* end, const RequestExecutor* executor, ModelLoader* loader,
                  const std::string* device, ipc::ExecutorSlot* slot, int index) {
  std::string note;
  ExecutorDeviceScope device_scope(*device, &note);  // CUDA: this thread's own stream
  if (!note.empty()) spdlog::debug("executor {}: {}", index, note);
  ipc::RequestDesc request;
  ipc::CompletionDesc completion;
  while (!g_stop.load(std::memory_order_relaxed)) {
    if (!end->NextRequest(&request)) continue;
    if (request.kind != static_cast<uint32_t>(ipc::RequestKind::kInfer)) {
      loader->Enqueue(request);  // answered by the loader's thread
      continue;
    }
    const uint64_t received = SteadyNs(SteadyClock::now());
    slot->started_ns.store(received, std::memory_order_relaxed);
    slot->request_id.store(request.request_id, std::memory_order_release);
    executor->Execute(request, &completion);
    completion.received_ns = received;
    slot->request_id.store(0, std::memory_order_release);
    // `request` may say the router submits more right behind (an
    // ensemble's member calls), whose completions wake it: then this one
    // need not (ipc::HostEnd::Complete).
    if (!end->Complete(completion, g_stop, &request)) break;
  }
  end->WakeRouterIfHeld();  // stopping: nothing of a burst is coming
}

}  // namespace

int RunModelHost(const HostOptions& options) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // SIGTERM and Ctrl-C reach the whole process group (systemd, a terminal,
  // `kill -- -PGID`): the router drains first and then stops its hosts
  // through the channel (stop_requested), so a host must not die before its
  // in-flight work is answered. The router's own death still ends us
  // (PR_SET_PDEATHSIG above), and SIGKILL always works.
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  SetUpLogging(options.host.name);
  // The BLAS kernels' note (host_main), in the log's own format.
  if (const std::string note = TakeBlasKernelsNote(); !note.empty()) spdlog::info("{}", note);

  auto attached = ipc::Channel::Attach(options.channel_fd);
  if (!attached.ok()) {
    spdlog::error("{}", attached.status().message());
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

  const HostConfig* host = &options.host;
  if (Status s = PinToCpus(*host); !s.ok()) return fail(s.message());
  if (Status s = SetUpDevice(*host); !s.ok()) return fail(s.message());

  std::string arena_note;
  const ArenaRegistration arena = ArenaRegistration::ForHost(*host, &channel, &arena_note);
  if (host->device != "cpu") spdlog::info("{}", arena_note);

  RequestExecutor executor(&channel);
  SetHostMessage(channel, "");
  g_cuda_device.store(CudaIndex(host->device));

  ipc::WaitPolicy wait;
  wait.spin = static_cast<int>(options.spin_polls);
  ipc::HostEnd end(&channel, wait);
  ModelLoader loader(&end, &executor, host->device, &g_stop);
  header.host_state.store(static_cast<uint32_t>(ipc::HostState::kReady), std::memory_order_release);
  spdlog::info("ready (pid {}, device {}, {} executor(s), malloc: {}); models come from the router", getpid(),
               host->device, std::max(1, host->executors), AllocatorInUse());

  std::vector<std::thread> executors;
  const int count = std::clamp(host->executors, 1, static_cast<int>(ipc::kMaxExecutors));
  for (int i = 0; i < count; ++i) {
    executors.emplace_back(ExecutorLoop, &end, &executor, &loader, &host->device, &header.executors[i], i);
  }
  for (auto& t : executors) t.join();
  loader.Stop();
  heartbeat.join();
  header.host_state.store(static_cast<uint32_t>(ipc::HostState::kStopping), std::memory_order_release);
  spdlog::info("stopped");
  return 0;
}

}  // namespace es
