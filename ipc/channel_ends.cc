#include "ipc/channel_ends.h"

#include <sched.h>
#include <time.h>

namespace es::ipc {
namespace {

int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

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
  int64_t now = 0;
  if (hold && held_since_ns_ != 0) {
    // Held long enough, or held for another burst (whose next request would
    // not wake the router for this one): this one wakes the router, for
    // itself and the rest.
    now = MonotonicNs();
    if (now - held_since_ns_ >= kMaxHeldWakeNs || answered->burst != held_burst_) hold = false;
  } else if (hold) {
    now = MonotonicNs();
  }
  while (!ring.TryPush(completion, /*notify=*/!hold)) {
    if (stop.load(std::memory_order_relaxed)) return false;
    ring.Notify();  // full: the router must be awake to drain it
    sched_yield();
  }
  if (!hold) {
    held_since_ns_ = 0;  // the wake-up covers every completion before it
    holding_.store(false, std::memory_order_relaxed);
    return true;
  }
  if (held_since_ns_ == 0) held_since_ns_ = now;
  held_burst_ = answered->burst;
  holding_.store(true, std::memory_order_relaxed);
  return true;
}

void HostEnd::WakeRouterIfHeld() {
  MutexLock lock(&push_mu_);
  WakeRouterIfHeldLocked();
}

void HostEnd::WakeRouterIfHeldLocked() {
  if (held_since_ns_ == 0) return;
  held_since_ns_ = 0;
  holding_.store(false, std::memory_order_relaxed);
  channel_->completions().Notify();
}

}  // namespace es::ipc
