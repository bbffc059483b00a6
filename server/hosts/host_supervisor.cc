#include "server/hosts/host_supervisor.h"

#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/launcher.h"
#include "server/hosts/stderr_tail.h"
#include "server/hosts/thread_states.h"

namespace es {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kChildChannelFd = 3;
constexpr milliseconds kWatchTick(50);
constexpr milliseconds kInitialBackoff(100);
constexpr milliseconds kMaxBackoff(5000);
constexpr auto kStableUptime = std::chrono::seconds(10);

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

uint64_t TimevalNs(const timeval& tv) {
  return static_cast<uint64_t>(tv.tv_sec) * 1000000000ULL + static_cast<uint64_t>(tv.tv_usec) * 1000ULL;
}

int OpenPidfd(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

// True when the process behind pidfd has exited (or, without a pidfd, when
// waitpid says so); waits at most `timeout`.
bool WaitExit(int pidfd, pid_t pid, milliseconds timeout) {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    return poll(&p, 1, static_cast<int>(timeout.count())) > 0;
  }
  std::this_thread::sleep_for(std::min(timeout, milliseconds(5)));
  return waitpid(pid, nullptr, WNOHANG | WNOWAIT | __WALL) == pid;
}

ipc::HostState StateOf(HostConnection* conn) {
  return static_cast<ipc::HostState>(conn->channel().header().host_state.load(std::memory_order_acquire));
}

std::string HostMessage(HostConnection* conn) {
  const auto& h = conn->channel().header();
  return std::string(h.host_message, strnlen(h.host_message, sizeof(h.host_message)));
}

// The host's command line: all it is told of its configuration.
std::vector<std::string> HostArguments(const HostConfig& host, const Limits& limits) {
  std::vector<std::string> args = {"--channel-fd", std::to_string(kChildChannelFd),
                                   "--host",       host.name,
                                   "--device",     host.device,
                                   "--threads",    std::to_string(std::max(1, host.threads)),
                                   "--executors",  std::to_string(std::max(1, host.executors)),
                                   "--spin-polls", std::to_string(limits.channel_spin_polls)};
  if (!host.cpu_affinity.empty()) {
    std::string cpus;
    for (int cpu : host.cpu_affinity) {
      if (!cpus.empty()) cpus.push_back(',');
      cpus.append(std::to_string(cpu));
    }
    args.insert(args.end(), {"--cpus", cpus});
  }
  return args;
}

// Where a control request's answer lands; the caller polls it.
struct ControlAnswer {
  Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  Status status ABSL_GUARDED_BY(mu);
};

// Submits one control request; `answer` is filled when it is answered.
Status SubmitControl(HostConnection* conn, ipc::RequestKind kind, const HostModelLoad& load,
                     std::chrono::milliseconds limit, const std::shared_ptr<ControlAnswer>& answer) {
  const bool payload = kind == ipc::RequestKind::kLoad || kind == ipc::RequestKind::kLogSettings;
  return conn->SubmitControl(kind, load.model, load.version, payload ? load.spec : "", limit,
                             [answer](const Status& status, const ipc::CompletionDesc*, const uint8_t*) {
                               MutexLock lock(&answer->mu);
                               answer->done = true;
                               answer->status = status;
                             });
}

std::optional<Status> Answered(ControlAnswer& answer) {
  MutexLock lock(&answer.mu);
  if (!answer.done) return std::nullopt;
  return answer.status;
}

std::string Describe(const HostModelLoad& load) {
  return "model '" + load.model + "' version " + std::to_string(load.version);
}

}  // namespace

Status HostSupervisor::Control(ipc::RequestKind kind, const HostModelLoad& load,
                               std::chrono::milliseconds timeout) const {
  const std::shared_ptr<HostConnection> conn = connection();
  if (conn == nullptr) return Status::Unavailable("host '" + host_.name + "' is down");
  auto answer = std::make_shared<ControlAnswer>();
  ES_RETURN_IF_ERROR(SubmitControl(conn.get(), kind, load, timeout, answer));
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (std::optional<Status> status = Answered(*answer)) return *status;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return Status::DeadlineExceeded("host '" + host_.name + "' did not answer for " + Describe(load) + " within " +
                                  std::to_string(timeout.count()) + " ms");
}

void HostSupervisor::SendLogSettings(const LogSettings& settings) const {
  const std::shared_ptr<HostConnection> conn = connection();
  if (conn == nullptr) return;
  const std::string name = host_.name;
  const Status submitted = conn->SubmitControl(
      ipc::RequestKind::kLogSettings, "", 0, EncodeLogSettings(settings), milliseconds(5000),
      [name](const Status& status, const ipc::CompletionDesc*, const uint8_t*) {
        if (!status.ok()) spdlog::warn("host '{}' did not take the new log settings: {}", name, status.message());
      });
  if (!submitted.ok()) spdlog::warn("host '{}': cannot send the log settings: {}", name, submitted.message());
}

