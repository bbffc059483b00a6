// HostSupervisor: keeps one configured model host running and tells the
// truth about it.
//
// One monitor thread per host: create a channel, spawn `ensemble-model-host`
// with it, wait for READY (bounded by host_startup_timeout_ms), publish the
// connection, then watch the process through a pidfd (death is seen at once)
// and the heartbeat word (a host silent for heartbeat_timeout_ms is hung and
// is killed). Every watch tick (50 ms) it also asks the connection whether a
// request has computed past its model's max_compute_ms (a hung forward: the
// heartbeat thread keeps beating through it) and whether the host broke the
// channel protocol (an invalid completion); either way the host is killed.
// On death or hang the connection is withdrawn first (new requests see
// UNAVAILABLE), its in-flight requests fail with UNAVAILABLE (the request
// that overran with DEADLINE_EXCEEDED), and the host is restarted after a
// backoff that doubles from 100 ms to 5 s and resets once a host has stayed
// up for 10 s.
//
// Start-up: once the host is READY (attached, pinned, device set up) the
// supervisor loads into it, one control request at a time, every model
// version the assignment names (what the router has decided this host
// holds), before the connection is published. So after a restart the host
// holds exactly what it held before, whatever the repository on disk now
// says. All of it is bounded by host_startup_timeout_ms; a start-up that
// times out names the model version it was stuck on, and a load the host
// refuses (broken model.pt) fails the incarnation with the host's reason.
//
// It also keeps the host's figures for /metrics (figures()): the watch loop
// samples the heartbeat and the host's metrics block of the channel header
// into atomics every tick, and keeps CPU time a counter across incarnations:
// a dead incarnation's CPU time (its last published figure, or what wait4
// reported when it was reaped, whichever is larger) moves into a running
// total, so the exported total never goes backwards.
//
// Thread safety: all public methods are thread-safe. `mu_` guards
// `connection_`, `last_error_` and `first_start_done_`; the figure atomics
// are written by the monitor thread only.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/log_setup.h"
#include "common/mutex.h"
#include "config/server_config.h"
#include "server/hosts/host_connection.h"
#include "server/hosts/stderr_tail.h"

namespace es {

// A snapshot of one host for /metrics.
struct HostFigures {
  bool up = false;  // a ready connection is published
  int restarts = 0;
  pid_t pid = 0;
  double heartbeat_age_seconds = 0;  // since the heartbeat word last moved
  uint64_t arena_used_bytes = 0;     // 0 while down
  uint64_t arena_capacity_bytes = 0;
  uint64_t resident_bytes = 0;  // 0 while down
  uint64_t device_allocated_bytes = 0;
  uint64_t device_reserved_bytes = 0;
  double cpu_seconds_total = 0;      // all incarnations; never decreases
  uint64_t protocol_violations = 0;  // invalid completions, all incarnations
  uint64_t hung_forwards = 0;        // kills for a request past max_compute_ms
};

// One model version the router wants on a host; `spec` is what the load
// request carries (config/host_model_spec.h).
struct HostModelLoad {
  std::string model;
  int64_t version = 0;
  std::string spec;
};
// The model versions a host must hold, asked at every start of the host,
// and a number that changes whenever they may have changed (read again
// right before the host is published: see LoadAssignment).
struct HostAssignment {
  std::function<std::vector<HostModelLoad>()> loads;
  std::function<uint64_t()> generation;
};

class HostSupervisor {
 public:
  HostSupervisor(HostConfig host, Limits limits, HostAssignment assignment, std::string host_binary);
  ~HostSupervisor();

  void Start();
  // Blocks until the first start attempt is over; false (with the reason in
  // last_error()) if the host did not become ready.
  bool WaitFirstStart();
  // Asks the host to stop, waits up to `grace`, then kills it; fails whatever
  // is still in flight. Idempotent.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));
  // Starts stopping without waiting (Stop() then waits), so that several
  // hosts' graces run at the same time.
  void RequestStop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

  // Loads (kind kLoad) or unloads (kUnload, `load.spec` unused) a model
  // version on the live host and waits for its answer, at most `timeout`.
  // UNAVAILABLE while the host is down or starting (its next start asks the
  // assignment anyway).
  Status Control(ipc::RequestKind kind, const HostModelLoad& load, std::chrono::milliseconds timeout) const;

