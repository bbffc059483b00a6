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
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace es::loadgen {

struct Sample {
  std::vector<int64_t> latencies_ns;        // successful calls
  std::map<grpc::StatusCode, uint64_t> errors;  // failed calls by code
  uint64_t sent = 0;
  uint64_t skipped = 0;     // open loop: arrivals not sent (max_inflight reached)
  int64_t late_ns_sum = 0;  // open loop: sum of (actual - scheduled) send times
  std::chrono::steady_clock::duration elapsed{};  // since the previous sample

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

class LoadEngine {
 public:
  // `channels` are shared by all threads; `method` is the full gRPC method
  // name ("/inference.GRPCInferenceService/ModelInfer").
  LoadEngine(std::vector<std::shared_ptr<grpc::Channel>> channels, int threads, std::string method,
             std::chrono::milliseconds timeout);
  ~LoadEngine();
  LoadEngine(const LoadEngine&) = delete;
  LoadEngine& operator=(const LoadEngine&) = delete;

  void Start(const LoadPlan& plan, const std::string& request_bytes);
  void Stop();
  Sample TakeSample();
  int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  // Since construction, every call (warm-up and drains included).
  uint64_t total_ok() const { return total_ok_.load(); }
  uint64_t total_failed() const { return total_failed_.load(); }

 private:
  struct Worker;
  struct Call;
  void Pace(Worker* worker);   // open loop: issues calls on schedule
  void Drain(Worker* worker);  // completions; closed loop: issues the next call
  void Issue(Worker* w, int slot, std::chrono::steady_clock::time_point scheduled);

  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  int threads_;
  std::string method_;
  std::chrono::milliseconds timeout_;
  LoadPlan plan_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> total_ok_{0}, total_failed_{0};
  std::chrono::steady_clock::time_point last_sample_;
  Sample drained_;  // completed during Stop(), for the next TakeSample()
};

}  // namespace es::loadgen
