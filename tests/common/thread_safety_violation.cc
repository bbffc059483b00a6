// Must NOT compile under clang: reads and writes a member guarded by mu_
// without holding it, calls a *Locked() helper unlocked, and writes a member
// guarded by a SharedMutex while holding it only as a reader. The ctest
// common_thread_safety_analysis builds this file with the project's warning
// flags (es_set_warnings) and passes only if clang refuses it for exactly
// these reasons: proof that -Wthread-safety is on and is an error.
#include "common/mutex.h"

namespace es {

class Counter {
 public:
  int Read() const { return value_; }  // error: reading value_ requires holding mu_
  void Bump() { BumpLocked(); }       // error: calling BumpLocked requires holding mu_

 private:
  void BumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++value_; }

  mutable Mutex mu_;
  int value_ ABSL_GUARDED_BY(mu_) = 0;
};

class Table {
 public:
  int Get() {
    ReaderLock lock(&mu_);
    return size_;  // fine: a reader may read
  }
  void Grow() {
    ReaderLock lock(&mu_);
    ++size_;  // error: writing size_ requires holding mu_ exclusively
  }

 private:
  SharedMutex mu_;
  int size_ ABSL_GUARDED_BY(mu_) = 0;
};

int Use() {
  Counter c;
  c.Bump();
  Table t;
  t.Grow();
  return c.Read() + t.Get();
}

}  // namespace es
