// Futex wait/wake on a 32-bit word in shared memory (process-shared, so not
// FUTEX_PRIVATE_FLAG): the sleeping half of the channel's wake-up protocol.
#pragma once

#include <atomic>
#include <cstdint>

namespace es::ipc {

// Sleeps while *word == expected, at most timeout_us (< 0: no limit).
// Returns on wake, value change, timeout or signal; callers re-check state.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_us);

// Wakes up to `count` sleepers on the word.
void FutexWake(std::atomic<uint32_t>* word, int count);

}  // namespace es::ipc