Status HostSupervisor::LoadAssignment(std::shared_ptr<HostConnection> conn, pid_t pid, int pidfd,
                                      Clock::time_point deadline) {
  const std::string who = "host '" + host_.name + "' (pid " + std::to_string(pid) + ")";
  // Waits for one control request's answer, watching the process and the deadline.
  auto await = [&](const HostModelLoad& load, ipc::RequestKind kind) -> Status {
    auto answer = std::make_shared<ControlAnswer>();
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    ES_RETURN_IF_ERROR(SubmitControl(conn.get(), kind, load, std::max(left, milliseconds(1)), answer));
    std::optional<Status> status;
    while (!(status = Answered(*answer))) {
      SampleHost(conn.get());
      if (stopping_.load()) return Status::Unavailable(who + ": stopped during start-up");
      if (Clock::now() > deadline) {
        return Status::Unavailable(who + " did not become ready within " +
                                   std::to_string(limits_.host_startup_timeout_ms) + " ms (stuck loading " +
                                   Describe(load) + ")");
      }
      if (WaitExit(pidfd, pid, milliseconds(5))) {
        int st = 0;
        ReapChild(pid, &st);
        pid_.store(0);
        return Status::Unavailable(who + " " + DescribeWaitStatus(st) + " while loading " + Describe(load));
      }
    }
    if (!status->ok()) return Status::Unavailable(who + " cannot load " + Describe(load) + ": " + status->message());
    return Status::Ok();
  };
  std::map<std::pair<std::string, int64_t>, std::string> held;  // (model, version) -> spec loaded
  for (;;) {
    const uint64_t generation = assignment_.generation();
    std::map<std::pair<std::string, int64_t>, std::string> want;
    for (HostModelLoad& load : assignment_.loads()) want[{load.model, load.version}] = std::move(load.spec);
    for (const auto& [key, spec] : want) {
      auto it = held.find(key);
      if (it != held.end() && it->second == spec) continue;
      const HostModelLoad load{key.first, key.second, spec};
      ES_RETURN_IF_ERROR(await(load, ipc::RequestKind::kLoad));
      spdlog::debug("host '{}': {} loaded", host_.name, Describe(load));
      held[key] = spec;
    }
    for (auto it = held.begin(); it != held.end();) {
      if (want.count(it->first)) {
        ++it;
        continue;
      }
      (void)await({it->first.first, it->first.second, ""}, ipc::RequestKind::kUnload);
      it = held.erase(it);
    }
    MutexLock lock(&mu_);
    if (assignment_.generation() == generation) {
      connection_ = std::move(conn);
      return Status::Ok();
    }
  }
}

HostSupervisor::HostSupervisor(HostConfig host, Limits limits, HostAssignment assignment, std::string host_binary)
    : host_(std::move(host)),
      limits_(limits),
      assignment_(std::move(assignment)),
      host_binary_(std::move(host_binary)) {}

HostSupervisor::~HostSupervisor() { Stop(); }

void HostSupervisor::Start() {
  monitor_ = std::thread([this] { MonitorLoop(); });
}

bool HostSupervisor::WaitFirstStart() {
  MutexLock lock(&mu_);
  while (!first_start_done_) cv_.Wait(&mu_);
  return first_start_ok_;
}

void HostSupervisor::RequestStop(milliseconds grace) {
  {
    MutexLock lock(&mu_);
    if (stopping_.load()) return;
    stop_grace_ = grace;
    stopping_.store(true);
  }
  cv_.NotifyAll();
}

void HostSupervisor::Stop(milliseconds grace) {
  RequestStop(grace);
  if (monitor_.joinable()) monitor_.join();
}

std::shared_ptr<HostConnection> HostSupervisor::connection() const {
  MutexLock lock(&mu_);
  return connection_;
}

std::string HostSupervisor::last_error() const {
  MutexLock lock(&mu_);
  return last_error_;
}

void HostSupervisor::SetError(const std::string& error) {
  spdlog::error("{}", error);
  MutexLock lock(&mu_);
  last_error_ = error;
}

void HostSupervisor::Publish(std::shared_ptr<HostConnection> conn) {
  MutexLock lock(&mu_);
  connection_ = std::move(conn);
}

