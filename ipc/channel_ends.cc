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
  {
    MutexLock lock(&pop_mu_);
    if (ring.TryPop(request)) return true;
  }
  ring.WaitForData(policy_.spin, policy_.sleep_timeout_us);
  MutexLock lock(&pop_mu_);
  return ring.TryPop(request);
}

bool HostEnd::Complete(const CompletionDesc& completion, const std::atomic<bool>& stop) {
  MutexLock lock(&push_mu_);
  while (!channel_->completions().TryPush(completion)) {
    if (stop.load(std::memory_order_relaxed)) return false;
    sched_yield();
  }
  return true;
}

}  // namespace es::ipc
