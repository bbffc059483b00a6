#include "server/core/callback_timer.h"

#include <utility>

namespace es {

CallbackTimer::~CallbackTimer() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

void CallbackTimer::Schedule(Clock::time_point when, std::function<void()> callback) {
  MutexLock lock(&mu_);
  if (stop_) return;
  if (!started_) {
    started_ = true;
    thread_ = std::thread([this] { Loop(); });
  }
  // Only a new earliest moment shortens the thread's sleep.
  const bool earliest = pending_.empty() || when < pending_.begin()->first;
  pending_.emplace(when, std::move(callback));
  if (earliest) cv_.NotifyOne();
}

void CallbackTimer::Loop() {
  MutexLock lock(&mu_);
  while (!stop_) {
    if (pending_.empty()) {
      cv_.Wait(&mu_);
      continue;
    }
    auto first = pending_.begin();
    if (Clock::now() < first->first) {
      cv_.WaitUntil(&mu_, first->first);
      continue;  // woken early (a new earliest, or stop): look again
    }
    std::function<void()> due = std::move(first->second);
    pending_.erase(first);
    lock.Unlock();
    due();
    lock.Lock();
  }
}

}  // namespace es
