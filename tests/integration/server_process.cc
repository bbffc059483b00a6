#include "tests/integration/server_process.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "tests/common/test_paths.h"

namespace es::it {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string WaitStatusString(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

// Reads what is available on `fd` within `timeout` into *out; false on EOF.
bool ReadSome(int fd, milliseconds timeout, std::string* out) {
  pollfd p{fd, POLLIN, 0};
  const int ready = poll(&p, 1, static_cast<int>(std::max<int64_t>(0, timeout.count())));
  if (ready <= 0) return true;  // nothing yet (or EINTR): not EOF
  char buf[4096];
  const ssize_t n = read(fd, buf, sizeof(buf));
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  out->append(buf, static_cast<size_t>(n));
  return true;
}

// ---- watchdog state: leaked on purpose, so the thread never sees it destroyed.
struct WatchdogState {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Clock::time_point> deadline;  // GUARDED_BY(mu)
  std::string what;                           // GUARDED_BY(mu)
  std::set<pid_t> groups;                     // GUARDED_BY(mu)
  bool started = false;                       // GUARDED_BY(mu)
};

WatchdogState& Dog() {
  static WatchdogState* state = new WatchdogState();
  return *state;
}

[[noreturn]] void WatchdogFire(WatchdogState& dog) {
  std::fprintf(stderr, "\n*** watchdog: '%s' ran past its time budget; killing %zu server(s) and exiting\n",
               dog.what.c_str(), dog.groups.size());
  for (pid_t g : dog.groups) kill(-g, SIGKILL);
  std::fflush(stderr);
  _exit(124);
}

void WatchdogLoop() {
  WatchdogState& dog = Dog();
  std::unique_lock<std::mutex> lock(dog.mu);
  for (;;) {
    if (!dog.deadline) {
      dog.cv.wait(lock);
      continue;
    }
    if (Clock::now() >= *dog.deadline) WatchdogFire(dog);
    dog.cv.wait_until(lock, *dog.deadline);
  }
}

std::string g_last_start_error;

}  // namespace

int ClosedLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// ---- Watchdog ---------------------------------------------------------------

void Watchdog::Arm(std::chrono::seconds budget, const std::string& what) {
  WatchdogState& dog = Dog();
  std::lock_guard<std::mutex> lock(dog.mu);
  dog.deadline = Clock::now() + budget;
  dog.what = what;
  if (!dog.started) {
    dog.started = true;
    std::thread(WatchdogLoop).detach();
  }
  dog.cv.notify_all();
}

void Watchdog::Disarm() {
  WatchdogState& dog = Dog();
  std::lock_guard<std::mutex> lock(dog.mu);
  dog.deadline.reset();
  dog.cv.notify_all();
}

void Watchdog::RegisterProcessGroup(pid_t pgid) {
  std::lock_guard<std::mutex> lock(Dog().mu);
  Dog().groups.insert(pgid);
}

void Watchdog::UnregisterProcessGroup(pid_t pgid) {
  std::lock_guard<std::mutex> lock(Dog().mu);
  Dog().groups.erase(pgid);
}

// ---- files and commands -----------------------------------------------------

bool WriteTextFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    ADD_FAILURE() << "cannot write " << path;
    return false;
  }
  return true;
}

std::string ReadTextFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {
std::atomic<pid_t> g_last_command_group{0};
std::mutex g_started_mutex;
std::set<pid_t> g_started_commands;  // GUARDED_BY(g_started_mutex)
}  // namespace

pid_t LastCommandProcessGroup() { return g_last_command_group.load(); }

std::set<std::string> ShmObjectsOfStartedCommands(const std::string& prefix) {
  std::set<pid_t> started;
  {
    std::lock_guard<std::mutex> lock(g_started_mutex);
    started = g_started_commands;
  }
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix + "_", 0) != 0) continue;
    const std::string rest = name.substr(prefix.size() + 1);
    const size_t underscore = rest.find('_');
    if (underscore == std::string::npos) continue;
    pid_t pid = 0;
    const auto [end, err] = std::from_chars(rest.data(), rest.data() + underscore, pid);
    if (err == std::errc() && end == rest.data() + underscore && started.count(pid)) names.insert(name);
  }
  return names;
}

