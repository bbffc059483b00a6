// CallbackTimer: runs callbacks at given moments on one thread of its own.
//
// The ensembles' member_timeout_ms needs "answer without the slow member
// when this moment comes" without a thread per request: every pending
// moment sits in one ordered queue and one thread sleeps until the earliest.
// The thread starts with the first Schedule(), so a server whose ensembles
// set no timeout has none.
//
// A callback runs at or after its moment, never before, outside the timer's
// lock (it may Schedule() again). Callbacks still pending at destruction
// are dropped, not run: owners hold what a callback needs through weak
// pointers, or outlive the timer.
//
// Thread safety: Schedule() from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <thread>

#include "common/mutex.h"

namespace es {

class CallbackTimer {
 public:
  using Clock = std::chrono::steady_clock;

  CallbackTimer() = default;
  ~CallbackTimer();
  CallbackTimer(const CallbackTimer&) = delete;
  CallbackTimer& operator=(const CallbackTimer&) = delete;

  void Schedule(Clock::time_point when, std::function<void()> callback);

 private:
  void Loop();

  Mutex mu_;
  CondVar cv_;
  std::multimap<Clock::time_point, std::function<void()>> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started under mu_ by the first Schedule; joined by the destructor
};

}  // namespace es
