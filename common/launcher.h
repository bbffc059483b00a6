// Launcher: spawns and reaps the per-device child processes: the router's
// model hosts (server/hosts/) and ensemble-train's local ranks (training/).
// Torch-free, so the router links it.
//
// A child is tied to its parent's life: PR_SET_PDEATHSIG(SIGKILL) is set in
// the child before exec, plus a check that the parent did not die before
// that, so killing the router with SIGKILL takes its hosts with it.
// Descriptors to pass are dup2()ed onto fixed numbers in the child; every
// other descriptor of the parent is close-on-exec and stays behind.
//
// Thread safety: Spawn() may be called from any thread; between fork and exec
// the child only makes async-signal-safe calls.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace es {

struct LaunchSpec {
  std::string binary;                           // absolute path
  std::vector<std::string> args;                // argv[1..]
  std::vector<std::pair<int, int>> pass_fds;    // (parent fd, fd number in the child)
  std::vector<std::pair<std::string, std::string>> env;  // added to the environment (overriding)
  // CPUs the child runs on, set before exec so that every thread the child
  // ever has inherits it (libraries start threads before main; empty = all).
  std::vector<int> cpu_affinity;
};

// Starts the child; returns its pid.
StatusOr<pid_t> Spawn(const LaunchSpec& spec);

// The folder of the running executable (so the router finds its hosts beside it).
std::string ExecutableDir();

// Outcome of a child: "exited with code N" or "killed by signal SIGKILL".
std::string DescribeWaitStatus(int wait_status);

}  // namespace es
