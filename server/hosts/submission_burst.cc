#include "server/hosts/submission_burst.h"

#include <atomic>

namespace es {
namespace {

std::atomic<uint32_t> next_burst{1};

}  // namespace

SubmissionBurst::SubmissionBurst() : outer_(current_) {
  uint32_t id = next_burst.fetch_add(1, std::memory_order_relaxed);
  if (id == 0) id = next_burst.fetch_add(1, std::memory_order_relaxed);  // 0 says "none"; skipped on wrap
  current_ = SubmissionBurstState{id, true};
}

}  // namespace es
