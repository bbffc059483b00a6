#include "ipc/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace es::ipc {

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_us) {
  timespec ts{};
  timespec* tsp = nullptr;
  if (timeout_us >= 0) {
    ts.tv_sec = timeout_us / 1000000;
    ts.tv_nsec = (timeout_us % 1000000) * 1000;
    tsp = &ts;
  }
  // The atomic's object representation is the plain 32-bit word (asserted in
  // layout.h), which is what the kernel compares against.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, tsp, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

}  // namespace es::ipc
