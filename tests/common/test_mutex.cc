// common/mutex.h: Mutex, MutexLock and CondVar do what std::mutex,
// std::lock_guard and std::condition_variable do (the annotations are
// checked at compile time: see thread_safety_violation.cc).
#include "common/mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <thread>
#include <vector>

namespace es {
namespace {

using std::chrono::milliseconds;

// The example of the contract comment, used from several threads.
class Queue {
 public:
  void Push(int v) {
    MutexLock lock(&mu_);
    items_.push_back(v);
    cv_.NotifyOne();
  }
  int Pop() {
    MutexLock lock(&mu_);
    while (items_.empty()) cv_.Wait(&mu_);
    return PopLocked();
  }
  // std::nullopt-like: -1 when nothing came within `timeout`.
  int PopFor(milliseconds timeout) {
    MutexLock lock(&mu_);
    if (!cv_.WaitFor(&mu_, timeout, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !items_.empty(); })) {
      return -1;
    }
    return PopLocked();
  }
  size_t size() const {
    MutexLock lock(&mu_);
    return items_.size();
  }

 private:
  int PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int v = items_.front();
    items_.pop_front();
    return v;
  }

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<int> items_ ABSL_GUARDED_BY(mu_);
};

TEST(MutexTest, ProducersAndConsumersLoseNothing) {
  constexpr int kPerThread = 2000;
  Queue queue;
  std::vector<std::thread> threads;
  std::vector<long long> sums(2, 0);
  for (int c = 0; c < 2; ++c) {
    threads.emplace_back([&, c] {
      for (int i = 0; i < kPerThread; ++i) sums[static_cast<size_t>(c)] += queue.Pop();
    });
  }
  for (int p = 0; p < 2; ++p) {
    threads.emplace_back([&] {
      for (int i = 1; i <= kPerThread; ++i) queue.Push(i);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(sums[0] + sums[1], 2LL * kPerThread * (kPerThread + 1) / 2);
  EXPECT_EQ(queue.size(), 0u);
}

TEST(MutexTest, TimedWaitTimesOutAndWakesOnNotify) {
  Queue queue;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(queue.PopFor(milliseconds(50)), -1);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(50));

  std::thread producer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    queue.Push(7);
  });
  EXPECT_EQ(queue.PopFor(milliseconds(10000)), 7);  // woken by the push, long before the timeout
  producer.join();
}

struct Guarded {
  Mutex mu;
  int value ABSL_GUARDED_BY(mu) = 0;
};

TEST(MutexTest, MutexLockUnlocksEarlyAndRelocks) {
  Guarded g;
  {
    MutexLock lock(&g.mu);
    g.value = 1;
    lock.Unlock();
    // Another thread can take it now (it would deadlock otherwise).
    std::thread other([&g] {
      MutexLock inner(&g.mu);
      g.value = 2;
    });
    other.join();
    lock.Lock();
    EXPECT_EQ(g.value, 2);
  }
  // Released at the end of the scope: free to take again.
  if (g.mu.TryLock()) {
    g.mu.Unlock();
  } else {
    ADD_FAILURE() << "the MutexLock did not release the mutex at the end of its scope";
  }
}

// Readers share the lock: two readers hold it at once (the second gets in
// while the first still holds it); a writer waits for them and excludes them.
TEST(SharedMutexTest, ReadersShareAndTheWriterExcludes) {
  SharedMutex mu;
  std::atomic<int> readers_inside{0};
  std::atomic<int> most_at_once{0};
  std::atomic<bool> writer_saw_reader{false};
  auto read = [&] {
    ReaderLock lock(&mu);
    const int now = readers_inside.fetch_add(1) + 1;
    int seen = most_at_once.load();
    while (now > seen && !most_at_once.compare_exchange_weak(seen, now)) {
    }
    // Stay until the other reader has come in too (bounded: 5 s).
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (most_at_once.load() < 2 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    readers_inside.fetch_sub(1);
  };
  std::thread a(read), b(read);
  a.join();
  b.join();
  EXPECT_EQ(most_at_once.load(), 2);
  std::thread reader([&] {
    ReaderLock lock(&mu);
    readers_inside.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    readers_inside.fetch_sub(1);
  });
  while (readers_inside.load() == 0) std::this_thread::yield();
  {
    WriterLock lock(&mu);
    writer_saw_reader = readers_inside.load() != 0;
  }
  reader.join();
  EXPECT_FALSE(writer_saw_reader.load());
}

}  // namespace
}  // namespace es