HostFigures HostSupervisor::figures() const {
  HostFigures f;
  const std::shared_ptr<HostConnection> conn = connection();
  f.up = conn != nullptr;
  f.restarts = restarts_.load();
  f.pid = pid_.load();
  f.heartbeat_age_seconds = static_cast<double>(SteadyNs() - last_beat_ns_.load(std::memory_order_relaxed)) / 1e9;
  f.arena_capacity_bytes = conn ? conn->arena_capacity() : static_cast<uint64_t>(limits_.arena_bytes);
  f.arena_used_bytes = conn ? conn->arena_used_bytes() : 0;
  f.resident_bytes = resident_bytes_.load(std::memory_order_relaxed);
  f.device_allocated_bytes = device_allocated_bytes_.load(std::memory_order_relaxed);
  f.device_reserved_bytes = device_reserved_bytes_.load(std::memory_order_relaxed);
  f.cpu_seconds_total = static_cast<double>(cpu_total_ns_.load(std::memory_order_relaxed)) / 1e9;
  f.protocol_violations = violations_total_.load(std::memory_order_relaxed);
  f.hung_forwards = hung_forwards_.load(std::memory_order_relaxed);
  return f;
}

void HostSupervisor::SampleHost(HostConnection* conn) {
  violations_total_.store(violations_dead_ + conn->violations(), std::memory_order_relaxed);
  const auto& header = conn->channel().header();
  const uint64_t beat = header.heartbeat.load(std::memory_order_relaxed);
  if (beat != last_beat_) {
    last_beat_ = beat;
    last_beat_ns_.store(SteadyNs(), std::memory_order_relaxed);
  }
  const auto& m = header.host_metrics;
  if (m.publishes.load(std::memory_order_acquire) == 0) return;  // nothing published yet
  resident_bytes_.store(m.resident_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
  device_allocated_bytes_.store(m.device_allocated_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
  device_reserved_bytes_.store(m.device_reserved_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
  // A host only ever reports its own CPU time growing; max() keeps a corrupt
  // figure from making the counter go down, and a figure no process could
  // have used since the spawn (all CPUs busy all along) is ignored, so a
  // lying host cannot poison the counter for good.
  const uint64_t reported = m.cpu_ns.load(std::memory_order_relaxed);
  const uint64_t possible = static_cast<uint64_t>(std::max<int64_t>(0, SteadyNs() - spawned_ns_)) *
                            std::max(1u, std::thread::hardware_concurrency());
  if (reported <= possible) cpu_sampled_ns_ = std::max(cpu_sampled_ns_, reported);
  cpu_total_ns_.store(std::max(cpu_total_ns_.load(std::memory_order_relaxed), cpu_dead_ns_ + cpu_sampled_ns_),
                      std::memory_order_relaxed);
}

void HostSupervisor::ReapChild(pid_t pid, int* status) {
  rusage usage{};
  int st = 0;
  if (wait4(pid, &st, __WALL, &usage) == pid) {
    cpu_reaped_ns_ = TimevalNs(usage.ru_utime) + TimevalNs(usage.ru_stime);
  }
  if (status != nullptr) *status = st;
}

void HostSupervisor::CloseIncarnationFigures() {
  cpu_dead_ns_ += std::max(cpu_sampled_ns_, cpu_reaped_ns_);
  cpu_sampled_ns_ = 0;
  cpu_reaped_ns_ = 0;
  cpu_total_ns_.store(std::max(cpu_total_ns_.load(std::memory_order_relaxed), cpu_dead_ns_), std::memory_order_relaxed);
  resident_bytes_.store(0, std::memory_order_relaxed);
  device_allocated_bytes_.store(0, std::memory_order_relaxed);
  device_reserved_bytes_.store(0, std::memory_order_relaxed);
}

void HostSupervisor::MonitorLoop() {
  milliseconds backoff = kInitialBackoff;
  bool first = true;
  while (!stopping_.load()) {
    const auto started = Clock::now();
    const bool became_ready = RunIncarnation();
    if (first) {
      first = false;
      NoteFirstStart(became_ready);
      if (!became_ready) return;  // the router refuses to start; it says why
    }
    if (stopping_.load()) break;
    restarts_.fetch_add(1);
    if (Clock::now() - started > kStableUptime) {
      spdlog::debug("host '{}': it had run longer than {} s, so the backoff starts again at {} ms", host_.name,
                    std::chrono::duration_cast<std::chrono::seconds>(kStableUptime).count(), kInitialBackoff.count());
      backoff = kInitialBackoff;
    }
    spdlog::warn("host '{}': restarting in {} ms (restart #{})", host_.name, backoff.count(), restarts_.load());
    MutexLock lock(&mu_);
    cv_.WaitFor(&mu_, backoff, [this] { return stopping_.load(); });
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  NoteFirstStart(false);
}

std::string HostSupervisor::LastWords() {
  // The host is dead: its last bytes are in the pipe or on their way.
  const std::string line = stderr_tail_ ? stderr_tail_->LastLine(std::chrono::milliseconds(200)) : "";
  return line.empty() ? "" : "its last words on stderr: '" + line + "'";
}

void HostSupervisor::NoteFirstStart(bool ok) {
  MutexLock lock(&mu_);
  if (first_start_done_) return;
  first_start_done_ = true;
  first_start_ok_ = ok;
  cv_.NotifyAll();
}

bool HostSupervisor::RunIncarnation() {
  ipc::WaitPolicy wait;
  wait.spin = static_cast<int>(limits_.channel_spin_polls);
  auto created = HostConnection::Create(host_.name, static_cast<uint64_t>(limits_.arena_bytes), wait);
  if (!created.ok()) {
    SetError(created.status().message());
    return false;
  }
  std::shared_ptr<HostConnection> conn = std::move(created).value();
  // The host's stderr passes through the router's, and its last line says
  // why, should the host exit before it can say so in its channel.
  auto tail = StderrTail::Create();
  if (!tail.ok()) {
    SetError("host '" + host_.name + "': " + tail.status().message());
    return false;
  }
  stderr_tail_ = std::move(tail).value();
  LaunchSpec spec;
  spec.binary = host_binary_;
  spec.args = HostArguments(host_, limits_);
  spec.pass_fds = {{conn->channel().fd(), kChildChannelFd}, {stderr_tail_->write_fd(), STDERR_FILENO}};
  spec.cpu_affinity = host_.cpu_affinity;
  // OpenBLAS starts its own thread pool when it loads, before the host can
  // configure LibTorch; size it to the host's share of the machine.
  spec.env = {{"OPENBLAS_NUM_THREADS", std::to_string(std::max(1, host_.threads))}};
  // The host logs with the router's settings (its flags, its config, the
  // last log settings call).
  spec.env.emplace_back("ES_LOG_SETTINGS", EncodeLogSettings(CurrentLogSettings()));
  auto spawned = Spawn(spec);
  stderr_tail_->CloseWriteEnd();  // the host holds it now: end of file comes when it is gone
  stderr_tail_->Start();
  if (!spawned.ok()) {
    SetError("host '" + host_.name + "': cannot start " + host_binary_ + ": " + spawned.status().message());
    return false;
  }
  const pid_t pid = spawned.value();
  pid_.store(pid);
  spawned_ns_ = SteadyNs();
  last_beat_ns_.store(spawned_ns_, std::memory_order_relaxed);  // the age counts from the spawn
  last_beat_ = 0;
  const int pidfd = OpenPidfd(pid);

  const auto deadline = Clock::now() + milliseconds(limits_.host_startup_timeout_ms);
  Status ready = WaitReady(conn.get(), pid, pidfd, deadline);
  if (ready.ok()) {
    conn->StartCompletionThread();
    ready = LoadAssignment(conn, pid, pidfd, deadline);  // publishes it
  }
  if (!ready.ok()) {
    SetError(ready.message());
    Reap(pid, pidfd, milliseconds(0), conn.get());
    CloseIncarnationFigures();
    conn->Close(Status::Unavailable(ready.message()));
    return false;
  }
  spdlog::info("host '{}' ready (pid {}, device {})", host_.name, pid, host_.device);
  NoteFirstStart(true);

  const std::map<uint64_t, Status> owed = Watch(conn.get(), pid, pidfd);
  Publish(nullptr);  // new requests see UNAVAILABLE from now on
  Reap(pid, pidfd, stopping_.load() ? stop_grace_ : milliseconds(0), conn.get());
  CloseIncarnationFigures();
  const std::string why = stopping_.load() ? "stopped: the server is shutting down" : "went down: " + last_error();
  conn->Close(Status::Unavailable("host '" + host_.name + "' " + why), owed);
  violations_dead_ += conn->violations();
  violations_total_.store(violations_dead_, std::memory_order_relaxed);
  return true;
}

Status HostSupervisor::WaitReady(HostConnection* conn, pid_t pid, int pidfd, Clock::time_point deadline) {
  const std::string who = "host '" + host_.name + "' (pid " + std::to_string(pid) + ")";
  while (true) {
    SampleHost(conn);
    const ipc::HostState state = StateOf(conn);
    if (state == ipc::HostState::kReady) return Status::Ok();
    if (state == ipc::HostState::kFailed) return Status::Unavailable(who + " failed to start: " + HostMessage(conn));
    if (stopping_.load()) return Status::Unavailable(who + ": stopped during start-up");
    if (Clock::now() > deadline) {
      // The host says what it is doing while it starts ("warming up model
      // 'x'"), so a start-up stuck in one model names it.
      const std::string doing = HostMessage(conn);
      return Status::Unavailable(who + " did not become ready within " +
                                 std::to_string(limits_.host_startup_timeout_ms) + " ms" +
                                 (doing.empty() ? "" : " (stuck " + doing + ")"));
    }
    if (WaitExit(pidfd, pid, milliseconds(5))) {
      int st = 0;
      ReapChild(pid, &st);
      pid_.store(0);
      std::string msg = HostMessage(conn);
      if (msg.empty()) msg = LastWords();
      return Status::Unavailable(who + " " + DescribeWaitStatus(st) + " during start-up" +
                                 (msg.empty() ? "" : ": " + msg));
    }
  }
}

std::map<uint64_t, Status> HostSupervisor::Watch(HostConnection* conn, pid_t pid, int pidfd) {
  auto& header = conn->channel().header();
  uint64_t last_beat = header.heartbeat.load(std::memory_order_relaxed);
  auto last_change = Clock::now();
  std::map<uint64_t, Status> owed;
  const std::string who = "host '" + host_.name + "' (pid " + std::to_string(pid) + ")";
  while (!stopping_.load()) {
    if (WaitExit(pidfd, pid, kWatchTick)) {
      int st = 0;
      ReapChild(pid, &st);
      pid_.store(0);
      // The last words go to the log only: last_error reaches clients in
      // UNAVAILABLE messages, and a host's stderr is the operator's business.
      const std::string words = LastWords();
      if (!words.empty()) spdlog::error("host '{}' (pid {}): {}", host_.name, pid, words);
      SetError(who + " " + DescribeWaitStatus(st));
      return owed;
    }
    SampleHost(conn);
    const uint64_t beat = header.heartbeat.load(std::memory_order_relaxed);
    const auto now = Clock::now();
    if (beat != last_beat) {
      last_beat = beat;
      last_change = now;
    } else if (now - last_change > milliseconds(limits_.heartbeat_timeout_ms)) {
      // What its threads wait in, before the kill: the heartbeat thread only
      // sleeps, reads its own counters and stores, so a silent heartbeat
      // means the whole process stood still, and this says where.
      spdlog::error("{}: no heartbeat for {} ms; its {}", who, limits_.heartbeat_timeout_ms, DescribeThreads(pid));
      SetError(who + " is hung: no heartbeat for " + std::to_string(limits_.heartbeat_timeout_ms) + " ms; killing it");
      return owed;
    }
    if (const std::string why = KillReason(conn, pid, &owed); !why.empty()) {
      SetError(who + " " + why);
      return owed;
    }
  }
  return owed;
}

std::string HostSupervisor::KillReason(HostConnection* conn, pid_t pid, std::map<uint64_t, Status>* owed) {
  if (const std::string fault = conn->fault(); !fault.empty()) {
    return "broke the channel protocol (" + fault + "); killing and restarting it";
  }
  const std::optional<Overrun> overrun = conn->FindOverrun();
  if (!overrun) {
    const std::string lost = conn->FindLost();
    return lost.empty() ? "" : "broke the channel protocol (" + lost + "); killing and restarting it";
  }
  hung_forwards_.fetch_add(1, std::memory_order_relaxed);
  const std::string limit = std::to_string(overrun->limit.count());
  (*owed)[overrun->request_id] =
      Status::DeadlineExceeded("model '" + overrun->model + "': the forward ran past its execution limit of " + limit +
                               " ms (max_compute_ms); host '" + host_.name + "' was restarted");
  return "is hung: model '" + overrun->model + "' has been computing one request for " +
         std::to_string(overrun->elapsed.count()) + " ms, past its max_compute_ms of " + limit + "; killing it";
}

void HostSupervisor::Reap(pid_t pid, int pidfd, milliseconds grace, HostConnection* conn) {
  if (pid_.load() == pid) {
    if (grace.count() > 0) {
      // Hosts ignore SIGTERM (host_process.cc): the channel's stop flag,
      // seen by the host's heartbeat thread within 100 ms, is how they stop.
      conn->channel().header().stop_requested.store(1, std::memory_order_release);
      if (!WaitExit(pidfd, pid, grace)) kill(pid, SIGKILL);
    } else {
      kill(pid, SIGKILL);
    }
    ReapChild(pid, nullptr);
    pid_.store(0);
  }
  if (pidfd >= 0) close(pidfd);
}

}  // namespace es
