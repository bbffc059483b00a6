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
// Trust: the host is untrusted. Each completion is copied out of the ring and
// checked against the Reservation made for its request (completion_check.h)
// before a byte of the arena is read for it; a completion that fails the
// check, or names no request in flight, is a protocol violation: its request
// (if any) is answered INTERNAL, the violation is counted and recorded as
// the connection's fault(), and the supervisor restarts the host.
//
// The request ring holds a fixed number of requests (the host's queue);
// requests beyond it wait in the router, oldest first, and go onto the ring
// as the host takes others off it (after each completion), so a burst
// larger than the ring queues instead of failing. The arena still bounds
// what is in flight: a request it cannot hold is refused. A completion for
// a request still waiting here (never sent) is a protocol violation.
//
// Hung forwards: each request carries its model's execution limit;
// FindOverrun() reads the host's executor slots (ipc::ExecutorSlot) and
// names a request that has computed past its limit, so the supervisor can
// kill the host and fail that request with DEADLINE_EXCEEDED.
//
// Thread safety: Submit() from any thread; the done callbacks run on the
// completion thread (or on the closing thread for Close()); FindOverrun()
// and fault() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/datatype.h"
#include "common/mutex.h"
#include "common/status.h"
#include "ipc/arena_allocator.h"
#include "ipc/channel.h"
#include "ipc/channel_ends.h"
#include "server/hosts/completion_check.h"

namespace es {

// One input tensor of a request as the pieces that make it up: a batch of
// requests is one tensor whose rows come from several requests, copied one
// after another straight into the arena (each request's bytes copied once).
// A piece is `bytes` bytes at `data`, or, when `read` is set (an input in a
// client's shared-memory region), whatever `read` puts into the `bytes`
// bytes it is given: the bytes go straight into the arena, with no copy in
// between, and a failed read fails the submission.
struct TensorPiece {
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  std::function<Status(uint8_t* dest)> read;
};

struct TensorParts {
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;  // full shape of the assembled tensor
  std::vector<TensorPiece> pieces;
  size_t bytes() const {
    size_t n = 0;
    for (const auto& p : pieces) n += p.bytes;
    return n;
  }
};

// A model's declared outputs, as its completions are checked against them:
// made once per model (ModelDispatcher), shared by its requests in flight.
struct OutputSpec {
  std::vector<DataType> types;             // in order
  std::vector<std::vector<int64_t>> dims;  // full declared shapes, -1 = any (empty: unchecked)
};

// What the router expects back from one request, and how long it may run.
struct OutputPlan {
  uint64_t capacity = 0;                      // bytes reserved for all outputs
  std::shared_ptr<const OutputSpec> outputs;  // null: no outputs (a status only)
  std::chrono::milliseconds max_compute{0};   // 0 = no limit
};

// A request that has computed past its limit (see FindOverrun).
struct Overrun {
  uint64_t request_id = 0;
  std::string model;
  std::chrono::milliseconds elapsed{0};
  std::chrono::milliseconds limit{0};
};

class HostConnection {
 public:
  // The completion (or nullptr on error) with the arena it points into; the
  // arena region is freed when the callback returns, so copy what you need.
  // A completion passed here has been checked (completion_check.h).
  using Done = std::function<void(const Status&, const ipc::CompletionDesc*, const uint8_t* arena)>;

  static StatusOr<std::unique_ptr<HostConnection>> Create(const std::string& host_name, uint64_t arena_bytes,
                                                          ipc::WaitPolicy wait = {});
  ~HostConnection();

  // Copies the inputs into the arena, reserves `outputs.capacity` bytes for
  // the outputs and publishes the request. On error nothing was submitted
  // and `done` will not be called; on success `done` is called exactly once.
  Status Submit(const std::string& model, int64_t version, const std::vector<TensorParts>& inputs,
                const OutputPlan& outputs, Done done);

  // A control request (ipc::RequestKind kLoad / kUnload): `payload`, when
  // not empty, travels as input 0 (UINT8); the answer is a status with no
  // outputs. `limit` is how long the host may take: it counts towards
  // FindLost's bound like an execution limit (the watchdog does not see it,
  // the host's loader thread is no executor).
  Status SubmitControl(ipc::RequestKind kind, const std::string& model, int64_t version, std::string_view payload,
                       std::chrono::milliseconds limit, Done done);

