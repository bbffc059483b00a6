// KServeService: the KServe v2 GRPCInferenceService (and grpc.health.v1)
// over the InferenceCore, on gRPC's callback API: a ModelInfer handler
// validates and submits, then returns; the answer is finished later from the
// host's completion thread, so no gRPC thread waits on a model.
//
// Admission, decoding, statistics and metrics of inference calls are
// InferCalls' (shared with the stream and HTTP front ends): a ModelInfer call
// holds its place until gRPC is done with it (OnDone), so a call whose answer
// its client never reads still counts.
//
// This layer is thin on purpose: protocol in, Status out; one function
// (ToGrpcStatus) maps the core's Status onto grpc::Status.
//
// Thread safety: all handlers are called concurrently by gRPC; the service
// only reads the config and calls thread-safe collaborators.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>

#include "config/server_config.h"
#include "proto/grpc_service.grpc.pb.h"
#include "proto/health.grpc.pb.h"
#include "server/auth_policy.h"
#include "server/infer_calls.h"
#include "server/inference_core.h"
#include "server/model_repository.h"
#include "server/model_statistics.h"
#include "server/shm_registry.h"

namespace es {

grpc::Status ToGrpcStatus(const Status& status);

// The call's gRPC deadline on the steady clock the core uses (max: none).
std::chrono::steady_clock::time_point SteadyDeadline(const grpc::CallbackServerContext& ctx);

// The call's `authorization` metadata checked against `auth` for `access`.
Status Authorize(const grpc::CallbackServerContext& ctx, const AuthPolicy& auth, Access access);

class KServeService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // `auth` checks each call's token (see auth_policy.h for who may call what).
  // `shm`: the system shared-memory regions (null: the RPCs answer UNAVAILABLE).
  KServeService(const ServerConfig* config, ModelRepository* repository, InferenceCore* core,
                es::ModelStatistics* stats, InferCalls* calls, const AuthPolicy* auth,
                SharedMemoryRegistry* shm = nullptr);

  // Ready: accepting calls (not draining) and every served model ready.
  bool ServerIsReady() const;

  // The answers behind the RPCs, without transport or authorization (the
  // caller checks the token): the RPC handlers below and the HTTP front end
  // (server/http_routes.cc, which turns them into JSON) share them.
  void AnswerServerMetadata(inference::ServerMetadataResponse* resp) const;
  Status AnswerModelReady(const inference::ModelReadyRequest& req, inference::ModelReadyResponse* resp) const;
  Status AnswerModelMetadata(const inference::ModelMetadataRequest& req,
                             inference::ModelMetadataResponse* resp) const;
  Status AnswerModelConfig(const inference::ModelConfigRequest& req, inference::ModelConfigResponse* resp) const;
  // `req.ready()`: only the versions that are ready (Triton's `ready` flag).
  void AnswerRepositoryIndex(const inference::RepositoryIndexRequest& req,
                             inference::RepositoryIndexResponse* resp) const;
  Status AnswerModelStatistics(const inference::ModelStatisticsRequest& req,
                               inference::ModelStatisticsResponse* resp) const;
  // `done` runs once, maybe from the repository's worker thread.
  void LoadModel(const inference::RepositoryModelLoadRequest& req, std::function<void(const Status&)> done);
  void UnloadModel(const inference::RepositoryModelUnloadRequest& req, std::function<void(const Status&)> done);

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
  // Triton's bidirectional streaming (server/grpc_stream.h): many requests
  // in flight per stream, answers by request id, errors as error_message.
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>* ModelStreamInfer(
      grpc::CallbackServerContext* ctx) override;
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
  // Triton's system shared-memory extension (server/shm_registry.h). Status:
  // every region, or the one named (NOT_FOUND). Register: admin. Unregister
  // (admin): the one named, or all with an empty name; a name not registered
  // is OK, as in Triton.
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(grpc::CallbackServerContext* ctx,
                                                     const inference::SystemSharedMemoryStatusRequest* req,
                                                     inference::SystemSharedMemoryStatusResponse* resp) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(grpc::CallbackServerContext* ctx,
                                                       const inference::SystemSharedMemoryRegisterRequest* req,
                                                       inference::SystemSharedMemoryRegisterResponse* resp) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(grpc::CallbackServerContext* ctx,
                                                         const inference::SystemSharedMemoryUnregisterRequest* req,
                                                         inference::SystemSharedMemoryUnregisterResponse* resp) override;

 private:
  // es:: because inside this class `ModelConfig` names the RPC handler.
  const es::ModelConfig* FindModel(const std::string& name, const std::string& version, Status* error) const;

  // OK in explicit mode; otherwise the error a load or unload gets.
  Status CheckExplicitMode(const char* what) const;

  const ServerConfig* config_;
  ModelRepository* repository_;
  InferenceCore* core_;
  es::ModelStatistics* stats_;
  InferCalls* calls_;
  const AuthPolicy* auth_;
  SharedMemoryRegistry* shm_;  // may be null
};

// grpc.health.v1.Health: SERVING when the server is ready (service "" or
// "inference.GRPCInferenceService"), NOT_SERVING otherwise.
class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  HealthService(const KServeService* kserve, const AuthPolicy* auth) : kserve_(kserve), auth_(auth) {}
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                                  grpc::health::v1::HealthCheckResponse* resp) override;

 private:
  const KServeService* kserve_;
  const AuthPolicy* auth_;
};

}  // namespace es