int RunCommand(const std::vector<std::string>& argv, std::chrono::seconds timeout, std::string* output) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  std::vector<std::string> args = argv;
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test (e.g. killed by ctest's timeout)
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execv(cargs[0], cargs.data());
    _exit(127);
  }
  setpgid(pid, pid);
  g_last_command_group.store(pid);
  {
    std::lock_guard<std::mutex> lock(g_started_mutex);
    g_started_commands.insert(pid);
  }
  close(fds[1]);
  const auto deadline = Clock::now() + timeout;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    if (!ReadSome(fds[0], std::min(left, milliseconds(200)), output)) break;
  }
  close(fds[0]);
  if (timed_out) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    *output += "\n[timed out after " + std::to_string(timeout.count()) + " s]";
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// ---- the demo repository ----------------------------------------------------

const std::string& DemoRepository() {
  static std::unique_ptr<TempDir> dir;
  static std::string repo;
  static bool tried = false;
  static std::string error;
  if (!tried) {
    tried = true;
    dir = std::make_unique<TempDir>("es_demo_repo_");
    const fs::path out = dir->path() / "repo";
    std::string output;
    // Untrained (--train-steps 0): these tests need models, not good ones,
    // and each test process would spend seconds training them.
    const int rc =
        RunCommand({es::test_paths::kMakeDemoBin, "--out", out.string(), "--seed", "1", "--train-steps", "0"},
                   std::chrono::seconds(180), &output);
    if (rc != 0) {
      error = "ensemble-make-demo failed (rc " + std::to_string(rc) + "): " + output;
    } else {
      for (const char* model : {"mlp", "wide_mlp", "cnn"}) {
        if (!fs::exists(out / model / "1" / "model.pt")) error += std::string("missing ") + model + "/1/model.pt; ";
      }
      if (!fs::exists(out / "demo_ensemble" / "config.yaml")) error += "missing demo_ensemble/config.yaml";
      if (error.empty()) repo = out.string();
    }
  }
  if (repo.empty()) ADD_FAILURE() << "demo repository: " << error;
  return repo;
}

bool CopyDemoRepository(const fs::path& dest, std::string* error) {
  const std::string& demo = DemoRepository();
  if (demo.empty()) {
    *error = "no demo repository";
    return false;
  }
  std::error_code ec;
  fs::copy(demo, dest, fs::copy_options::recursive, ec);
  if (ec) {
    *error = "copy " + demo + " -> " + dest.string() + ": " + ec.message();
    return false;
  }
  return true;
}

bool MakeTestRepository(const fs::path& repo, std::initializer_list<std::string> models, std::string* error) {
  if (!CopyDemoRepository(repo, error)) return false;
  std::vector<std::string> argv = {
      "/usr/bin/python3", std::string(es::test_paths::kIntegrationSourceDir) + "/make_test_models.py", repo.string()};
  argv.insert(argv.end(), models.begin(), models.end());
  std::string output;
  if (RunCommand(argv, std::chrono::seconds(180), &output) != 0) {
    *error = "make_test_models.py failed: " + output;
    return false;
  }
  return true;
}

bool SetSpinnerLimitMs(const fs::path& repo, int64_t ms, std::string* error) {
  const fs::path yaml = repo / "spinner" / "config.yaml";
  std::string config = ReadTextFile(yaml);
  const std::string written = "max_compute_ms: 1000";
  const size_t at = config.find(written);
  if (at == std::string::npos) {
    *error = yaml.string() + " has no '" + written + "'";
    return false;
  }
  config.replace(at, written.size(), "max_compute_ms: " + std::to_string(ms));
  if (!WriteTextFile(yaml, config)) {
    *error = "cannot write " + yaml.string();
    return false;
  }
  return true;
}

// ---- /proc ------------------------------------------------------------------

std::vector<std::string> ProcessArgs(pid_t pid) {
  const std::string raw = ReadTextFile("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> args;
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    args.push_back(raw.substr(start, end - start));
    start = end + 1;
  }
  return args;
}

namespace {

// State letter and ppid from /proc/PID/stat; false if gone.
bool ReadStat(pid_t pid, char* state, pid_t* ppid) {
  const std::string stat = ReadTextFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return false;
  std::istringstream in(stat.substr(paren + 1));
  in >> *state >> *ppid;
  return static_cast<bool>(in);
}

std::vector<pid_t> AllPids() {
  std::vector<pid_t> pids;
  DIR* d = opendir("/proc");
  if (d == nullptr) return pids;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long v = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && v > 0) pids.push_back(static_cast<pid_t>(v));
  }
  closedir(d);
  return pids;
}

}  // namespace

