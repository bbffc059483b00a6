// SubmissionBurst: tells the hosts that member calls submitted one after
// another belong together, so that a host need not wake the router for each
// of their completions.
//
// An ensemble's fan-out (or a cascade's stage) submits its member calls one
// after another from one thread, and waits for all of them; each host runs
// the calls placed on it one after another and, without a hint, would wake
// the router's completion thread for every completion (a context switch
// each, several per request). The caller opens a SubmissionBurst and, before
// each member call, MarkNext(): the next submission this thread makes, and
// only that one, carries the burst's number (ipc::RequestDesc::burst) and,
// unless it is the last, ipc::kMoreFollow (HostConnection takes the mark
// with Take()). The host then publishes those completions without a wake-up,
// and the completion of the burst's later call wakes the router for all of
// them (ipc::HostEnd says what else does).
//
// One submission per mark: what else the thread submits while it makes the
// member call (batches of other requests, a later cascade stage started by
// an answer that came at once) is not marked. A hint, never a promise: a
// burst whose last call never reaches a host (a member refused before it)
// leaves its completions held until the host takes a request of another
// burst or finds none, or publishes a completion kMaxHeldWakeNs or more
// after the first held one. Not for a caller that may answer before every
// call is back (an ensemble with member_timeout_ms): a held completion may
// wait for the burst's later calls on the same host.
//
// Thread safety: the state is per thread. Bursts nest: an inner one (a
// member that is itself an ensemble) has a number of its own, and when it
// ends the outer one is back, with no mark armed.
#pragma once

#include <cstdint>

namespace es {

// A submission's mark: its burst's number (0: none) and whether more of the
// burst follow it.
struct SubmissionMark {
  uint32_t burst = 0;
  bool more_follow = false;
};

class SubmissionBurst {
 public:
  SubmissionBurst();  // a new number; no mark armed
  ~SubmissionBurst() { armed_ = SubmissionMark{}; }
  SubmissionBurst(const SubmissionBurst&) = delete;
  SubmissionBurst& operator=(const SubmissionBurst&) = delete;

  // Arms the mark of this thread's next submission: this burst's number,
  // and kMoreFollow unless `last`.
  void MarkNext(bool last) { armed_ = SubmissionMark{id_, !last}; }

  // The mark armed on the calling thread (none: burst 0), disarmed.
  static SubmissionMark Take() {
    const SubmissionMark mark = armed_;
    armed_ = SubmissionMark{};
    return mark;
  }

 private:
  static inline thread_local SubmissionMark armed_;
  const uint32_t id_;
};

}  // namespace es
