// End-to-end test fixture: the real `ensemble-server` (and through it the
// real `ensemble-model-host` processes) started from a test, in a temp dir.
//
//   es::it::ServerProcess::Options options;           // demo repo, 2 CPU hosts
//   auto server = es::it::ServerProcess::Start(options);
//   ASSERT_TRUE(server) << es::it::ServerProcess::last_start_error();
//   auto stub = server->Stub();                       // KServe v2 gRPC client
//
// Start() writes a server config into a fresh temp dir, fork/execs the server
// in its own process group with --grpc-port 0 (and --metrics-port 0, or
// --no-metrics), and waits (at most Options::startup_timeout) for its stdout
// line "grpc listening on HOST:PORT", then for "http listening on HOST:PORT"
// (--http-port 0; --no-http with Options::http off) and "metrics listening on
// HOST:PORT" when metrics are on. The destructor SIGKILLs the whole process group (router and
// hosts), reaps the router and removes the temp dir; if the test failed it
// prints the tail of the server's log (stderr, kept in the temp dir).
//
// Nothing here may hang a test: every RPC made through the helpers carries a
// deadline, and Watchdog (below) ends the test binary, killing every server
// it started, if a test runs past its budget.
//
// Thread safety: a ServerProcess is used from the test's main thread; its
// const accessors (address(), Stub(), HostPids()...) may be called from
// client threads too.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "proto/grpc_service.grpc.pb.h"
#include "proto/health.grpc.pb.h"
#include "tests/common/temp_dir.h"

namespace es::it {

namespace fs = std::filesystem;

using TempDir = es::testing::TempDir;

// Ends the process (exit code 124, after SIGKILLing every registered server
// process group) when an armed deadline passes. One per test binary.
// Thread-safe.
class Watchdog {
 public:
  // Arms (or re-arms) the deadline `budget` from now; `what` is printed if it fires.
  static void Arm(std::chrono::seconds budget, const std::string& what);
  static void Disarm();
  static void RegisterProcessGroup(pid_t pgid);
  static void UnregisterProcessGroup(pid_t pgid);
};

// RAII: arms the watchdog for one test (use at the top of each TEST body).
class WatchdogScope {
 public:
  WatchdogScope(std::chrono::seconds budget, const std::string& what) { Watchdog::Arm(budget, what); }
  ~WatchdogScope() { Watchdog::Disarm(); }
};

// The demo repository written by `ensemble-make-demo --out DIR --seed 1`,
// created once per test binary (cached), removed at exit. Fails the calling
// test (and returns "") if the tool fails.
const std::string& DemoRepository();

// Copies the demo repository into `dest` (so a test can add models to it).
bool CopyDemoRepository(const fs::path& dest, std::string* error);
// The demo repository plus the test models named (make_test_models.py:
// thrower, echo, spinner, hang_warmup, versioned); false with *error set.
bool MakeTestRepository(const fs::path& repo, std::initializer_list<std::string> models, std::string* error);
// Sets the spinner test model's execution limit (max_compute_ms, 1000 as
// written) in `repo`; false with *error set.
bool SetSpinnerLimitMs(const fs::path& repo, int64_t ms, std::string* error);

// Writes `text` to `path`; false (and ADD_FAILURE) on error.
bool WriteTextFile(const fs::path& path, const std::string& text);
std::string ReadTextFile(const fs::path& path);

// Runs `argv` (argv[0] a path), waits at most `timeout`, returns the exit code
// (or -1 on timeout/signal/launch error) and captures stdout+stderr into *output.
// The command runs in a process group of its own (its pid), which whatever it
// starts inherits.
int RunCommand(const std::vector<std::string>& argv, std::chrono::seconds timeout, std::string* output);
// The process group of the last command RunCommand started (0 before any):
// what a test asks about to look only at what it started.
pid_t LastCommandProcessGroup();
// The /dev/shm objects named "<prefix>_<pid>_<n>" (ShmRegion::UniqueKey's
// names) whose pid is one of the commands RunCommand started in this test
// process: what a test checks its own commands cleaned up, leaving alone the
// objects of tests running beside it and of servers on the machine.
std::set<std::string> ShmObjectsOfStartedCommands(const std::string& prefix);

// ---- /proc helpers (Linux) ----------------------------------------------

// The argv of a process (empty if gone or a zombie).
std::vector<std::string> ProcessArgs(pid_t pid);
// Direct children of `parent` (from /proc/*/stat's ppid field).
std::vector<pid_t> ChildPids(pid_t parent);
// Every live (non-zombie) process whose command line contains `needle`.
std::vector<pid_t> ProcessesWithArg(const std::string& needle);
// A field of /proc/PID/status ("Cpus_allowed_list", "VmRSS"...), trimmed; nullopt if gone.
std::optional<std::string> ProcStatusField(pid_t pid, const std::string& field);
// VmRSS in KiB, or -1.
long RssKiB(pid_t pid);
// True while the process exists and is not a zombie.
bool ProcessAlive(pid_t pid);
// The /dev/shm objects (names) the processes `pids` have mapped now (from
// /proc/PID/maps): what a test checks are gone after those processes exit,
// without looking at objects other tests or servers on the machine made.
std::set<std::string> ShmObjectsMappedBy(const std::vector<pid_t>& pids);
// Those of `names` that still exist in /dev/shm.
std::set<std::string> StillInShm(const std::set<std::string>& names);

// A loopback port nothing listens on (bound, then closed): for "server
// unreachable" tests.
int ClosedLoopbackPort();

// ---- the server under test ------------------------------------------------

class ServerProcess {
 public:
  struct HostSpec {
    HostSpec(std::string name, int cpu, std::string binary = "", int executors = 1)
        : name(std::move(name)), cpu(cpu), binary(std::move(binary)), executors(executors) {}
    std::string name;
    int cpu;             // the CPU it is pinned to
    std::string binary;  // the host program; empty = ensemble-model-host
    int executors = 1;
  };
  struct Options {
    // Model repository; empty = DemoRepository().
    std::string repository;
    std::vector<HostSpec> hosts = {{"cpu0", 0}, {"cpu1", 1}};
    int64_t max_request_bytes = 1 << 20;
    int64_t heartbeat_timeout_ms = 5000;
    int64_t drain_timeout_ms = 5000;
    // More `limits:` entries, YAML flow-map style without braces, e.g.
    // "max_compute_ms: 1000, host_startup_timeout_ms: 5000".
    std::string extra_limits;
    // More command-line arguments of ensemble-server.
    std::vector<std::string> extra_args;
    // Environment of the server (and so of its hosts), "NAME=value".
    std::vector<std::string> env;
    std::chrono::seconds startup_timeout{120};
    // /metrics on a free port (--metrics-port 0), or off (--no-metrics).
    bool metrics = true;
    // HTTP/REST on a free port (--http-port 0), or off (--no-http).
    bool http = true;
    // More top-level YAML of the server config, whole lines (e.g. "tls: {...}\n").
    std::string extra_config;
    // How the fixture's own channels (Channel(), Stub(), NewConnectionStub())
    // connect; null = plaintext. Start() waits until this channel connects,
    // so a TLS server needs credentials it accepts.
    std::shared_ptr<grpc::ChannelCredentials> channel_credentials;
  };

