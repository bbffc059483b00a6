#include "model_host/launcher.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

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

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return Status::Internal(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    // The router blocks termination signals in its threads to sigwait() for
    // them; the child must start with a clean mask and default handlers.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    if (!spec.cpu_affinity.empty() && sched_setaffinity(0, sizeof(cpus), &cpus) != 0) _exit(125);
    for (const auto& [from, to] : spec.pass_fds) {
      if (from == to) {
        fcntl(to, F_SETFD, 0);  // keep it across exec
      } else if (dup2(from, to) < 0) {
        _exit(126);
      }
    }
    execve(argv[0], argv.data(), envp.data());
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
