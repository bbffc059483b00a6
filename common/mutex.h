// Mutex, MutexLock and CondVar (and SharedMutex with ReaderLock/WriterLock,
// for state read far more often than written): std::mutex and std::condition_variable with
// Abseil's thread-safety annotations, so that clang's -Wthread-safety checks
// at compile time that every member marked ABSL_GUARDED_BY(mu_) is read and
// written only with mu_ held (cmake/EsWarnings.cmake turns the analysis on,
// and its violations into errors, whenever the compiler is clang; gcc
// ignores the annotations). Header-only: the macros come from Abseil's
// headers (installed with gRPC), no Abseil library is linked for them.
//
// How to use it:
//
//   class Queue {
//    public:
//     void Push(int v) {
//       es::MutexLock lock(&mu_);          // held until the end of the scope
//       items_.push_back(v);
//       cv_.NotifyOne();
//     }
//     int Pop() {
//       es::MutexLock lock(&mu_);
//       // The condition is evaluated here, where the analysis knows mu_ is
//       // held, so it may read guarded members:
//       while (items_.empty()) cv_.Wait(&mu_);
//       return PopLocked();
//     }
//    private:
//     int PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // caller holds mu_
//     es::Mutex mu_;
//     es::CondVar cv_;
//     std::deque<int> items_ ABSL_GUARDED_BY(mu_);
//   };
//
//  - Every member a mutex guards says so with ABSL_GUARDED_BY(mu_) (or
//    ABSL_PT_GUARDED_BY for what a pointer points to); the *Locked() helpers
//    that expect the caller to hold it say ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_).
//  - Waits: CondVar::Wait/WaitUntil/WaitFor take the mutex (held, as the
//    analysis checks) and return with it held again. Write the predicate as
//    the loop around them (above) so it is checked in the caller's scope. The
//    predicate overloads exist for brevity; their lambda must carry
//    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) itself, e.g.
//      cv_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; });
//    (an unannotated lambda that reads a guarded member does not compile).
//  - MutexLock::Unlock()/Lock() release and retake the mutex inside the
//    scope (e.g. to run a callback without it); the destructor releases it
//    only if held.
//  - Mutex is not recursive, like std::mutex: locking it twice on one thread
//    is a deadlock (and a compile error where the analysis can see it).
//
// Thread safety: Mutex and CondVar are thread-safe; a MutexLock belongs to
// the thread that made it.
#pragma once

#include <absl/base/thread_annotations.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <utility>

namespace es {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  // Tells the analysis the mutex is held where it cannot see it (a callback
  // that is documented to run under the lock). Checks nothing at run time.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope (std::lock_guard), or until Unlock().
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
    if (held_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Releases the mutex early, and takes it again.
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    held_ = false;
    mu_->Unlock();
  }
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_->Lock();
    held_ = true;
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

// A reader/writer mutex (std::shared_mutex) with the same annotations: many
// readers under ReaderLock, or one writer under WriterLock. Members it
// guards say ABSL_GUARDED_BY(mu_) as with Mutex; the analysis lets a reader
// read them and only a writer write them.
class ABSL_LOCKABLE SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a SharedMutex shared (a reader) for its scope.
class ABSL_SCOPED_LOCKABLE ReaderLock {
 public:
  explicit ReaderLock(SharedMutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_->ReaderLock(); }
  ~ReaderLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex* const mu_;
};

// Holds a SharedMutex exclusively (the writer) for its scope.
class ABSL_SCOPED_LOCKABLE WriterLock {
 public:
  explicit WriterLock(SharedMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~WriterLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex* const mu_;
};

// A condition variable for es::Mutex (std::condition_variable underneath:
// the std::mutex inside Mutex is adopted for the wait, not copied).
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

  // Releases `mu`, waits for a notification (or a spurious wake-up), takes
  // `mu` again. The caller re-checks its condition.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held; the caller's MutexLock owns it
  }
  // As Wait, but gives up at `deadline`: false when it timed out.
  template <class Clock, class Duration>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool notified = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return notified;
  }
  template <class Rep, class Period>
  bool WaitFor(Mutex* mu, const std::chrono::duration<Rep, Period>& timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout);
  }

  // Predicate forms: `ready` must be annotated ABSL_EXCLUSIVE_LOCKS_REQUIRED
  // on the same mutex (see the contract above). WaitUntil/WaitFor return
  // ready()'s last value. Their bodies are not analysed (the analysis cannot
  // tie the lambda's `mu_` to the parameter `mu`); callers still must hold
  // `mu`, and the lambda's own body is checked against its annotation.
  template <class Predicate>
  void Wait(Mutex* mu, Predicate ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    while (!ready()) Wait(mu);
  }
  template <class Clock, class Duration, class Predicate>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline, Predicate ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    while (!ready()) {
      if (!WaitUntil(mu, deadline)) return ready();
    }
    return true;
  }
  template <class Rep, class Period, class Predicate>
  bool WaitFor(Mutex* mu, const std::chrono::duration<Rep, Period>& timeout, Predicate ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout, std::move(ready));
  }

 private:
  std::condition_variable cv_;
};

}  // namespace es
