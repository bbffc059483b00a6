// LoadEngine: drives ModelInfer calls over several gRPC channels from a few
// threads, with gRPC's asynchronous API. Each of `threads` workers owns a
// CompletionQueue and a thread draining it; in open loop it also has a pacer
// thread that sends on schedule (precise sleeps, not gRPC's millisecond
// timers). What it counts, and how, is CountingEngine's
// (clients/loadgen/engine_common.h), shared with HttpLoadEngine.
//
// Contract:
//  - The requests are serialized once (Start's caller gives the bytes);
//    calls send them in turn through a generic stub, and answers are not
//    parsed (only the status and the latency count) unless the set has
//    labels: then each successful answer is parsed and checked
//    (CheckAnswer, clients/loadgen/labelled_data.h). The workers take the
//    requests from one shared turn, so the calls sent between two moments
//    carry consecutive requests whatever worker sent them (CountingEngine's
//    turn); RestartRequests() starts the turn again at the first, with a
//    limit if given: then a closed-loop slot, or the pacer, finds the turn
//    spent and sends nothing more. Streaming sends the set's first request
//    only, and has no turn.
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
//  - Streaming (EngineSettings::streams > 0, closed loop only; `method` is
//    ModelStreamInfer): the N slots share `streams` bidirectional streams,
//    slot k on stream k % streams, stream j on channel j % channels and
//    worker j % threads, at most 100 streams per channel (a server's limit on
//    concurrent HTTP/2 streams would leave the streams past it waiting for
//    ever: beyond 100 per channel the slots share streams; give more
//    --channels for one stream per slot). Each slot's request carries the
//    id "s<k>" (appended to the serialized request), so its answer is
//    matched by id whatever the order answers come in; a slot sends its
//    next request on its stream
//    as soon as its answer came. Answers are scanned for their id and
//    error_message only. An answer with error_message counts as a failure
//    of the code its "CODE: ..." prefix names (UNKNOWN without one). A
//    stream that ends fails the requests it had not answered (with the
//    stream's status) and is reopened, after a backoff as for UNAVAILABLE.
//    Streams carry no gRPC deadline (it would bound the whole stream):
//    EngineSettings::timeout is not applied per request; a request still
//    unanswered `hung` after Stop began is cancelled with its stream and
//    counted as unanswered. Stop half-closes each stream once its slots'
//    answers are in; the server then ends it OK.
//    Which spread is fair (measured with benchmarks/run_streaming.sh, see
//    benchmarks/RESULTS.md): one stream per slot (the tool's default) is
//    the unary run's twin: N independent request pipelines on the same
//    channels, each waiting only for its own answer. Slots sharing a stream
//    also share its one-write-at-a-time pipelines (client and server) and
//    its HTTP/2 flow-control window: 16 slots per stream ran at 0.6x to
//    1.4x the unary throughput at concurrency 64 from one round to the next
//    while spending the least CPU per request (answers coalesce), so it
//    measures the stream's pipelining more than the cost of a call.
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "clients/loadgen/engine_common.h"

namespace es::loadgen {

class LoadEngine final : public CountingEngine {
 public:
  // `channels` are shared by all threads; `method` is the full gRPC method
  // name ("/inference.GRPCInferenceService/ModelInfer").
  LoadEngine(std::vector<std::shared_ptr<grpc::Channel>> channels, int threads, std::string method,
             EngineSettings settings);
  ~LoadEngine() override;
  LoadEngine(const LoadEngine&) = delete;
  LoadEngine& operator=(const LoadEngine&) = delete;

  void Start(const LoadPlan& plan, const RequestSet& requests) override;
  void Stop() override;

 private:
  struct Worker;
  struct Event;
  struct Call;
  struct Retry;
  // ModelStreamInfer (engine.cc's streaming block).
  struct Stream;
  struct StreamOp;
  struct SlotState;
  void OpenStream(Worker* w, Stream* s);
  void SendOnStream(Worker* w, Stream* s, int slot, std::chrono::steady_clock::time_point scheduled);
  void WriteNext(Stream* s);
  void OnStreamEvent(Worker* w, StreamOp* op, bool ok);
  void OnStreamAnswer(Worker* w, Stream* s);
  void MaybeHalfClose(Stream* s);
  void MaybeStreamClosed(Worker* w, Stream* s);
  // An alarm `delay` from now on w's queue: Drain then sends `slot`'s next
  // call (on `stream`, if any), or reopens `stream` when slot is -1.
  void RetryLater(Worker* w, int slot, Stream* stream, std::chrono::milliseconds delay);
  Sample TakeRunning() override;
  void Pace(Worker* worker);   // open loop: issues calls on schedule
  void Drain(Worker* worker);  // completions; closed loop: issues the next call
  // A unary call of `slot` (-1: open loop); false when the turn's limit was sent (nothing sent).
  bool Issue(Worker* w, int slot, std::chrono::steady_clock::time_point scheduled);
  void Completed(Worker* w, std::unique_ptr<Call> call);
  void CancelOutstanding(Worker* w);  // Stop() waited `hung`: the rest are unanswered
  CheckedAnswer Check(const Call& call) const;  // --labels: a successful answer against its rows' labels

  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  int threads_;
  std::string method_;
  LoadPlan plan_;
  const RequestSet* set_ = nullptr;  // Start's; outlives the run
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<int64_t> stop_began_ns_{0};  // steady clock, when Stop() set stopping_
  std::vector<SlotState> slot_states_;  // streaming: per slot (each used by its stream's worker only)
};

}  // namespace es::loadgen
