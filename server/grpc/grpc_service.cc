#include "server/grpc/grpc_service.h"

#include <chrono>
#include <thread>

#include "server/grpc/grpc_stream.h"
#include "server/grpc/infer_request_wire.h"

namespace es {

grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

namespace {


// The reactor of one admitted ModelInfer call. gRPC calls OnDone once it is
// done with the call: the answer was handed to the transport and acknowledged
// or the call was cancelled (e.g. its connection closed). Only then does the
// call give back its place under max_inflight_calls (InferCalls): until OnDone the call's
// request and response messages are still held, also for a client that never
// reads its answers.
class InferReactor final : public grpc::ServerUnaryReactor {
 public:
  InferReactor(InferCalls::Place place, grpc::ByteBuffer* answer) : place_(std::move(place)), answer_(answer) {}
  // The call's messages: held here, as gRPC holds a typed call's, until OnDone.
  inference::ModelInferRequest& request() { return request_; }
  inference::ModelInferResponse* response() { return &response_; }
  // Ends the call: the response as gRPC's bytes when `status` is OK.
  void Answer(const Status& status) {
    if (!status.ok()) return Finish(ToGrpcStatus(status));
    bool own_buffer = false;
    grpc::Status serialized =
        grpc::SerializationTraits<inference::ModelInferResponse>::Serialize(response_, answer_, &own_buffer);
    Finish(serialized);
  }
  void OnCancel() override { cancelled_->store(true); }
  void OnDone() override { delete this; }  // gives the place back
  // Both reactions above are trivial (an atomic store; two atomic decrements
  // and a free), so gRPC may run them on the thread that completes the call
  // instead of handing OnDone to its executor thread: that hand-off cost
  // a wake-up per call (a sixth of the router's CPU on an echo model, by
  // perf). gRPC marks the hook "not API" but its own FinishOnlyReactor uses
  // it; `override` makes a gRPC without it fail to compile, not misbehave.
  bool InternalInlineable() override { return true; }
  // Whether the client gave up; shared, so whatever holds the request may ask
  // after the reactor (and the call's context) are gone.
  std::function<bool()> Cancelled() const {
    return [flag = cancelled_] { return flag->load(); };
  }

