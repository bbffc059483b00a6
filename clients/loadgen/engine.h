// LoadEngine: drives ModelInfer calls over several gRPC channels from a few
// threads, with gRPC's asynchronous API. Each of `threads` workers owns a
// CompletionQueue and a thread draining it; in open loop it also has a pacer
// thread that sends on schedule (precise sleeps, not gRPC's millisecond
// timers).
//
// Contract:
//  - The request is serialized once (Start's caller gives the bytes); every
//    call sends those bytes through a generic stub, and answers are not
//    parsed: only the status and the latency count.
//  - Closed loop (plan.concurrency = N): N calls always in flight; slot k
//    belongs to worker k % threads and uses channel k % channels, and sends
//    its next call as soon as its previous one completes.
//  - Open loop (plan.rate = R): each worker sends R/threads requests/s on a
//    fixed schedule (constant intervals, or exponential ones with --poisson),
//    whatever the answers; the latency of a call is measured from the time
//    it was SCHEDULED, so a client that falls behind shows it in the figures
//    (no coordinated omission). Arrivals while max_inflight calls are out
//    are counted as skipped, not sent.
//  - TakeSample() returns what completed since the previous TakeSample()
//    (successful latencies in ns, error counts by gRPC code). Thread-safe
//    against the workers; called by one controlling thread.
//  - Start/Stop are called by one controlling thread; Stop stops sending,
//    waits for every call in flight (each has a deadline) and joins the
//    threads. Calls that complete during Stop go into the next sample.
//    A call still outstanding `hung` after Stop began is cancelled and
//    counted as unanswered (a gRPC deadline should have ended it: the
//    count must be 0). A call that ended more than `hung` after it was
//    sent is counted as hung, whatever its status.
//  - Closed loop: a slot whose call failed UNAVAILABLE sends its next call
//    only after a backoff (1 ms, doubling up to 100 ms, reset by any other
//    outcome), so a server that went away is not flooded.
//  - Connection failures (UNAVAILABLE while the call's channel is not
//    connected: the server itself is gone, not one of its models) are
//    counted in a row over all workers; any other outcome resets the run.
//    After `max_connection_failures` in a row the engine stops sending
//    (lost_server() becomes true and stays so until the next Start).
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace es::loadgen {

struct Sample {
  std::vector<int64_t> latencies_ns;        // successful calls
  std::map<grpc::StatusCode, uint64_t> errors;  // failed calls by code
  uint64_t sent = 0;
  uint64_t hung = 0;        // calls that ended more than EngineSettings::hung after they were sent
  uint64_t unanswered = 0;  // calls cancelled by Stop() after waiting `hung` for them
  uint64_t skipped = 0;     // open loop: arrivals not sent (max_inflight reached)
  int64_t late_ns_sum = 0;  // open loop: sum of (actual - scheduled) send times
  std::chrono::steady_clock::duration elapsed{};  // since the previous sample
  std::chrono::system_clock::time_point end_wall{};  // wall-clock time the sample was taken

  uint64_t ok() const { return latencies_ns.size(); }
  uint64_t failed() const;
  void Merge(Sample&& other);
};

struct LoadPlan {
  int concurrency = 0;  // > 0: closed loop
  double rate = 0;      // > 0: open loop, requests/s
  bool poisson = false;
  int max_inflight = 4096;
  uint32_t seed = 1;
};

struct EngineSettings {
  std::chrono::milliseconds timeout{10000};  // deadline of every call
  std::chrono::milliseconds hung{30000};     // a call slower than this is hung; Stop() waits this long at most
  std::chrono::milliseconds backoff_min{1}, backoff_max{100};  // closed loop, after UNAVAILABLE
  int max_connection_failures = 100;         // in a row, then lost_server()
};

class LoadEngine {
 public:
  // `channels` are shared by all threads; `method` is the full gRPC method
  // name ("/inference.GRPCInferenceService/ModelInfer").
  LoadEngine(std::vector<std::shared_ptr<grpc::Channel>> channels, int threads, std::string method,
             EngineSettings settings);
  ~LoadEngine();
  LoadEngine(const LoadEngine&) = delete;
  LoadEngine& operator=(const LoadEngine&) = delete;

  void Start(const LoadPlan& plan, const std::string& request_bytes);
  void Stop();
  Sample TakeSample();
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  // Since construction, every call (warm-up and drains included).
  uint64_t total_sent() const { return total_sent_.load(); }
  uint64_t total_ok() const { return total_ok_.load(); }
  uint64_t total_failed() const { return total_failed_.load(); }
  uint64_t total_hung() const { return total_hung_.load(); }
  uint64_t total_unanswered() const { return total_unanswered_.load(); }
  // Failed calls by gRPC code since construction.
  std::map<grpc::StatusCode, uint64_t> total_errors() const;
  // True once max_connection_failures connection failures came in a row
  // (until the next Start); then no call is sent any more.
  bool lost_server() const { return lost_server_.load(); }
  // "N connection failures in a row, the last: UNAVAILABLE: ..." once lost.
  std::string lost_server_reason() const;

 private:
  struct Worker;
  struct Event;
  struct Call;
  struct Retry;
  void Pace(Worker* worker);   // open loop: issues calls on schedule
  void Drain(Worker* worker);  // completions; closed loop: issues the next call
  void Issue(Worker* w, int slot, std::chrono::steady_clock::time_point scheduled);
  void Completed(Worker* w, std::unique_ptr<Call> call);
  // Whether a failed call was a connection failure; counts the run.
  void CountOutcome(const Call& call);
  void CancelOutstanding(Worker* w);  // Stop() waited `hung`: the rest are unanswered

  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  int threads_;
  std::string method_;
  EngineSettings settings_;
  LoadPlan plan_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> stop_began_ns_{0};  // steady clock, when Stop() set stopping_
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> total_sent_{0}, total_ok_{0}, total_failed_{0}, total_hung_{0}, total_unanswered_{0};
  std::atomic<uint64_t> total_by_code_[17] = {};  // grpc::StatusCode 0..16
  std::atomic<int> failures_in_a_row_{0};
  std::atomic<bool> lost_server_{false};
  mutable Mutex reason_mu_;
  std::string last_connection_error_ ABSL_GUARDED_BY(reason_mu_);
  std::chrono::steady_clock::time_point last_sample_;
  Sample drained_;  // completed during Stop(), for the next TakeSample()
};

}  // namespace es::loadgen