  // Sends the live host `settings` (kind kLogSettings) without waiting; a
  // refusal is logged. A host down or starting gets the router's current
  // settings in its environment when it starts (ES_LOG_SETTINGS).
  void SendLogSettings(const LogSettings& settings) const;

  // The live connection, or nullptr while the host is down or starting.
  std::shared_ptr<HostConnection> connection() const;
  bool ready() const { return connection() != nullptr; }
  const HostConfig& config() const { return host_; }
  int restarts() const { return restarts_.load(); }
  pid_t pid() const { return pid_.load(); }
  std::string last_error() const;
  HostFigures figures() const;

 private:
  void MonitorLoop();
  // One incarnation: spawn, wait ready, watch until it dies or we stop.
  // Returns true if the host had become ready.
  bool RunIncarnation();
  Status WaitReady(HostConnection* conn, pid_t pid, int pidfd, std::chrono::steady_clock::time_point deadline);
  // Loads the assignment into a READY host and publishes the connection,
  // once the assignment did not change while it loaded (else it loads and
  // unloads the difference and checks again): a load or unload the router
  // made meanwhile skipped this host (not ready yet) and must not be missed.
  Status LoadAssignment(std::shared_ptr<HostConnection> conn, pid_t pid, int pidfd,
                        std::chrono::steady_clock::time_point deadline);
  // Watches until the host dies, hangs, misbehaves or we stop; returns the
  // statuses owed to particular requests (the one that overran).
  std::map<uint64_t, Status> Watch(HostConnection* conn, pid_t pid, int pidfd);
  // Why the watched host must be killed now, or "" (monitor thread).
  std::string KillReason(HostConnection* conn, pid_t pid, std::map<uint64_t, Status>* owed);
  void Reap(pid_t pid, int pidfd, std::chrono::milliseconds grace, HostConnection* conn);
  void SetError(const std::string& error);
  // "its last words on stderr: '...'" of the host that just exited, or "".
  std::string LastWords();
  // Wakes WaitFirstStart() once, with the outcome of the first incarnation.
  void NoteFirstStart(bool ok);
  void Publish(std::shared_ptr<HostConnection> conn);
  // Monitor thread: copies the heartbeat time and the host's metrics block
  // into the figure atomics.
  void SampleHost(HostConnection* conn);
  // Monitor thread: waits for `pid` (wait4) and remembers its CPU time.
  void ReapChild(pid_t pid, int* status);
  // Monitor thread, once per incarnation: its CPU time joins the total.
  void CloseIncarnationFigures();

  const HostConfig host_;
  const Limits limits_;
  const HostAssignment assignment_;
  const std::string host_binary_;

  std::atomic<bool> stopping_{false};
  std::atomic<int> restarts_{0};
  std::atomic<pid_t> pid_{0};
  std::thread monitor_;
  std::chrono::milliseconds stop_grace_{2000};

  // /metrics figures: written by the monitor thread, read by scrapes.
  std::atomic<int64_t> last_beat_ns_{0};  // steady clock, when the heartbeat last moved
  std::atomic<uint64_t> resident_bytes_{0};
  std::atomic<uint64_t> device_allocated_bytes_{0};
  std::atomic<uint64_t> device_reserved_bytes_{0};
  std::atomic<uint64_t> cpu_total_ns_{0};      // dead incarnations + the current one
  std::atomic<uint64_t> violations_total_{0};  // all incarnations, as last sampled
  std::atomic<uint64_t> hung_forwards_{0};
  // Monitor thread only.
  uint64_t last_beat_ = 0;
  uint64_t cpu_dead_ns_ = 0;      // CPU time of the incarnations that ended
  uint64_t cpu_sampled_ns_ = 0;   // the current incarnation's last published CPU time
  uint64_t cpu_reaped_ns_ = 0;    // the current incarnation's CPU time from wait4
  uint64_t violations_dead_ = 0;  // protocol violations of the incarnations that ended
  int64_t spawned_ns_ = 0;        // steady clock, when the current incarnation was spawned
  std::unique_ptr<StderrTail> stderr_tail_;  // the current incarnation's stderr

  mutable Mutex mu_;
  CondVar cv_;
  std::shared_ptr<HostConnection> connection_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  bool first_start_done_ ABSL_GUARDED_BY(mu_) = false;
  bool first_start_ok_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace es
