// ModelDispatcher: gets the requests of one TorchScript model computed on the
// hosts that serve it, batching them when the model's config asks for it.
//
// Without dynamic batching each request is sent as it comes. With it,
// requests wait in a queue per priority level, bounded by count
// (max_queue_size) and by bytes of input (max_queue_bytes): a request that
// would pass either is answered RESOURCE_EXHAUSTED at once, naming the limit.
// They leave the queue in batches: a batch is formed when a host slot is free
// (per host serving the model: its instances_per_host, at most the host's
// executors) and either max_batch_size rows are waiting or the oldest request
// has waited max_queue_delay_us. A batch holds only requests whose non-batch
// dimensions agree, takes higher priorities first (priority 1 is the
// highest), FIFO within a level, and is trimmed to the largest preferred size
// it fills. Requests whose deadline passed or whose client cancelled leave
// the queue with DEADLINE_EXCEEDED / CANCELLED and are never computed; they
// are looked for whenever a batch is formed and, while every slot is busy,
// every 5 ms. The batch's rows are copied straight into the host's arena; the
// outputs are split back per request.
//
// Hosts come as DispatchHost (a name and a way to get the live connection):
// HostSupervisors in the server, a HostConnection played by a test thread in
// tests/server/core/test_model_dispatcher.cc.
//
// Replicas: each batch goes to the ready host with the fewest calls in
// flight (every model's); if that host dies with the batch in flight, the
// batch is retried once on another ready replica before its requests fail
// with UNAVAILABLE.
//
// Thread safety: Infer() from any thread; completions arrive on the hosts'
// completion threads. `mu_` guards the queue and the slot count; nothing
// else is shared and mutable.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "config/server_config.h"
#include "server/hosts/host_supervisor.h"
#include "server/core/infer_types.h"
#include "server/core/model_statistics.h"

namespace es {

// One host serving the model, as the dispatcher sees it: its name (for
// errors) and its live connection, nullptr while it is down or starting.
// A HostSupervisor in the server; a test can hand in a HostConnection of its
// own and play the host on its channel.
struct DispatchHost {
  std::string name;
  std::function<std::shared_ptr<HostConnection>()> connection;
};

class ModelDispatcher {
 public:
  // `stats` (may be null) receives one RecordExecution per batch computed.
  ModelDispatcher(const ModelConfig* model, const ServerConfig* config, std::vector<HostSupervisor*> hosts,
                  ModelStatistics* stats);
  ModelDispatcher(const ModelConfig* model, const ServerConfig* config, std::vector<DispatchHost> hosts,
                  ModelStatistics* stats);
  ~ModelDispatcher();
  ModelDispatcher(const ModelDispatcher&) = delete;
  ModelDispatcher& operator=(const ModelDispatcher&) = delete;

  // Computes `request` on `version` of this model (an ensemble's request
  // reaches each member with that member's version). `done` is called
  // exactly once, possibly before Infer() returns.
  // `trace` (may be null): the request's trace, which gets the queue and
  // compute timestamps (an ensemble's member call has its own).
  void Infer(std::shared_ptr<const InferRequest> request, int64_t version, InferDone done,
             std::shared_ptr<RequestTrace> trace = nullptr);
  bool Ready() const;
  // Shutdown: answers every request still in the batch queue with `why`
  // (and every one queued later, at once), so none outlives the front end
  // that is waiting for its answer. Returns how many were queued.
  size_t FailQueued(const Status& why);
  const ModelConfig& model() const { return *model_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Queued {
    std::shared_ptr<const InferRequest> request;
    InferDone done;
    Clock::time_point enqueued;
    size_t level = 0;  // index into queues_
    int64_t version = 0;  // of this model, to compute the request on
    std::shared_ptr<RequestTrace> trace = nullptr;
  };
  using Batch = std::vector<Queued>;
  // Requests that leave the queue without running, with the reason.
  using Dropped = std::vector<std::pair<Queued, Status>>;

  // Takes the batches that may leave the queue now.
  std::vector<Batch> TakeReadyBatchesLocked(Clock::time_point now, Dropped* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Batch FormBatchLocked(Clock::time_point now, Dropped* dropped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves expired and cancelled requests out of the queue.
  void PurgeLocked(Clock::time_point now, Dropped* dropped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool QueueEmptyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the timer sleeps past the moment the queue now needs it (the
  // oldest request's delay), so Infer and SlotFreed notify only then: a
  // notify per request would wake the timer thread once per request.
  bool TimerMustWakeSoonerLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Clock::time_point OldestLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DispatchAll(std::vector<Batch> batches, Dropped dropped);
  void Dispatch(std::shared_ptr<Batch> batch, Clock::time_point dispatched, int attempt);
  // `host`: the name of the host that answered (null when none was reached).
  void Finish(const Batch& batch, const Status& status, const ipc::CompletionDesc* completion,
              const uint8_t* arena, Clock::time_point dispatched, Clock::time_point submitted,
              const std::string* host = nullptr);
  void SlotFreed();
  void TimerLoop();
  // The ready host with the fewest calls in flight (every model's);
  // UNAVAILABLE naming every host that is down when none is up.
  StatusOr<std::shared_ptr<HostConnection>> PickHost() const;
  uint64_t OutputCapacity(int64_t rows) const;
  // What a batch of `rows` may write back, and for how long it may compute.
  OutputPlan OutputPlanFor(int64_t rows) const;

  const ModelConfig* model_;
  const ServerConfig* config_;
  const std::vector<DispatchHost> hosts_;
  ModelStatistics* const stats_;
  const bool batching_;
  const int slots_;  // batches in flight at once
  const std::chrono::microseconds queue_delay_;  // max_queue_delay_us
  // The model's declared outputs, made once: every batch's plan shares it.
  const std::shared_ptr<const OutputSpec> output_spec_;

  Mutex mu_;
  CondVar timer_cv_;
  std::vector<std::deque<Queued>> queues_ ABSL_GUARDED_BY(mu_);  // index = priority - 1
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;                       // requests
  int64_t queued_rows_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // input bytes of the queued requests
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;         // batches
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Status> closed_ ABSL_GUARDED_BY(mu_);  // set by FailQueued: the answer to later requests
  // When the timer wakes by itself; max() while it waits for a notify.
  Clock::time_point timer_wake_ ABSL_GUARDED_BY(mu_) = Clock::time_point::max();
  std::thread timer_;
};

}  // namespace es