  void StartCompletionThread();
  // Stops the completion thread and fails every in-flight request with
  // `why`, except those named in `exceptions`, which get their own status.
  void Close(const Status& why, const std::map<uint64_t, Status>& exceptions = {});

  // A request the host has been computing for longer than its limit, by the
  // host's executor slots and the steady clock; nullopt if none.
  std::optional<Overrun> FindOverrun() const;
  // Why a request must have been lost by the host, or "": a request still
  // unanswered when every request submitted before it and itself could have
  // used up their execution limits one after another (plus a second). An
  // honest host never gets there: each of those forwards is watched by
  // FindOverrun. It catches a host that drops requests without ever showing
  // them in an executor slot, which the watchdog alone cannot see.
  std::string FindLost() const;
  // The first protocol violation seen, or "" while the host behaved.
  std::string fault() const;
  // Counted after fault() is set: whoever sees a count also sees a fault.
  uint64_t violations() const { return violations_.load(std::memory_order_acquire); }

  const std::string& host_name() const { return host_name_; }
  ipc::Channel& channel() { return channel_; }
  int outstanding() const { return outstanding_.load(std::memory_order_relaxed); }
  uint64_t arena_used_bytes() const { return arena_.used_bytes(); }
  uint64_t arena_capacity() const { return arena_.capacity(); }

 private:
  HostConnection(std::string host_name, ipc::Channel channel, ipc::WaitPolicy wait);
  Status SubmitKind(ipc::RequestKind kind, const std::string& model, int64_t version,
                    const std::vector<TensorParts>& inputs, const OutputPlan& outputs, Done done);
  void CompletionLoop();
  void Finish(const ipc::CompletionDesc& completion) ABSL_LOCKS_EXCLUDED(overflow_mu_, mu_);
  void RecordViolation(const std::string& what);
  // Puts `desc` on the request ring, or behind the requests already
  // waiting for room (see above).
  void PublishLocked(const ipc::RequestDesc& desc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(overflow_mu_);
  // Moves waiting requests onto the ring while it has room.
  void PublishWaiting() ABSL_LOCKS_EXCLUDED(overflow_mu_);
  void PublishWaitingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(overflow_mu_);

  struct Pending {
    uint64_t arena_offset = 0;
    std::string model;
    std::shared_ptr<const OutputSpec> outputs;  // what `reservation` views
    Reservation reservation;
    std::chrono::milliseconds max_compute{0};
    // When the host must have answered (see FindLost); max() = no limit.
    std::chrono::steady_clock::time_point answer_by = std::chrono::steady_clock::time_point::max();
    Done done;
  };

  const std::string host_name_;
  ipc::Channel channel_;
  ipc::RouterEnd end_;
  ipc::ArenaAllocator arena_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<int> outstanding_{0};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> violations_{0};  // non-zero: stop reading completions
  std::thread completion_thread_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Nodes of pending_ answered, for the next requests: a request in flight
  // then costs no heap allocation for its entry. Never more than the most
  // requests that were in flight at once, so a burst as large as an earlier
  // one finds them all (as the arena's spare nodes).
  std::vector<std::unordered_map<uint64_t, Pending>::node_type> spare_pending_ ABSL_GUARDED_BY(mu_);
  // Sum of the execution limits of the requests in pending_ (0 for those
  // without one): how long the host may take to answer them all.
  std::chrono::milliseconds pending_compute_ ABSL_GUARDED_BY(mu_) = std::chrono::milliseconds(0);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::string fault_ ABSL_GUARDED_BY(mu_);
  // Requests the ring had no room for, oldest first, and their ids. Taken
  // before mu_ (Submit), never after it.
  mutable Mutex overflow_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::deque<ipc::RequestDesc> waiting_ ABSL_GUARDED_BY(overflow_mu_);
  std::unordered_set<uint64_t> waiting_ids_ ABSL_GUARDED_BY(overflow_mu_);
};

}  // namespace es
