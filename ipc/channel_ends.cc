#include "ipc/channel_ends.h"

#include <sched.h>

namespace es::ipc {

Status RouterEnd::Submit(const RequestDesc& request) {
  MutexLock lock(&submit_mu_);
  if (!channel_->requests().TryPush(request)) {
    return Status::ResourceExhausted("request ring of the host channel is full");
  }
  return Status::Ok();
}

bool RouterEnd::NextCompletion(CompletionDesc* completion) {
  auto& ring = channel_->completions();
  if (ring.TryPop(completion)) return true;
  ring.WaitForData(policy_.spin, policy_.sleep_timeout_us);
  return ring.TryPop(completion);
}

bool HostEnd::NextRequest(RequestDesc* request) {
  auto& ring = channel_->requests();
  bool got = false;
  {
    MutexLock lock(&pop_mu_);
    got = ring.TryPop(request);
  }
  if (!got) {
    if (holding_.load(std::memory_order_relaxed)) WakeRouterIfHeld();  // idle: nothing of the burst is coming soon
    ring.WaitForData(policy_.spin, policy_.sleep_timeout_us);
    MutexLock lock(&pop_mu_);
    got = ring.TryPop(request);
  }
  if (got && holding_.load(std::memory_order_relaxed)) {
    MutexLock lock(&push_mu_);
    // Another burst's request (or none's) may run long: the held completions
    // must not wait for it.
    if (request->burst == 0 || request->burst != held_burst_) WakeRouterIfHeldLocked();
  }
  return got;
}

bool HostEnd::Complete(const CompletionDesc& completion, const std::atomic<bool>& stop, const RequestDesc* answered) {
  MutexLock lock(&push_mu_);
  auto& ring = channel_->completions();
  bool hold = answered != nullptr && (answered->flags & kMoreFollow) != 0;
  const bool holding = holding_.load(std::memory_order_relaxed);  // exact: written under push_mu_ only
  // Held long enough, or held for another burst (whose next request would
  // not wake the router for this one): this one wakes the router, for
  // itself and the rest.
  if (hold && holding && (NanosecondsSince(held_since_) >= kMaxHeldWakeNs || answered->burst != held_burst_)) {
    hold = false;
  }
  while (!ring.TryPush(completion, /*notify=*/!hold)) {
    if (stop.load(std::memory_order_relaxed)) return false;
    ring.Notify();  // full: the router must be awake to drain it
    sched_yield();
  }
  if (!hold) {
    holding_.store(false, std::memory_order_relaxed);  // the wake-up covers every completion before it
    return true;
  }
  if (!holding) held_since_ = SteadyClock::now();
  held_burst_ = answered->burst;
  holding_.store(true, std::memory_order_relaxed);
  return true;
}

void HostEnd::WakeRouterIfHeld() {
  MutexLock lock(&push_mu_);
  WakeRouterIfHeldLocked();
}

void HostEnd::WakeRouterIfHeldLocked() {
  if (!holding_.load(std::memory_order_relaxed)) return;
  holding_.store(false, std::memory_order_relaxed);
  channel_->completions().Notify();
}

}  // namespace es::ipc
