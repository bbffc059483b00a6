// HostConnection: the router's side of one running host incarnation: the
// channel, the arena allocator, the table of in-flight requests and the
// completion thread that answers them.
//
// A connection lives exactly as long as one host process: when the host dies
// or hangs the supervisor Close()s it (every in-flight request fails with the
// given status, UNAVAILABLE) and the next incarnation gets a fresh channel.
// Nothing of a dead host's segment is reused, so nothing it half-wrote can be
// misread.
//
// Thread safety: Submit() from any thread; the done callbacks run on the
// completion thread (or on the closing thread for Close()). `mu_` guards
// `pending_` and `closed_`.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "config/status.h"
#include "ipc/arena_allocator.h"
#include "ipc/channel.h"
#include "ipc/channel_ends.h"
#include "server/infer_types.h"

namespace es {

// One input tensor of a request as the pieces that make it up: a batch of
// requests is one tensor whose rows come from several requests, copied one
// after another straight into the arena (each request's bytes copied once).
struct TensorParts {
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;  // full shape of the assembled tensor
  std::vector<std::pair<const uint8_t*, size_t>> pieces;
  size_t bytes() const {
    size_t n = 0;
    for (const auto& p : pieces) n += p.second;
    return n;
  }
};

class HostConnection {
 public:
  // The completion (or nullptr on error) with the arena it points into; the
  // arena region is freed when the callback returns, so copy what you need.
  using Done = std::function<void(const Status&, const ipc::CompletionDesc*, const uint8_t* arena)>;

  static StatusOr<std::unique_ptr<HostConnection>> Create(const std::string& host_name, uint64_t arena_bytes,
                                                          ipc::WaitPolicy wait = {});
  ~HostConnection();

  // Copies the inputs into the arena, reserves `output_capacity` bytes for the
  // outputs and publishes the request. On error nothing was submitted and
  // `done` will not be called; on success `done` is called exactly once.
  Status Submit(const std::string& model, int64_t version, const std::vector<TensorParts>& inputs,
                uint64_t output_capacity, Done done);

  void StartCompletionThread();
  // Stops the completion thread and fails every in-flight request with `why`.
  void Close(const Status& why);

  const std::string& host_name() const { return host_name_; }
  ipc::Channel& channel() { return channel_; }
  int outstanding() const { return outstanding_.load(std::memory_order_relaxed); }
  uint64_t arena_used_bytes() const { return arena_.used_bytes(); }
  uint64_t arena_capacity() const { return arena_.capacity(); }

 private:
  HostConnection(std::string host_name, ipc::Channel channel, ipc::WaitPolicy wait);
  void CompletionLoop();
  void Finish(const ipc::CompletionDesc& completion);

  struct Pending {
    uint64_t arena_offset;
    Done done;
  };

  const std::string host_name_;
  ipc::Channel channel_;
  ipc::RouterEnd end_;
  ipc::ArenaAllocator arena_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<int> outstanding_{0};
  std::atomic<bool> stop_{false};
  std::thread completion_thread_;
  std::mutex mu_;
  std::unordered_map<uint64_t, Pending> pending_;  // GUARDED_BY(mu_)
  bool closed_ = false;                            // GUARDED_BY(mu_)
};

}  // namespace es
