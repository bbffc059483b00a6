// KServeService: the KServe v2 GRPCInferenceService (and grpc.health.v1)
// over the InferenceCore, on gRPC's callback API: a ModelInfer handler
// validates and submits, then returns; the answer is finished later from the
// host's completion thread, so no gRPC thread waits on a model.
//
// Admission: at most limits.max_inflight_calls ModelInfer calls are held at
// once, counted from arrival until gRPC is done with the call (so a call
// whose answer its client never reads still counts); beyond it a call is
// answered RESOURCE_EXHAUSTED at once, naming the limit. With
// max_request_bytes and the models' output sizes this bounds the memory
// clients can make the router hold.
//
// This layer is thin on purpose: protocol in, Status out; one function
// (ToGrpcStatus) maps the core's Status onto grpc::Status.
//
// Thread safety: all handlers are called concurrently by gRPC; the service
// only reads the config and calls thread-safe collaborators.
#pragma once

#include <atomic>
#include <chrono>

#include "config/server_config.h"
#include "proto/grpc_service.grpc.pb.h"
#include "proto/health.grpc.pb.h"
#include "server/inference_core.h"
#include "server/model_repository.h"
#include "server/model_statistics.h"
#include "server/request_metrics.h"

namespace es {

grpc::Status ToGrpcStatus(const Status& status);

class KServeService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // `metrics` may be null (ensemble-server --no-metrics): nothing is recorded.
  KServeService(const ServerConfig* config, ModelRepository* repository, InferenceCore* core,
                es::ModelStatistics* stats, RequestMetrics* metrics = nullptr);

  // False once draining has begun: readiness goes down before we stop.
  void SetAcceptingRequests(bool accepting) { accepting_.store(accepting); }
  bool ServerIsReady() const;
  // Waits until no ModelInfer call is in flight or `deadline` passes; true if
  // the calls all finished.
  bool WaitForInFlight(std::chrono::steady_clock::time_point deadline) const;

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx, const inference::ServerLiveRequest* req,
                                       inference::ServerLiveResponse* resp) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* ctx, const inference::ServerReadyRequest* req,
                                        inference::ServerReadyResponse* resp) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx, const inference::ModelReadyRequest* req,
                                       inference::ModelReadyResponse* resp) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx,
                                           const inference::ServerMetadataRequest* req,
                                           inference::ServerMetadataResponse* resp) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx,
                                          const inference::ModelMetadataRequest* req,
                                          inference::ModelMetadataResponse* resp) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx, const inference::ModelInferRequest* req,
                                       inference::ModelInferResponse* resp) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* ctx, const inference::ModelConfigRequest* req,
                                        inference::ModelConfigResponse* resp) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* ctx,
                                            const inference::RepositoryIndexRequest* req,
                                            inference::RepositoryIndexResponse* resp) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* ctx,
                                            const inference::ModelStatisticsRequest* req,
                                            inference::ModelStatisticsResponse* resp) override;
  // Triton's semantics (model_control_mode explicit only): load (re)reads
  // the model's folder and loads it, an ensemble with its members; unload
  // answers the requests in flight first; parameter `unload_dependents`
  // (bool) unloads the ensembles that use the model too. Answered from the
  // repository's worker thread once done.
  grpc::ServerUnaryReactor* RepositoryModelLoad(grpc::CallbackServerContext* ctx,
                                                const inference::RepositoryModelLoadRequest* req,
                                                inference::RepositoryModelLoadResponse* resp) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(grpc::CallbackServerContext* ctx,
                                                  const inference::RepositoryModelUnloadRequest* req,
                                                  inference::RepositoryModelUnloadResponse* resp) override;

 private:
  // es:: because inside this class `ModelConfig` names the RPC handler.
  const es::ModelConfig* FindModel(const std::string& name, const std::string& version, Status* error) const;

  // OK in explicit mode; otherwise the error a load or unload gets.
  Status CheckExplicitMode(const char* what) const;

  const ServerConfig* config_;
  ModelRepository* repository_;
  InferenceCore* core_;
  es::ModelStatistics* stats_;
  RequestMetrics* metrics_;  // null when metrics are off
  std::atomic<bool> accepting_{true};
  std::atomic<int> in_flight_{0};  // ModelInfer calls between decode and Finish (what a drain waits for)
  // ModelInfer calls from arrival until gRPC is done with them (OnDone),
  // answers not yet read by their clients included: at most
  // limits.max_inflight_calls are admitted, the rest are refused at once.
  std::atomic<int64_t> held_calls_{0};
};

// grpc.health.v1.Health: SERVING when the server is ready (service "" or
// "inference.GRPCInferenceService"), NOT_SERVING otherwise.
class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  explicit HealthService(const KServeService* kserve) : kserve_(kserve) {}
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                                  grpc::health::v1::HealthCheckResponse* resp) override;

 private:
  const KServeService* kserve_;
};

}  // namespace es
