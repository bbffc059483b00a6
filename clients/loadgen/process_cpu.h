// The CPU time of another process on this machine, from /proc: what
// --server-pid reports, the server's own CPU per request and that of its
// model hosts (the server's child processes).
//
// A process's user + system time is fields 14 and 15 (utime, stime) of
// /proc/PID/stat, in clock ticks (sysconf(_SC_CLK_TCK)); it covers every
// thread of the process, none of its children. The children are listed from
// /proc/PID/task/*/children (each thread's own children), anew at every
// sample, so that a host restarted by the server is counted: its
// replacement is a new pid, counted from zero (ChildrenCpuBetween).
//
// Contract: Linux only; nothing here throws or keeps state. A reader returns
// nullopt when the process is gone or its stat is unreadable; a child that
// exits between being listed and being read is skipped, not an error. The
// figures only mean something for a process of this machine, which is why
// --server-pid is the user's word that the server runs here.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string_view>
#include <vector>

namespace es::loadgen {

// User + system seconds from the text of a /proc/PID/stat, ticks converted
// at `ticks_per_second`. The comm field (2) is in parentheses and may hold
// spaces and ')' itself: the fields are counted after the LAST ')'. nullopt
// when the text is no such line (no "(...)", too few fields, not numbers)
// or ticks_per_second <= 0.
std::optional<double> ParseStatCpuSeconds(std::string_view stat, long ticks_per_second);

// User + system seconds of process `pid` so far (every thread of it).
std::optional<double> ReadCpuSeconds(pid_t pid);

// The children of `pid` now, from /proc/PID/task/*/children, sorted; empty
// when it has none, or is gone.
std::vector<pid_t> ChildProcesses(pid_t pid);

// One reading of a process and of its children, taken together.
struct ProcessCpu {
  double own_s = 0;                    // the process's own threads
  std::map<pid_t, double> children_s;  // each child alive at the reading: its own CPU
  double ChildrenSeconds() const;      // their sum
};

// nullopt when `pid` is gone (or its stat unreadable).
std::optional<ProcessCpu> ReadProcessCpu(pid_t pid);

// CPU seconds the children used between two readings (a before b): for each
// child of b, its time minus its time at a, or all of it when it was not a
// child then (a host started, or restarted, since; a pid whose time went
// backwards is a reused pid, a new child). A child that exited between the
// two readings takes what it used after `a` with it: a restarted host's last
// moments are missed, never counted twice.
double ChildrenCpuBetween(const ProcessCpu& a, const ProcessCpu& b);

}  // namespace es::loadgen
