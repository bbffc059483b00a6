// InferCalls: the one path every inference call takes, whatever carried it
// (a gRPC ModelInfer, one message of a gRPC ModelStreamInfer stream, an HTTP
// POST .../infer): admission under limits.max_inflight_calls, decoding and
// validation (request_codec), the run on the InferenceCore, the model's
// statistics and metrics, and the encoded answer. The transports only turn
// their wire format into an inference::ModelInferRequest and back, so a
// request means the same thing and is checked the same way on all of them.
//
// Two counts, for two purposes:
//  - places (Admit): a call holds one from arrival until its transport is
//    done with the answer (sent, or the client went away), so a client that
//    never reads its answers still counts; at most max_inflight_calls are
//    held, beyond that calls are refused RESOURCE_EXHAUSTED at once. This
//    bounds the memory clients can make the router hold, over all transports
//    together.
//  - runs: from Admit until Run's `done` returned (or the place was dropped
//    without a Run); a drain (WaitForInFlight) waits for these. Counted from
//    Admit, before the accepting check, so a drain cannot miss a call that
//    slipped in just as it began.
//
// Thread safety: every method may be called from any thread, concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "config/server_config.h"
#include "proto/grpc_service.pb.h"
#include "server/core/inference_core.h"
#include "server/repository/model_repository.h"
#include "server/core/model_statistics.h"
#include "server/experiment/experiments.h"
#include "server/kserve/request_metrics.h"

namespace es {

class SharedMemoryRegistry;

class InferCalls {
 public:
  // A held place under limits.max_inflight_calls; given back when the last
  // copy is destroyed. Keep it until the answer has left (or the client is gone).
  class PlaceState;
  using Place = std::shared_ptr<PlaceState>;

  // What the transport knows about the call beyond the message.
  struct CallContext {
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    std::function<bool()> cancelled;  // true once the client gave up (may be empty)
    bool http = false;                // the transport, for a trace's names (HTTP_* or GRPC_*)
    // A request header (HTTP) or metadata entry (gRPC) by lower-case name,
    // "" when absent; called only while Run runs (may be empty): where an
    // experiment's sticky_by is looked for when no request parameter has it.
    std::function<std::string(const std::string&)> header;
  };
  using Done = std::function<void(const Status&)>;

  // Where requests are sampled for tracing (null: none). Set before the
  // first request; `tracer` outlives its use.
  void SetTracer(Tracer* tracer) { tracer_.store(tracer); }
  // Where requests to models with an experiment (shadow, canary) go (null:
  // straight to the core). Set before the first request; outlives its use.
  void SetExperiments(Experiments* experiments) { experiments_.store(experiments); }

  // `metrics` may be null (no metrics); `shm` may be null (no shared-memory
  // tensors: a request naming a region is refused).
  InferCalls(const ServerConfig* config, ModelRepository* repository, InferenceCore* core, ModelStatistics* stats,
             RequestMetrics* metrics, SharedMemoryRegistry* shm = nullptr);

  // False once draining has begun: new calls are answered UNAVAILABLE.
  void SetAccepting(bool accepting) { accepting_.store(accepting); }
  bool accepting() const { return accepting_.load(); }

  // A place for a call to `model_name`, or the refusal (UNAVAILABLE while
  // shutting down, RESOURCE_EXHAUSTED over the limit, naming it); a refusal
  // is counted in the model's metrics.
  StatusOr<Place> Admit(const std::string& model_name);

  // Decodes `request`, runs it and fills `response` on success. `done` runs
  // exactly once, from any thread, possibly before Run returns; `request`
  // and `response` must stay alive until it has run. A request that fails
  // to decode is answered at once and counted against its model.
  // `place` is the one Admit gave for this call.
  void Run(const Place& place, const inference::ModelInferRequest& request, inference::ModelInferResponse* response,
           CallContext context, Done done);

  // A call its transport could not even turn into a request (e.g. an HTTP
  // body that is not valid JSON): counted against `model_name` as Run counts
  // a request that fails to decode, and its run ended. The caller answers it.
  void Refuse(const Place& place, const std::string& model_name, const Status& status);

  // Waits until no Run is in progress or `deadline` passes; true if none is.
  bool WaitForInFlight(std::chrono::steady_clock::time_point deadline) const;

  int64_t held() const { return held_.load(); }

  class PlaceState {
   public:
    explicit PlaceState(InferCalls* calls) : calls_(calls) {}
    ~PlaceState();
    PlaceState(const PlaceState&) = delete;
    PlaceState& operator=(const PlaceState&) = delete;
    // Ends the call's run (once): the drain stops waiting for it.
    void EndRun();

   private:
    InferCalls* const calls_;
    std::atomic<bool> run_ended_{false};
  };

 private:
  // A call refused before it ran: counted against its model's metrics
  // (`metrics`, null for a model not served), else as an unknown model.
  void CountRefused(ModelMetrics* metrics, const Status& status);
  // A request whose inputs are in a client's shared-memory region, for a
  // model whose answers (or whose members' answers) are cached: its inputs
  // copied into it now (ResponseCache::OwnInputs), so the cache key and the
  // hosts read the same bytes. An error when a region cannot be read.
  Status OwnCachedSharedMemoryInputs(InferRequest* request) const;
  // A request that did not decode: a failure in its model's statistics too.
  void CountUndecodable(ModelMetrics* metrics, const std::string& model_name, const Status& status);

  const ServerConfig* config_;
  ModelRepository* repository_;
  InferenceCore* core_;
  ModelStatistics* stats_;
  RequestMetrics* metrics_;
  SharedMemoryRegistry* shm_;
  std::atomic<Tracer*> tracer_{nullptr};
  std::atomic<Experiments*> experiments_{nullptr};
  std::atomic<bool> accepting_{true};
  std::atomic<int64_t> held_{0};    // places
  std::atomic<int> running_{0};     // Run() .. done
};

}  // namespace es
