// SpscRing<T>: a bounded single-producer single-consumer ring of fixed-size
// descriptors in shared memory, with a spin-then-futex wake-up.
//
// Across processes the ring is strictly SPSC: one process produces, the other
// consumes. Several threads on one side serialise through a process-local
// mutex on that side (see Channel), so no lock in shared memory is ever held
// by a peer that may die: a dead producer leaves at worst an unpublished slot.
//
// Wake-up protocol (an event count): the consumer spins `spin` polls, then
// reads `seq`, announces itself in `sleepers`, re-checks, and sleeps on `seq`.
// The producer publishes the slot and, only if `sleepers` is non-zero, bumps
// `seq` and calls futex wake. The seq_cst fences order "publish, then read
// sleepers" against "announce, then re-check", so a wake-up is never lost; a
// bump between the consumer's read of `seq` and its sleep makes the futex
// return at once. While nobody sleeps the producer touches no shared line but
// the slot and `tail`. The timed sleep is a second line of defence and lets
// the caller notice shutdown or peer death.
//
// One wake-up per sleep: a burst of pushes (an ensemble's members placed on
// one host, a host's completions) used to make a futex call each while the
// woken consumer was still on its way back (measured: 0.9 futex calls per
// member call of a 16-member ensemble). The producer that wakes sets
// `wake_pending`, and the pushes after it skip the call until a consumer
// clears the flag, which it does before it announces itself asleep again.
// Nothing is lost: a consumer that sleeps has cleared the flag before its
// re-check, so a push after that re-check finds the flag clear and wakes it,
// and a push before it is seen by the re-check. The wake stays a wake-all, so
// with several consumer threads every sleeper is woken by the first push.
// NotifyConsumer() (shutdown, interruption) wakes regardless of the flag.
// A producer may also push without a wake-up (TryPush's `notify` false) and
// call Notify() later, which wakes a sleeper for everything published by
// then: the host does so for completions the router does not need at once
// (ipc::HostEnd, kMoreFollow).
// A peer that writes the flag can only delay its own side's wake-ups, as it
// could by never waking at all; the timed sleep bounds that.
//
// Each side also caches the other side's index (the producer `head`, the
// consumer `tail`) and re-reads it only when the cached value says full or
// empty, which saves a cache-line transfer on most operations.
//
// Only UsedBytes(item) of each slot is copied (see layout.h).
//
// Memory safety against a hostile peer: the capacity is a snapshot taken at
// attach and every slot index is masked with it, so whatever the peer writes
// into head, tail or a slot, each copy stays inside the ring's slots. The
// consumer copies a slot out before it reads a field of it, so the peer
// cannot change a descriptor between its check and its use.
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>

#include "ipc/futex.h"
#include "ipc/layout.h"

namespace es::ipc {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

template <typename T>
class SpscRing {
 public:
  SpscRing() = default;
  // `capacity` is the validated snapshot taken at attach (a power of two),
  // never re-read from the segment: the peer can write the control block.
  SpscRing(RingControl* control, T* slots, uint64_t capacity)
      : control_(control), slots_(slots), capacity_(capacity) {}

  uint64_t capacity() const { return capacity_; }

  // Producer side. False when the ring is full. With `notify` false the
  // sleeping consumer is not woken for this item: the producer owes it a
  // Notify() (which wakes it for every item published so far).
  bool TryPush(const T& item, bool notify = true) {
    const uint64_t tail = control_->tail.load(std::memory_order_relaxed);
    if (tail - cached_head_ >= capacity_) {
      cached_head_ = control_->head.load(std::memory_order_acquire);
      if (tail - cached_head_ >= capacity_) return false;
    }
    std::memcpy(static_cast<void*>(&slots_[tail & (capacity_ - 1)]), &item, UsedBytes(item));
    control_->tail.store(tail + 1, std::memory_order_release);
    if (notify) Notify();
    return true;
  }

  // Producer side: wakes the sleeping consumers for the items published so
  // far, unless a wake-up is already on its way.
  void Notify() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (control_->sleepers.load(std::memory_order_seq_cst) != 0 &&
        control_->wake_pending.exchange(1, std::memory_order_seq_cst) == 0) {
      control_->seq.fetch_add(1, std::memory_order_seq_cst);
      FutexWake(&control_->seq, INT_MAX);
    }
  }

  // Consumer side. False when the ring is empty.
  bool TryPop(T* item) {
    const uint64_t head = control_->head.load(std::memory_order_relaxed);
    if (head == cached_tail_) {
      cached_tail_ = control_->tail.load(std::memory_order_acquire);
      if (head == cached_tail_) return false;
    }
    const T& slot = slots_[head & (capacity_ - 1)];
    std::memcpy(static_cast<void*>(item), &slot, UsedBytes(slot));
    control_->head.store(head + 1, std::memory_order_release);
    return true;
  }

  bool Empty() const {
    return control_->head.load(std::memory_order_acquire) ==
           control_->tail.load(std::memory_order_acquire);
  }

  // Consumer side: returns once the ring is non-empty, or after roughly
  // timeout_us, or spuriously; the caller re-checks with TryPop.
  void WaitForData(int spin, int64_t timeout_us) {
    for (int i = 0; i < spin; ++i) {
      if (!Empty()) return;
      CpuRelax();
    }
    control_->wake_pending.store(0, std::memory_order_seq_cst);
    const uint32_t seq = control_->seq.load(std::memory_order_acquire);
    control_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (Empty()) FutexWait(&control_->seq, seq, timeout_us);
    control_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }

  // Wakes every sleeping consumer thread, whether or not a wake-up is
  // pending (to interrupt them, e.g. for shutdown).
  void NotifyConsumer() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (control_->sleepers.load(std::memory_order_seq_cst) != 0) {
      control_->seq.fetch_add(1, std::memory_order_seq_cst);
      FutexWake(&control_->seq, INT_MAX);
    }
  }

 private:
  RingControl* control_ = nullptr;
  T* slots_ = nullptr;
  uint64_t capacity_ = 0;     // snapshot: slots, a power of two
  uint64_t cached_head_ = 0;  // producer's last view of head (<= the real one)
  uint64_t cached_tail_ = 0;  // consumer's last view of tail (<= the real one)
};

}  // namespace es::ipc
