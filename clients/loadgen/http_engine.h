// HttpLoadEngine: ensemble-loadgen --http, over KServe v2 HTTP/REST with
// HTTP/1.1 keep-alive connections (es::client::HttpClient), one call at a
// time on each (HTTP/1.1 answers in order: a connection per call in flight).
//
// Contract (LoadEngine's, clients/loadgen/engine.h, except where said; the
// counting is CountingEngine's, clients/loadgen/engine_common.h):
//  - Closed loop (plan.concurrency = N): N slots, each a thread with its own
//    connection, each sending its next call when its answer is in.
//  - Open loop (plan.rate = R): a pacer thread queues arrivals on schedule
//    (constant or Poisson intervals); min(max_inflight, 64) connections,
//    each with its thread, send them in order. Latency counts from the
//    scheduled time, so arrivals that wait for a free connection show it
//    (and in the report's send lag); arrivals while max_inflight are sent
//    or queued are skipped, as are those still queued when the step stops.
//  - Start parses the serialized ModelInferRequest once and encodes its
//    HTTP body once (binary inputs and outputs, EncodeHttpInferRequest);
//    every call sends those bytes (a turn of one request: a limit given
//    to RestartRequests counts the calls). Answers are read whole (the connection
//    must be reusable) but not decoded: status and latency count. An
//    error answer counts under the code of its HTTP status (404 NOT_FOUND,
//    400 INVALID_ARGUMENT, 429 RESOURCE_EXHAUSTED, 503 UNAVAILABLE...).
//  - A connection opens on its first call (in the warm-up) and closes when
//    its step stops; a connection the server closed is reopened.
//  - Every call carries EngineSettings::timeout (connect, request and
//    answer). Stop() stops sending and joins the threads; a call in flight
//    ends at its deadline, so Stop() waits at most that long and nothing is
//    ever "unanswered" (a timeout longer than `hung` makes Stop wait longer).
//  - Closed loop, UNAVAILABLE: the slot backs off (1 ms doubling to 100 ms)
//    before its next call. UNAVAILABLE with the call's connection closed
//    (refused, reset) is a connection failure; max_connection_failures of
//    them in a row and the engine stops sending (lost_server()); so does a
//    slot that cannot make its client (options the tool's first client
//    accepted: not expected).
//  - Thread-safe as LoadEngine: one controlling thread calls Start, Stop
//    and TakeSample; the counters may be read from any thread.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "clients/client.h"
#include "clients/http_client.h"
#include "clients/loadgen/engine_common.h"
#include "common/mutex.h"

namespace es::loadgen {

class HttpLoadEngine final : public CountingEngine {
 public:
  // `address` is the HTTP endpoint "HOST:PORT"; `options` its TLS and token.
  HttpLoadEngine(std::string address, es::client::ClientOptions options, EngineSettings settings);
  ~HttpLoadEngine() override;
  HttpLoadEngine(const HttpLoadEngine&) = delete;
  HttpLoadEngine& operator=(const HttpLoadEngine&) = delete;

  void Start(const LoadPlan& plan, const RequestSet& requests) override;  // sends requests[0]
  void Stop() override;

 private:
  struct Slot;
  // Open loop: connections (and their threads) that send the queued arrivals.
  static constexpr int kOpenLoopConnections = 64;
  void RunSlot(Slot* slot);      // closed loop
  void RunOpenSlot(Slot* slot);  // open loop: takes arrivals from queue_
  void Pace();                   // open loop: queues arrivals on schedule
  // A slot's connection; nullptr (and lost_server()) when it cannot be made.
  std::unique_ptr<es::client::HttpClient> MakeClient();
  Sample TakeRunning() override;  // the slots' samples and the pacer's skipped arrivals
  // One call: counted in `slot`'s sample, latency from `scheduled`; its code.
  grpc::StatusCode Send(Slot* slot, es::client::HttpClient& client, Clock::time_point scheduled);

  std::string address_;
  es::client::ClientOptions options_;
  std::string path_;  // /v2/models/M[/versions/V]/infer
  std::string body_;
  size_t header_length_ = 0;
  std::vector<std::unique_ptr<Slot>> slots_;
  LoadPlan plan_;
  std::thread pacer_;
  Mutex queue_mu_;
  CondVar queue_cv_;
  std::deque<Clock::time_point> queue_ ABSL_GUARDED_BY(queue_mu_);  // arrivals due, not yet sent
  uint64_t pacer_skipped_ ABSL_GUARDED_BY(queue_mu_) = 0;
};

}  // namespace es::loadgen
