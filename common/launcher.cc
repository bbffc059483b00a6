#include "common/launcher.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "common/errno_text.h"

extern char** environ;

namespace es {

StatusOr<pid_t> Spawn(const LaunchSpec& spec) {
  // Everything the child needs is built before fork: after fork in a
  // multi-threaded parent only async-signal-safe calls are allowed.
  std::vector<std::string> env_strings;
  // spec.env overrides: getenv() would return the first of two entries.
  auto overridden = [&spec](const char* entry) {
    for (const auto& [key, value] : spec.env) {
      if (std::strncmp(entry, key.c_str(), key.size()) == 0 && entry[key.size()] == '=') return true;
    }
    return false;
  };
  for (char** e = environ; *e != nullptr; ++e) {
    if (!overridden(*e)) env_strings.emplace_back(*e);
  }
  for (const auto& [key, value] : spec.env) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::vector<std::string> arg_strings{spec.binary};
  arg_strings.insert(arg_strings.end(), spec.args.begin(), spec.args.end());
  std::vector<char*> argv;
  for (auto& s : arg_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int cpu : spec.cpu_affinity) CPU_SET(cpu, &cpus);

  // What the child says (on its stderr, which may be a pipe the parent
  // reads) when it cannot become the program: built here, written with
  // write(2) there.
  std::string cpus_text;
  for (int cpu : spec.cpu_affinity) {
    if (!cpus_text.empty()) cpus_text.push_back(',');
    cpus_text.append(std::to_string(cpu));
  }
  const std::string affinity_error =
      "launcher: cannot pin the process to CPU(s) " + cpus_text + " (sched_setaffinity failed)\n";
  const std::string exec_error = "launcher: cannot execute " + spec.binary + "\n";
  auto say = [](const std::string& text) {
    if (write(STDERR_FILENO, text.data(), text.size()) < 0) {
      // nothing else can be done between fork and exec
    }
  };

  constexpr size_t kMaxPassFds = 16;
  if (spec.pass_fds.size() > kMaxPassFds) return Status::InvalidArgument("too many descriptors to pass");
  int staged[kMaxPassFds];
  // Copies go above every target, so no copy is overwritten by a later move.
  int staging_fd = 0;
  for (const auto& [from, to] : spec.pass_fds) staging_fd = std::max(staging_fd, to + 1);
  const std::string pass_error = "launcher: cannot pass the descriptors to the child (fcntl/dup2 failed)\n";

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return Status::Internal(std::string("fork: ") + es::ErrnoText(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    // The router blocks termination signals in its threads to sigwait() for
    // them; the child must start with a clean mask and default handlers.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    // Descriptors first: a stderr passed in hears the failures below.
    // Two steps, so that one pass's target cannot be another's source
    // (the channel's fd number may be the one stderr's pipe has): every
    // source is first copied above all of them, then moved to its place.
    for (size_t i = 0; i < spec.pass_fds.size() && i < kMaxPassFds; ++i) {
      staged[i] = fcntl(spec.pass_fds[i].first, F_DUPFD_CLOEXEC, staging_fd);
      if (staged[i] < 0) {
        say(pass_error);  // stderr is still the parent's here
        _exit(126);
      }
    }
    for (size_t i = 0; i < spec.pass_fds.size() && i < kMaxPassFds; ++i) {
      if (dup2(staged[i], spec.pass_fds[i].second) < 0) {  // dup2 clears close-on-exec
        say(pass_error);
        _exit(126);
      }
    }
    if (!spec.cpu_affinity.empty() && sched_setaffinity(0, sizeof(cpus), &cpus) != 0) {
      say(affinity_error);
      _exit(125);
    }
    execve(argv[0], argv.data(), envp.data());
    say(exec_error);
    _exit(127);
  }
  return pid;
}

std::string ExecutableDir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const char* name = sigabbrev_np(WTERMSIG(wait_status));
    return std::string("killed by signal SIG") + (name ? name : std::to_string(WTERMSIG(wait_status)).c_str());
  }
  return "changed state " + std::to_string(wait_status);
}

}  // namespace es
