// SubmissionBurst: says, on the thread that holds one, that the requests it
// submits to the hosts belong together and follow one another closely.
//
// An ensemble's fan-out submits its member calls one after another from one
// thread; each host runs the calls placed on it one after another, and
// without a hint it would wake the router's completion thread for every
// completion (a context switch each, several per request) while the
// ensemble waits for them all anyway. While a SubmissionBurst lives,
// HostConnection marks what this thread submits with the burst's number
// (ipc::RequestDesc::burst) and, until LastFollows(), ipc::kMoreFollow: the
// host then publishes those completions without a wake-up, and the
// completion of a later call, a request of another burst, or the host going
// idle wakes the router for all of them (ipc::HostEnd).
//
// A hint, never a promise: a burst whose last call never reaches a host (a
// member refused first) delays its completions only until the host takes
// another request or waits for one, or at most ipc::HostEnd::kMaxHeldWakeNs
// past the next completion it publishes.
//
// Thread safety: the state is per thread; bursts nest (the outer one is in
// force again when an inner one ends).
#pragma once

#include <cstdint>

namespace es {

// A thread's burst: its number (0: none) and whether more follow.
struct SubmissionBurstState {
  uint32_t id = 0;
  bool more_follow = false;
};

class SubmissionBurst {
 public:
  SubmissionBurst();
  ~SubmissionBurst() { current_ = outer_; }
  SubmissionBurst(const SubmissionBurst&) = delete;
  SubmissionBurst& operator=(const SubmissionBurst&) = delete;

  // The next submission is the burst's last: it says no more follow.
  void LastFollows() { current_.more_follow = false; }

  // The calling thread's burst number (0: none) and whether more follow.
  static uint32_t Current() { return current_.id; }
  static bool MoreFollow() { return current_.more_follow; }

 private:
  static inline thread_local SubmissionBurstState current_;
  const SubmissionBurstState outer_;
};

}  // namespace es
