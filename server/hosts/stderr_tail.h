// StderrTail: a host's standard error, passed through to the router's and
// remembered, so that a host that exits can be said to have exited *why*:
// "host 'cpu1' (pid 812) exited with code 3 during start-up: its last words:
// 'cannot open /models/x.pt'". A host that dies before it can publish a
// message in its channel (a crash while loading, an exec failure, a missing
// library) has only its standard error to say what went wrong.
//
// One per host incarnation: Create() makes the pipe, the host gets
// write_fd() as its fd 2 (LaunchSpec::pass_fds), Start() runs the thread that
// copies each line, whole, to the router's fd 2 and keeps the last non-empty
// one (at most 512 bytes of it). The thread ends at end of file, i.e. once
// every holder of the write end (the host, anything it spawned) is gone, or
// when the object is destroyed.
//
// Thread safety: LastLine() from any thread; the rest from the owner's.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"

namespace es {

class StderrTail {
 public:
  static StatusOr<std::unique_ptr<StderrTail>> Create();
  ~StderrTail();
  StderrTail(const StderrTail&) = delete;
  StderrTail& operator=(const StderrTail&) = delete;

  // The write end, for the child; close it here (CloseWriteEnd) after the spawn.
  int write_fd() const { return write_fd_; }
  void CloseWriteEnd();
  void Start();

  // The last non-empty line written so far, after waiting up to `wait` for
  // the end of the stream (the host just exited: its last bytes may still be
  // in the pipe).
  std::string LastLine(std::chrono::milliseconds wait = std::chrono::milliseconds(0));

 private:
  StderrTail(int read_fd, int write_fd) : read_fd_(read_fd), write_fd_(write_fd) {}
  void Run();

  const int read_fd_;
  int write_fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  Mutex mu_;
  CondVar cv_;
  std::string last_line_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace es