 private:
  InferCalls::Place place_;
  grpc::ByteBuffer* const answer_;  // gRPC's, valid until OnDone
  inference::ModelInferRequest request_;
  inference::ModelInferResponse response_;
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace

Status Authorize(const grpc::CallbackServerContext& ctx, const AuthPolicy& auth, Access access) {
  if (!auth.enabled()) return Status::Ok();
  const auto& metadata = ctx.client_metadata();
  const auto it = metadata.find("authorization");
  const std::string_view value = it == metadata.end() ? std::string_view()
                                                      : std::string_view(it->second.data(), it->second.size());
  return auth.Check(value, access);
}

std::chrono::steady_clock::time_point SteadyDeadline(const grpc::CallbackServerContext& ctx) {
  const auto deadline = ctx.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return std::chrono::steady_clock::time_point::max();
  const auto left = deadline - std::chrono::system_clock::now();
  return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(left);
}

std::function<std::string(const std::string&)> MetadataLookup(const grpc::CallbackServerContext* ctx) {
  return [ctx](const std::string& key) {
    const auto& metadata = ctx->client_metadata();
    auto it = metadata.find(grpc::string_ref(key));
    return it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
  };
}

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

KServeService::KServeService(KServeAnswers* answers, InferCalls* calls, const AuthPolicy* auth,
                             SharedMemoryRegistry* shm, LogSettingsReply* log_settings,
                             TraceSettingsReply* trace_settings)
    : answers_(answers),
      calls_(calls),
      auth_(auth),
      shm_(shm),
      log_settings_(log_settings),
      trace_settings_(trace_settings) {}

grpc::ServerUnaryReactor* KServeService::ServerLive(grpc::CallbackServerContext* ctx,
                                                    const inference::ServerLiveRequest*,
                                                    inference::ServerLiveResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kHealth); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  resp->set_live(true);
  return Reply(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KServeService::ServerReady(grpc::CallbackServerContext* ctx,
                                                     const inference::ServerReadyRequest*,
                                                     inference::ServerReadyResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kHealth); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  resp->set_ready(answers_->ServerIsReady());
  return Reply(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KServeService::ModelReady(grpc::CallbackServerContext* ctx,
                                                    const inference::ModelReadyRequest* req,
                                                    inference::ModelReadyResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kHealth); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  return Reply(ctx, ToGrpcStatus(answers_->AnswerModelReady(*req, resp)));
}

grpc::ServerUnaryReactor* KServeService::ServerMetadata(grpc::CallbackServerContext* ctx,
                                                        const inference::ServerMetadataRequest*,
                                                        inference::ServerMetadataResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kInfer); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  answers_->AnswerServerMetadata(resp);
  if (log_settings_ != nullptr) resp->add_extensions("logging");
  if (trace_settings_ != nullptr) resp->add_extensions("trace");
  return Reply(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KServeService::ModelMetadata(grpc::CallbackServerContext* ctx,
                                                       const inference::ModelMetadataRequest* req,
                                                       inference::ModelMetadataResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kInfer); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  return Reply(ctx, ToGrpcStatus(answers_->AnswerModelMetadata(*req, resp)));
}

grpc::ServerUnaryReactor* KServeService::ModelConfig(grpc::CallbackServerContext* ctx,
                                                     const inference::ModelConfigRequest* req,
                                                     inference::ModelConfigResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kInfer); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  return Reply(ctx, ToGrpcStatus(answers_->AnswerModelConfig(*req, resp)));
}

grpc::ServerUnaryReactor* KServeService::ModelInfer(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                    grpc::ByteBuffer* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kInfer); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  inference::ModelInferRequest request;
  if (Status s = ParseInferRequest(*req, &request); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  StatusOr<InferCalls::Place> place = calls_->Admit(request.model_name());
  if (!place.ok()) return Reply(ctx, ToGrpcStatus(place.status()));
  auto* reactor = new InferReactor(*place, resp);
  reactor->request().Swap(&request);
  InferCalls::CallContext context;
  context.deadline = SteadyDeadline(*ctx);
  context.cancelled = reactor->Cancelled();
  context.header = MetadataLookup(ctx);
  calls_->Run(*place, reactor->request(), reactor->response(), std::move(context),
              [reactor](const Status& status) { reactor->Answer(status); });
  return reactor;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* KServeService::ModelStreamInfer(
    grpc::CallbackServerContext* ctx) {
  // Checked once, at stream start: every request on the stream is an infer call.
  if (Status s = Authorize(*ctx, *auth_, Access::kInfer); !s.ok()) return RejectStream(ToGrpcStatus(s));
  return StartStreamInfer(ctx, calls_);
}

grpc::ServerUnaryReactor* KServeService::RepositoryIndex(grpc::CallbackServerContext* ctx,
                                                         const inference::RepositoryIndexRequest* req,
                                                         inference::RepositoryIndexResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kInfer); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  answers_->AnswerRepositoryIndex(*req, resp);
  return Reply(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KServeService::RepositoryModelLoad(grpc::CallbackServerContext* ctx,
                                                             const inference::RepositoryModelLoadRequest* req,
                                                             inference::RepositoryModelLoadResponse*) {
  if (Status s = Authorize(*ctx, *auth_, Access::kAdmin); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  auto* reactor = ctx->DefaultReactor();
  answers_->LoadModel(*req, [reactor](const Status& s) { reactor->Finish(ToGrpcStatus(s)); });
  return reactor;
}

grpc::ServerUnaryReactor* KServeService::RepositoryModelUnload(grpc::CallbackServerContext* ctx,
                                                               const inference::RepositoryModelUnloadRequest* req,
                                                               inference::RepositoryModelUnloadResponse*) {
  if (Status s = Authorize(*ctx, *auth_, Access::kAdmin); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  auto* reactor = ctx->DefaultReactor();
  answers_->UnloadModel(*req, [reactor](const Status& s) { reactor->Finish(ToGrpcStatus(s)); });
  return reactor;
}

grpc::ServerUnaryReactor* KServeService::ModelStatistics(grpc::CallbackServerContext* ctx,
                                                         const inference::ModelStatisticsRequest* req,
                                                         inference::ModelStatisticsResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kInfer); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  return Reply(ctx, ToGrpcStatus(answers_->AnswerModelStatistics(*req, resp)));
}

// ---- system shared memory (Triton's extension; server/shm/shm_registry.h) ----

grpc::ServerUnaryReactor* KServeService::SystemSharedMemoryStatus(grpc::CallbackServerContext* ctx,
                                                                  const inference::SystemSharedMemoryStatusRequest* req,
                                                                  inference::SystemSharedMemoryStatusResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kAdmin); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  if (shm_ == nullptr) return Reply(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "shared memory is not available"));
  StatusOr<std::vector<SharedMemoryRegistry::RegionInfo>> regions = shm_->List(req->name());
  if (!regions.ok()) return Reply(ctx, ToGrpcStatus(regions.status()));
  for (const SharedMemoryRegistry::RegionInfo& info : *regions) {
    auto& r = (*resp->mutable_regions())[info.name];
    r.set_name(info.name);
    r.set_key(info.key);
    r.set_offset(info.offset);
    r.set_byte_size(info.byte_size);
  }
  return Reply(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KServeService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryRegisterRequest* req,
    inference::SystemSharedMemoryRegisterResponse*) {
  // Registration makes the server open (and later write to) a client's
  // object: an admin call (auth_policy.h).
  if (Status s = Authorize(*ctx, *auth_, Access::kAdmin); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  if (shm_ == nullptr) return Reply(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "shared memory is not available"));
  return Reply(ctx, ToGrpcStatus(shm_->Register(req->name(), req->key(), req->offset(), req->byte_size())));
}

grpc::ServerUnaryReactor* KServeService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* ctx, const inference::SystemSharedMemoryUnregisterRequest* req,
    inference::SystemSharedMemoryUnregisterResponse*) {
  if (Status s = Authorize(*ctx, *auth_, Access::kAdmin); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  if (shm_ == nullptr) return Reply(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "shared memory is not available"));
  if (req->name().empty()) {
    shm_->UnregisterAll();
    return Reply(ctx, grpc::Status::OK);
  }
  // Triton answers OK for a name that is not registered (unregistering is
  // idempotent: clients unregister in their clean-up whatever happened).
  Status s = shm_->Unregister(req->name());
  if (s.code() == StatusCode::kNotFound) s = Status::Ok();
  return Reply(ctx, ToGrpcStatus(s));
}

// ---- logging and trace (Triton's extensions; kserve/log_settings_reply.h, trace_settings_reply.h) ----

grpc::ServerUnaryReactor* KServeService::LogSettings(grpc::CallbackServerContext* ctx,
                                                     const inference::LogSettingsRequest* req,
                                                     inference::LogSettingsResponse* resp) {
  if (log_settings_ == nullptr) {
    return Reply(ctx, grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this server has no logging extension"));
  }
  const Access access = req->settings().empty() ? Access::kInfer : Access::kAdmin;
  if (Status s = Authorize(*ctx, *auth_, access); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  return Reply(ctx, ToGrpcStatus(log_settings_->Update(*req, resp)));
}

grpc::ServerUnaryReactor* KServeService::TraceSetting(grpc::CallbackServerContext* ctx,
                                                      const inference::TraceSettingRequest* req,
                                                      inference::TraceSettingResponse* resp) {
  if (trace_settings_ == nullptr) {
    return Reply(ctx, grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this server has no trace extension"));
  }
  const Access access = req->settings().empty() ? Access::kInfer : Access::kAdmin;
  if (Status s = Authorize(*ctx, *auth_, access); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  return Reply(ctx, ToGrpcStatus(trace_settings_->Update(*req, resp)));
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* ctx,
                                               const grpc::health::v1::HealthCheckRequest* req,
                                               grpc::health::v1::HealthCheckResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kHealth); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  const std::string& service = req->service();
  // "liveness": the process is up and answers RPCs (a liveness probe), never
  // NOT_SERVING for a model host that restarts, which the router heals
  // itself; "" and the KServe service report readiness.
  if (service == "liveness") {
    resp->set_status(grpc::health::v1::HealthCheckResponse::SERVING);
    return Reply(ctx, grpc::Status::OK);
  }
  if (!service.empty() && service != "inference.GRPCInferenceService") {
    return Reply(ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service '" + service + "'"));
  }
  resp->set_status(answers_->ServerIsReady() ? grpc::health::v1::HealthCheckResponse::SERVING
                                            : grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  return Reply(ctx, grpc::Status::OK);
}

}  // namespace es
