#include "server/hosts/stderr_tail.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/errno_text.h"

namespace es {
namespace {

constexpr size_t kMaxLine = 512;  // of the last line kept; longer ones are cut
constexpr int kPollMs = 100;      // how soon the thread sees stop_

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the router's stderr is gone: nothing else to do
    data += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

StatusOr<std::unique_ptr<StderrTail>> StderrTail::Create() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::Internal(std::string("pipe2: ") + es::ErrnoText(errno));
  return std::unique_ptr<StderrTail>(new StderrTail(fds[0], fds[1]));
}

StderrTail::~StderrTail() {
  CloseWriteEnd();
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  close(read_fd_);
}

void StderrTail::CloseWriteEnd() {
  if (write_fd_ >= 0) close(write_fd_);
  write_fd_ = -1;
}

void StderrTail::Start() { thread_ = std::thread([this] { Run(); }); }

void StderrTail::Run() {
  std::string pending;  // the line being read
  char buf[4096];
  while (!stop_.load()) {
    pollfd p{read_fd_, POLLIN, 0};
    const int ready = poll(&p, 1, kPollMs);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = read(read_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of file: every writer is gone
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n', start)) {
      // Whole lines, one write each, so they do not interleave with the router's own.
      WriteAll(STDERR_FILENO, pending.data() + start, nl + 1 - start);
      if (nl > start) {
        MutexLock lock(&mu_);
        last_line_.assign(pending, start, std::min(nl - start, kMaxLine));
      }
      start = nl + 1;
    }
    pending.erase(0, start);
    if (pending.size() > 64 * kMaxLine) {  // a host writing without newlines: pass it on anyway
      WriteAll(STDERR_FILENO, pending.data(), pending.size());
      pending.clear();
    }
  }
  if (!pending.empty()) {
    WriteAll(STDERR_FILENO, pending.data(), pending.size());
    WriteAll(STDERR_FILENO, "\n", 1);
    MutexLock lock(&mu_);
    last_line_.assign(pending, 0, std::min(pending.size(), kMaxLine));
  }
  MutexLock lock(&mu_);
  ended_ = true;
  cv_.NotifyAll();
}

std::string StderrTail::LastLine(std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  MutexLock lock(&mu_);
  while (!ended_ && std::chrono::steady_clock::now() < deadline) cv_.WaitUntil(&mu_, deadline);
  return last_line_;
}

}  // namespace es