  // Starts the server; nullptr on failure (see last_start_error()).
  static std::unique_ptr<ServerProcess> Start(const Options& options);
  static const std::string& last_start_error();

  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }  // "127.0.0.1:PORT"
  // Where /metrics is served ("127.0.0.1:PORT"); "" with Options::metrics off.
  const std::string& metrics_address() const { return metrics_address_; }
  // Where HTTP/REST is served ("127.0.0.1:PORT"); "" with Options::http off.
  const std::string& http_address() const { return http_address_; }
  const fs::path& config_path() const { return config_path_; }
  const fs::path& dir() const { return dir_->path(); }
  std::string LogTail(size_t max_bytes = 8000) const;

  std::shared_ptr<grpc::Channel> Channel() const { return channel_; }
  std::unique_ptr<inference::GRPCInferenceService::Stub> Stub() const;
  // A stub on a channel of its own (a separate TCP connection).
  std::unique_ptr<inference::GRPCInferenceService::Stub> NewConnectionStub() const;
  std::unique_ptr<grpc::health::v1::Health::Stub> HealthStub() const;

  // Host processes by host name ("--host NAME" in their argv): the router's
  // live children running ensemble-model-host.
  std::map<std::string, pid_t> HostPids() const;
  // Waits until HostPids() has an entry for every configured host, each
  // different from `previous` where one is given; returns them (empty on timeout).
  std::map<std::string, pid_t> WaitForHosts(std::chrono::milliseconds timeout,
                                            const std::map<std::string, pid_t>& previous = {}) const;

  // Sends `sig` to the router only.
  void Signal(int sig) const;
  // Waits for the router to exit; true and *wait_status set if it did in time.
  bool WaitExit(std::chrono::milliseconds timeout, int* wait_status);
  bool exited() const { return exited_; }
  // What the router wrote to stdout after the listening line (read after it exited).
  std::string RemainingStdout();

 private:
  ServerProcess() = default;

  std::unique_ptr<TempDir> dir_;
  fs::path config_path_;
  fs::path log_path_;
  std::vector<HostSpec> hosts_;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string stdout_extra_;  // read past the listening line
  bool exited_ = false;
  std::string address_;
  std::string metrics_address_;
  std::string http_address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;  // of channel_ and NewConnectionStub()
};

// The router stopped (SIGSTOP) while this lives, continued (SIGCONT) when it
// goes, also when an assertion returns early. Nothing the router serves can
// answer meanwhile (its listening sockets still take connections and bytes
// into the kernel's buffers), so a call with a short deadline is sure to
// reach it however fast the machine, and however late the caller runs.
class RouterPause {
 public:
  explicit RouterPause(const ServerProcess& server) : server_(server) { server_.Signal(SIGSTOP); }
  ~RouterPause() { server_.Signal(SIGCONT); }
  RouterPause(const RouterPause&) = delete;
  RouterPause& operator=(const RouterPause&) = delete;

 private:
  const ServerProcess& server_;
};

// The YAML server config Start() writes (exposed for tests that write their own).
std::string ServerConfigYaml(const std::string& repository, const ServerProcess::Options& options);

}  // namespace es::it