std::vector<pid_t> ChildPids(pid_t parent) {
  std::vector<pid_t> children;
  for (pid_t pid : AllPids()) {
    char state = 0;
    pid_t ppid = 0;
    if (ReadStat(pid, &state, &ppid) && ppid == parent && state != 'Z' && state != 'X') children.push_back(pid);
  }
  return children;
}

std::vector<pid_t> ProcessesWithArg(const std::string& needle) {
  std::vector<pid_t> found;
  for (pid_t pid : AllPids()) {
    if (pid == getpid()) continue;
    char state = 0;
    pid_t ppid = 0;
    if (!ReadStat(pid, &state, &ppid) || state == 'Z' || state == 'X') continue;
    for (const std::string& arg : ProcessArgs(pid)) {
      if (arg.find(needle) != std::string::npos) {
        found.push_back(pid);
        break;
      }
    }
  }
  return found;
}

std::optional<std::string> ProcStatusField(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  if (!in) return std::nullopt;
  std::string line;
  const std::string prefix = field + ":";
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) != 0) continue;
    std::string value = line.substr(prefix.size());
    const size_t b = value.find_first_not_of(" \t");
    const size_t e = value.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : value.substr(b, e - b + 1);
  }
  return std::nullopt;
}

long RssKiB(pid_t pid) {
  auto v = ProcStatusField(pid, "VmRSS");
  if (!v) return -1;
  return std::strtol(v->c_str(), nullptr, 10);  // "12345 kB"
}

bool ProcessAlive(pid_t pid) {
  char state = 0;
  pid_t ppid = 0;
  return ReadStat(pid, &state, &ppid) && state != 'Z' && state != 'X';
}

std::set<std::string> ShmObjectsMappedBy(const std::vector<pid_t>& pids) {
  static const std::string kShm = "/dev/shm/";
  std::set<std::string> names;
  for (const pid_t pid : pids) {
    std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
    for (std::string line; std::getline(maps, line);) {
      const size_t at = line.find(kShm);
      if (at == std::string::npos) continue;
      std::string name = line.substr(at + kShm.size());
      if (const size_t deleted = name.find(" (deleted)"); deleted != std::string::npos) continue;
      names.insert(name);
    }
  }
  return names;
}

std::set<std::string> StillInShm(const std::set<std::string>& names) {
  std::set<std::string> left;
  std::error_code ec;
  for (const auto& name : names) {
    if (fs::exists(fs::path("/dev/shm") / name, ec)) left.insert(name);
  }
  return left;
}

// ---- ServerProcess ------------------------------------------------------------

std::string ServerConfigYaml(const std::string& repository, const ServerProcess::Options& options) {
  std::ostringstream y;
  y << "# written by tests/integration/server_process.cc\n"
    << "repository: " << repository << "\n"
    << "listen_address: 127.0.0.1\n"
    << "hosts:\n";
  for (const auto& h : options.hosts) {
    y << "  - {name: " << h.name << ", device: cpu, cpu_affinity: [" << h.cpu << "], threads: 1, executors: "
      << h.executors << (h.binary.empty() ? "" : ", binary: " + h.binary) << "}\n";
  }
  y << "limits: {max_request_bytes: " << options.max_request_bytes
    << ", heartbeat_timeout_ms: " << options.heartbeat_timeout_ms << ", drain_timeout_ms: " << options.drain_timeout_ms
    << (options.extra_limits.empty() ? "" : ", " + options.extra_limits) << "}\n";
  y << options.extra_config;
  return y.str();
}

const std::string& ServerProcess::last_start_error() { return g_last_start_error; }

