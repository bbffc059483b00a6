// DescribeThreads: what a process's threads are doing, in one line, for the
// log when a host is declared hung (no heartbeat): a host whose every thread,
// its heartbeat thread included, stopped at once was frozen from outside
// (stopped, a kernel lock, the machine) rather than by its own code, and the
// line says which.
//
// Contract: DescribeThreads(pid) reads /proc/PID/task/*/stat and wchan and
// returns e.g. "5 threads: S futex_wait_queue x3, S hrtimer_nanosleep x1,
// R x1" (state letter as in proc(5), then the kernel function the thread
// waits in, if any; groups in order of first appearance), or "threads
// unreadable" when the process is gone or /proc cannot be read. Any thread
// may call it; it does not stop or signal the process.
#pragma once

#include <sys/types.h>

#include <string>

namespace es {

std::string DescribeThreads(pid_t pid);

}  // namespace es
