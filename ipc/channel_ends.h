// RouterEnd and HostEnd: the two sides of a Channel, each making the rings'
// SPSC contract hold for a side that has several threads.
//
// Router: many gRPC threads Submit() requests (serialised by a local mutex);
// one completion thread per host calls NextCompletion().
// Host: several executor threads call NextRequest() and Complete(), each
// serialised by a local mutex. Waiting never holds a mutex, and no mutex is
// ever in shared memory, so the death of the peer cannot block this side.
//
// Thread safety: all methods are thread-safe as described above.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/mutex.h"
#include "common/status.h"
#include "common/steady_clock.h"
#include "ipc/channel.h"

namespace es::ipc {

// How long a waiting side polls before it sleeps in the kernel. Polling saves
// the futex wake-up but burns the core while it lasts. The default, 100 polls
// (about 2 µs here: a pause is 16 ns), comes from bench-ipc on the 2-core
// development VM: a 64-byte round trip took 12.1 µs with 10 polls, 4.5 µs
// with 100, 1.1 µs with 1,000 and 10,000. But end to end (a model's forward
// takes 100 µs and more, longer than any affordable spin) 10,000 polls made
// batch-1 latency 1.5x worse, because the spinning completion thread takes
// the core a host needs, while 0, 100 and 1,000 were within noise of each
// other. 100 keeps most of the small-message gain at a negligible cost.
struct WaitPolicy {
  int spin = 100;                   // polls (each a CPU pause) before sleeping
  int64_t sleep_timeout_us = 50000; // a sleeper re-checks shutdown this often
};

class RouterEnd {
 public:
  explicit RouterEnd(Channel* channel, WaitPolicy policy = {}) : channel_(channel), policy_(policy) {}

  // Publishes a request; RESOURCE_EXHAUSTED when the request ring is full.
  Status Submit(const RequestDesc& request);
  // Completion thread only: true with a completion, false after a timed wait.
  bool NextCompletion(CompletionDesc* completion);
  // Wakes host executors (e.g. after setting stop_requested).
  void WakeHost() { channel_->requests().NotifyConsumer(); }

 private:
  Channel* channel_;
  WaitPolicy policy_;
  Mutex submit_mu_;  // serialises the producers of the request ring
};

class HostEnd {
 public:
  // A completion held back wakes the router at the latest with a completion
  // published this long after it (no timer: checked at that completion).
  static constexpr int64_t kMaxHeldWakeNs = 100'000;

  explicit HostEnd(Channel* channel, WaitPolicy policy = {}) : channel_(channel), policy_(policy) {}

  // True with a request; false after a timed wait (caller checks for stop).
  // It wakes the router for the completions held back (see Complete) before
  // it waits, and before it returns a request that is not of their burst.
  bool NextRequest(RequestDesc* request);
  // Publishes a completion, waiting while the completion ring is full (the
  // router's completion thread always drains it). Gives up and returns false
  // only if `stop` becomes true meanwhile. `answered` (may be null) is the
  // request it answers. When that says kMoreFollow the router's completion
  // thread is not woken for this completion now but, with every completion
  // held before it, by the first of: a completion that is not held; a
  // completion published kMaxHeldWakeNs or more after the first held one,
  // or for another burst; the ring full; NextRequest (above);
  // WakeRouterIfHeld(). Holding saves the router a wake-up (a context
  // switch) per member call of an ensemble whose calls run one after another
  // on this host while it waits for them all.
  //
  // Contract: a thread that calls Complete calls NextRequest or
  // WakeRouterIfHeld next (an executor's loop does), so a held wake-up is
  // never left behind by the thread that held it.
  bool Complete(const CompletionDesc& completion, const std::atomic<bool>& stop, const RequestDesc* answered = nullptr);
  // Wakes the router for the completions held back, if any (an executor
  // that stops).
  void WakeRouterIfHeld();

 private:
  void WakeRouterIfHeldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(push_mu_);

  Channel* channel_;
  WaitPolicy policy_;
  Mutex pop_mu_;   // serialises the consumers of the request ring
  Mutex push_mu_;  // serialises the producers of the completion ring
  // Whether a wake-up is held. Written under push_mu_ only, and read
  // without it to skip the lock, so another thread may see it late; the
  // thread that held always sees its own store when it next calls
  // NextRequest (the contract above).
  std::atomic<bool> holding_{false};
  // While holding: when the oldest completion published without a wake-up
  // was, and the burst of the requests the held ones answered (one burst
  // only: a completion of another wakes the router).
  SteadyClock::time_point held_since_ ABSL_GUARDED_BY(push_mu_);
  uint32_t held_burst_ ABSL_GUARDED_BY(push_mu_) = 0;
};

}  // namespace es::ipc