std::unique_ptr<ServerProcess> ServerProcess::Start(const Options& options) {
  g_last_start_error.clear();
  std::unique_ptr<ServerProcess> server(new ServerProcess());
  server->dir_ = std::make_unique<TempDir>("es_server_");
  server->hosts_ = options.hosts;
  const std::string repo = options.repository.empty() ? DemoRepository() : options.repository;
  if (repo.empty()) {
    g_last_start_error = "no model repository";
    return nullptr;
  }
  server->config_path_ = server->dir() / "server.yaml";
  server->log_path_ = server->dir() / "server.log";
  if (!WriteTextFile(server->config_path_, ServerConfigYaml(repo, options))) {
    g_last_start_error = "cannot write the config";
    return nullptr;
  }

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    g_last_start_error = std::string("pipe2: ") + std::strerror(errno);
    return nullptr;
  }
  const int log_fd = open(server->log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  std::string bin = es::test_paths::kServerBin;
  std::string config = server->config_path_.string();
  std::vector<char*> argv = {bin.data(),
                             const_cast<char*>("--config"),
                             config.data(),
                             const_cast<char*>("--grpc-port"),
                             const_cast<char*>("0")};
  std::vector<std::string> extra = options.extra_args;
  for (std::string& arg : extra) argv.push_back(arg.data());
  if (options.metrics) {
    argv.push_back(const_cast<char*>("--metrics-port"));
    argv.push_back(const_cast<char*>("0"));
  } else {
    argv.push_back(const_cast<char*>("--no-metrics"));
  }
  // HTTP/REST on a free port (never the default 8000: tests run side by side).
  if (options.http) {
    argv.push_back(const_cast<char*>("--http-port"));
    argv.push_back(const_cast<char*>("0"));
  } else {
    argv.push_back(const_cast<char*>("--no-http"));
  }
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    g_last_start_error = std::string("fork: ") + std::strerror(errno);
    return nullptr;
  }
  if (pid == 0) {
    setpgid(0, 0);
    // The server never outlives the test process, even when ctest's timeout
    // kills it (the server's own group is not the test's).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(out[1], 1);
    if (log_fd >= 0) dup2(log_fd, 2);
    for (const std::string& kv : options.env) putenv(const_cast<char*>(kv.c_str()));
    execv(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid, pid);
  Watchdog::RegisterProcessGroup(pid);
  server->pid_ = pid;
  close(out[1]);
  if (log_fd >= 0) close(log_fd);
  server->stdout_fd_ = out[0];

  // Wait for "grpc listening on HOST:PORT\n".
  std::string text;
  const auto deadline = Clock::now() + options.startup_timeout;
  bool eof = false;
  while (text.find('\n') == std::string::npos && !eof) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    eof = !ReadSome(server->stdout_fd_, std::min(left, milliseconds(200)), &text);
  }
  const size_t nl = text.find('\n');
  if (nl == std::string::npos) {
    int status = 0;
    std::string why =
        eof ? "closed stdout"
            : "did not print its listening line within " + std::to_string(options.startup_timeout.count()) + " s";
    if (eof && server->WaitExit(milliseconds(5000), &status)) why += " and exited (" + WaitStatusString(status) + ")";
    g_last_start_error = "ensemble-server " + why + "; stdout: '" + text + "'; log:\n" + server->LogTail();
    return nullptr;  // the destructor kills what is left
  }
  const std::string line = text.substr(0, nl);
  const std::string prefix = "grpc listening on ";
  if (line.compare(0, prefix.size(), prefix) != 0 || line.rfind(':') == std::string::npos) {
    g_last_start_error = "unexpected first stdout line: '" + line + "'";
    return nullptr;
  }
  server->address_ = line.substr(prefix.size());
  text = text.substr(nl + 1);
  if (options.http) {
    // "http listening on HOST:PORT" comes right after the grpc line.
    while (text.find('\n') == std::string::npos && !eof && Clock::now() < deadline) {
      eof = !ReadSome(server->stdout_fd_, milliseconds(200), &text);
    }
    const size_t nl_http = text.find('\n');
    const std::string http_prefix = "http listening on ";
    if (nl_http == std::string::npos || text.compare(0, http_prefix.size(), http_prefix) != 0) {
      g_last_start_error = "no 'http listening on' line after the grpc line; stdout: '" + text + "'";
      return nullptr;
    }
    server->http_address_ = text.substr(http_prefix.size(), nl_http - http_prefix.size());
    text = text.substr(nl_http + 1);
  }
  if (options.metrics) {
    // The next line (after the grpc line and, when on, the http line).
    while (text.find('\n') == std::string::npos && !eof && Clock::now() < deadline) {
      eof = !ReadSome(server->stdout_fd_, milliseconds(200), &text);
    }
    const size_t nl2 = text.find('\n');
    const std::string metrics_prefix = "metrics listening on ";
    if (nl2 == std::string::npos || text.compare(0, metrics_prefix.size(), metrics_prefix) != 0) {
      g_last_start_error = "no 'metrics listening on' line after the grpc line; stdout: '" + text + "'";
      return nullptr;
    }
    server->metrics_address_ = text.substr(metrics_prefix.size(), nl2 - metrics_prefix.size());
    text = text.substr(nl2 + 1);
  }
  server->stdout_extra_ = text;

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  server->credentials_ =
      options.channel_credentials ? options.channel_credentials : grpc::InsecureChannelCredentials();
  server->channel_ = grpc::CreateCustomChannel(server->address_, server->credentials_, args);
  if (!server->channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    g_last_start_error = "cannot connect to " + server->address_;
    return nullptr;
  }
  return server;
}

