// KServeService: the KServe v2 GRPCInferenceService (and grpc.health.v1)
// on gRPC's callback API: a ModelInfer handler
// validates and submits, then returns; the answer is finished later from the
// host's completion thread, so no gRPC thread waits on a model.
//
// Admission, decoding, statistics and metrics of inference calls are
// InferCalls' (shared with the stream and HTTP front ends): a ModelInfer call
// holds its place until gRPC is done with it (OnDone), so a call whose answer
// its client never reads still counts.
//
// This layer is thin on purpose: it checks the token and hands the call to
// the protocol layer (KServeAnswers, InferCalls); one function (ToGrpcStatus)
// maps the core's Status onto grpc::Status.
//
// Thread safety: all handlers are called concurrently by gRPC; the service
// only reads the config and calls thread-safe collaborators.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>

#include "proto/grpc_service.grpc.pb.h"
#include "proto/health.grpc.pb.h"
#include "server/kserve/infer_calls.h"
#include "server/kserve/kserve_answers.h"
#include "server/kserve/log_settings_reply.h"
#include "server/kserve/trace_settings_reply.h"
#include "server/security/auth_policy.h"
#include "server/shm/shm_registry.h"

namespace es {

grpc::Status ToGrpcStatus(const Status& status);

// Finishes a unary call with `status` on its default reactor (what every
// unary handler returns).
grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx, const grpc::Status& status);

// The call's gRPC deadline on the steady clock the core uses (max: none).
std::chrono::steady_clock::time_point SteadyDeadline(const grpc::CallbackServerContext& ctx);

// A lookup of the call's client metadata by lower-case key ("" when absent),
// for InferCalls::CallContext::header; valid while the call is.
std::function<std::string(const std::string&)> MetadataLookup(const grpc::CallbackServerContext* ctx);

// The call's `authorization` metadata checked against `auth` for `access`.
Status Authorize(const grpc::CallbackServerContext& ctx, const AuthPolicy& auth, Access access);

// ModelInfer and ModelStreamInfer take their requests as gRPC's bytes, which
// ParseInferRequest (infer_request_wire.h) walks before it parses them.
// The chain is the generated CallbackService's with those two raw.
using KServeGrpc = inference::GRPCInferenceService;
using KServeServiceBase = KServeGrpc::WithCallbackMethod_ServerLive<
    KServeGrpc::WithCallbackMethod_ServerReady<KServeGrpc::WithCallbackMethod_ModelReady<
        KServeGrpc::WithCallbackMethod_ServerMetadata<KServeGrpc::WithCallbackMethod_ModelMetadata<
            KServeGrpc::WithRawCallbackMethod_ModelInfer<KServeGrpc::WithRawCallbackMethod_ModelStreamInfer<
                KServeGrpc::WithCallbackMethod_ModelConfig<KServeGrpc::WithCallbackMethod_ModelStatistics<
                    KServeGrpc::WithCallbackMethod_RepositoryIndex<KServeGrpc::WithCallbackMethod_RepositoryModelLoad<
                        KServeGrpc::WithCallbackMethod_RepositoryModelUnload<
                            KServeGrpc::WithCallbackMethod_SystemSharedMemoryStatus<
                                KServeGrpc::WithCallbackMethod_SystemSharedMemoryRegister<
                                    KServeGrpc::WithCallbackMethod_SystemSharedMemoryUnregister<
                                        KServeGrpc::WithCallbackMethod_LogSettings<
                                            KServeGrpc::WithCallbackMethod_TraceSetting<
                                                KServeGrpc::Service>>>>>>>>>>>>>>>>>;

class KServeService final : public KServeServiceBase {
 public:
  // `answers`: the transport-free answers (kserve/kserve_answers.h); `auth`
  // checks each call's token (see auth_policy.h for who may call what);
  // `shm`: the system shared-memory regions (null: the RPCs answer
  // UNAVAILABLE); `log_settings` and `trace_settings`: the logging and trace
  // extensions (null: their RPC answers UNIMPLEMENTED and ServerMetadata
  // does not announce it). Every pointer must outlive the service.
  KServeService(KServeAnswers* answers, InferCalls* calls, const AuthPolicy* auth,
                SharedMemoryRegistry* shm = nullptr, LogSettingsReply* log_settings = nullptr,
                TraceSettingsReply* trace_settings = nullptr);

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
  // A ModelInferRequest's bytes in, a ModelInferResponse's out.
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                       grpc::ByteBuffer* resp) override;
  // Triton's bidirectional streaming (server/grpc/grpc_stream.h): many requests
  // in flight per stream, answers by request id, errors as error_message.
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ModelStreamInfer(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* ctx, const inference::ModelConfigRequest* req,
                                        inference::ModelConfigResponse* resp) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* ctx,
                                            const inference::RepositoryIndexRequest* req,
                                            inference::RepositoryIndexResponse* resp) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* ctx,
                                            const inference::ModelStatisticsRequest* req,
                                            inference::ModelStatisticsResponse* resp) override;
  // KServeAnswers::LoadModel/UnloadModel; answered from the repository's
  // worker thread once done.
  grpc::ServerUnaryReactor* RepositoryModelLoad(grpc::CallbackServerContext* ctx,
                                                const inference::RepositoryModelLoadRequest* req,
                                                inference::RepositoryModelLoadResponse* resp) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(grpc::CallbackServerContext* ctx,
                                                  const inference::RepositoryModelUnloadRequest* req,
                                                  inference::RepositoryModelUnloadResponse* resp) override;
  // Triton's system shared-memory extension (server/shm/shm_registry.h). Status:
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
  // Triton's logging extension (kserve/log_settings_reply.h): no settings
  // reads them (infer role), any setting changes them (admin role).
  grpc::ServerUnaryReactor* LogSettings(grpc::CallbackServerContext* ctx, const inference::LogSettingsRequest* req,
                                        inference::LogSettingsResponse* resp) override;
  // Triton's trace extension (kserve/trace_settings_reply.h): no settings
  // reads them (infer role), any setting changes them (admin role).
  grpc::ServerUnaryReactor* TraceSetting(grpc::CallbackServerContext* ctx, const inference::TraceSettingRequest* req,
                                         inference::TraceSettingResponse* resp) override;

 private:
  KServeAnswers* answers_;
  InferCalls* calls_;
  const AuthPolicy* auth_;
  SharedMemoryRegistry* shm_;        // may be null
  LogSettingsReply* log_settings_;  // may be null
  TraceSettingsReply* trace_settings_;  // may be null
};

// grpc.health.v1.Health: SERVING when the server is ready (service "" or
// "inference.GRPCInferenceService"), NOT_SERVING otherwise.
class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  HealthService(const KServeAnswers* answers, const AuthPolicy* auth) : answers_(answers), auth_(auth) {}
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx, const grpc::health::v1::HealthCheckRequest* req,
                                  grpc::health::v1::HealthCheckResponse* resp) override;

 private:
  const KServeAnswers* answers_;
  const AuthPolicy* auth_;
};

}  // namespace es
