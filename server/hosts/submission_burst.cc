#include "server/hosts/submission_burst.h"

#include <atomic>

namespace es {
namespace {

std::atomic<uint32_t> next_burst{1};

uint32_t NewBurstNumber() {
  uint32_t id = next_burst.fetch_add(1, std::memory_order_relaxed);
  if (id == 0) id = next_burst.fetch_add(1, std::memory_order_relaxed);  // 0 says "none"; skipped on wrap
  return id;
}

}  // namespace

SubmissionBurst::SubmissionBurst() : id_(NewBurstNumber()) { armed_ = SubmissionMark{}; }

}  // namespace es
