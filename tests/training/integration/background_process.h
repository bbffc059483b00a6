// BackgroundProcess: a command run in the background for the training
// command's tests (ensemble-train, `ip` in network namespaces): its own
// process group (killed whole, with SIGKILL, when the object goes without
// the process having been waited for), stdout and stderr into a log file,
// the parent-death signal set so nothing outlives a crashed test.
//
// Thread safety: one object per thread.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace es::testing {

inline std::string ReadWholeFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class BackgroundProcess {
 public:
  using Clock = std::chrono::steady_clock;

  // argv[0] is looked up on PATH when it has no slash (execvp); `env` is
  // added to this process's environment for the child.
  BackgroundProcess(std::vector<std::string> argv, const std::vector<std::pair<std::string, std::string>>& env,
                    std::filesystem::path log)
      : log_(std::move(log)) {
    const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      for (const std::string& e : env_strings) putenv(const_cast<char*>(e.c_str()));
      dup2(fd, 1);
      dup2(fd, 2);
      execvp(args[0], args.data());
      _exit(127);
    }
    ::close(fd);
  }
  BackgroundProcess(std::vector<std::string> argv, std::filesystem::path log)
      : BackgroundProcess(std::move(argv), {}, std::move(log)) {}
  ~BackgroundProcess() {
    if (!status_ && pid_ > 0) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  std::string Log() const { return ReadWholeFile(log_); }
  // The wait status, once it exited within `timeout`.
  std::optional<int> Wait(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!status_) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = status;
      } else if (Clock::now() >= deadline) {
        break;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    return status_;
  }
  // Exit code, or -1 for a signal or a timeout.
  int ExitCode(std::chrono::milliseconds timeout) {
    std::optional<int> status = Wait(timeout);
    return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  }
  // Waits until the log contains `needle`.
  bool WaitForLog(const std::string& needle, std::chrono::milliseconds timeout) const {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (Log().find(needle) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

}  // namespace es::testing