ServerProcess::~ServerProcess() {
  // Hosts outlive the group kill only if they changed group; do not leave them.
  const std::map<std::string, pid_t> hosts = pid_ > 0 && !exited_ ? HostPids() : std::map<std::string, pid_t>{};
  if (pid_ > 0 && !exited_) {
    kill(-pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    exited_ = true;
  }
  for (const auto& [name, pid] : hosts) kill(pid, SIGKILL);
  if (pid_ > 0) Watchdog::UnregisterProcessGroup(pid_);
  if (stdout_fd_ >= 0) close(stdout_fd_);
  // Inside a test: that test failed; in TearDownTestSuite: a test of the suite did.
  const auto* unit = ::testing::UnitTest::GetInstance();
  const bool failed = unit->current_test_info() != nullptr
                          ? ::testing::Test::HasFailure()
                          : unit->current_test_suite() != nullptr && unit->current_test_suite()->Failed();
  if (failed && !log_path_.empty()) {
    std::fprintf(stderr, "---- ensemble-server log (%s), tail ----\n%s\n---- end of log ----\n", log_path_.c_str(),
                 LogTail().c_str());
  }
}

std::string ServerProcess::LogTail(size_t max_bytes) const {
  const std::string log = ReadTextFile(log_path_);
  return log.size() <= max_bytes ? log : "[...]" + log.substr(log.size() - max_bytes);
}

std::unique_ptr<inference::GRPCInferenceService::Stub> ServerProcess::Stub() const {
  return inference::GRPCInferenceService::NewStub(channel_);
}

std::unique_ptr<inference::GRPCInferenceService::Stub> ServerProcess::NewConnectionStub() const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // its own TCP connection
  auto channel = grpc::CreateCustomChannel(address_, credentials_, args);
  // Connect before handing it out: many fresh connections at once can see a
  // transient connect failure, which a call without wait_for_ready would
  // report as UNAVAILABLE although the server is fine (gRPC retries the
  // connection with backoff while we wait here).
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(15))) {
    ADD_FAILURE() << "could not connect a new channel to " << address_ << " within 15 s";
  }
  return inference::GRPCInferenceService::NewStub(channel);
}

std::unique_ptr<grpc::health::v1::Health::Stub> ServerProcess::HealthStub() const {
  return grpc::health::v1::Health::NewStub(channel_);
}

std::map<std::string, pid_t> ServerProcess::HostPids() const {
  std::map<std::string, pid_t> hosts;
  for (pid_t child : ChildPids(pid_)) {
    const std::vector<std::string> args = ProcessArgs(child);
    if (args.empty() || fs::path(args[0]).filename() != "ensemble-model-host") continue;
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--host") hosts[args[i + 1]] = child;
    }
  }
  return hosts;
}

std::map<std::string, pid_t> ServerProcess::WaitForHosts(milliseconds timeout,
                                                         const std::map<std::string, pid_t>& previous) const {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    std::map<std::string, pid_t> hosts = HostPids();
    bool all = true;
    for (const auto& h : hosts_) {
      auto it = hosts.find(h.name);
      auto old = previous.find(h.name);
      if (it == hosts.end() || (old != previous.end() && old->second == it->second)) all = false;
    }
    if (all) return hosts;
    if (Clock::now() >= deadline) return {};
    std::this_thread::sleep_for(milliseconds(5));
  }
}

void ServerProcess::Signal(int sig) const {
  if (pid_ > 0 && !exited_) kill(pid_, sig);
}

bool ServerProcess::WaitExit(milliseconds timeout, int* wait_status) {
  if (exited_) return true;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const pid_t r = waitpid(pid_, wait_status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      return true;
    }
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
}

std::string ServerProcess::RemainingStdout() {
  std::string text = std::move(stdout_extra_);
  stdout_extra_.clear();
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < deadline && ReadSome(stdout_fd_, milliseconds(100), &text)) {
  }
  return text;
}

}  // namespace es::it
