#include "server/grpc_service.h"

#include <chrono>
#include <thread>

#include "server/grpc_stream.h"
#include "server/model_config_reply.h"
#include "server/request_codec.h"

namespace es {
namespace {

constexpr const char* kServerName = "ensemble-serve";
constexpr const char* kServerVersion = "0.1.0";

grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}


// The reactor of one admitted ModelInfer call. gRPC calls OnDone once it is
// done with the call: the answer was handed to the transport and acknowledged
// or the call was cancelled (e.g. its connection closed). Only then does the
// call give back its place under max_inflight_calls (InferCalls): until OnDone the call's
// request and response messages are still held, also for a client that never
// reads its answers.
class InferReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit InferReactor(InferCalls::Place place) : place_(std::move(place)) {}
  void OnCancel() override { cancelled_->store(true); }
  void OnDone() override { delete this; }  // gives the place back
  // Whether the client gave up; shared, so whatever holds the request may ask
  // after the reactor (and the call's context) are gone.
  std::function<bool()> Cancelled() const {
    return [flag = cancelled_] { return flag->load(); };
  }

 private:
  InferCalls::Place place_;
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

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

KServeService::KServeService(const ServerConfig* config, ModelRepository* repository, InferenceCore* core,
                             es::ModelStatistics* stats, InferCalls* calls, const AuthPolicy* auth,
                             SharedMemoryRegistry* shm)
    : config_(config),
      repository_(repository),
      core_(core),
      stats_(stats),
      calls_(calls),
      auth_(auth),
      shm_(shm) {}

bool KServeService::ServerIsReady() const {
  if (!calls_->accepting()) return false;
  for (const es::ModelConfig* model : repository_->Loaded()) {
    if (!core_->ModelReady(*model)) return false;
  }
  return true;
}

const es::ModelConfig* KServeService::FindModel(const std::string& name, const std::string& version,
                                                Status* error) const {
  const es::ModelConfig* model = repository_->Find(name);
  if (model == nullptr) {
    *error = Status::NotFound("unknown model '" + name + "'");
    return nullptr;
  }
  // No version: the model itself (ModelReady then says whether a version is
  // ready); a version must be a ready one.
  if (version.empty()) return model;
  StatusOr<int64_t> served = ResolveVersion(*repository_, *model, version);
  if (!served.ok()) {
    *error = served.status();
    return nullptr;
  }
  return model;
}

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
  resp->set_ready(ServerIsReady());
  return Reply(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KServeService::ModelReady(grpc::CallbackServerContext* ctx,
                                                    const inference::ModelReadyRequest* req,
                                                    inference::ModelReadyResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kHealth); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  return Reply(ctx, ToGrpcStatus(AnswerModelReady(*req, resp)));
}

Status KServeService::AnswerModelReady(const inference::ModelReadyRequest& req,
                                       inference::ModelReadyResponse* resp) const {
  Status error;
  const es::ModelConfig* model = FindModel(req.name(), req.version(), &error);
  if (model == nullptr) return error;
  resp->set_ready(calls_->accepting() && core_->ModelReady(*model));
  return Status::Ok();
}

grpc::ServerUnaryReactor* KServeService::ServerMetadata(grpc::CallbackServerContext* ctx,
                                                        const inference::ServerMetadataRequest*,
                                                        inference::ServerMetadataResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kInfer); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  AnswerServerMetadata(resp);
  return Reply(ctx, grpc::Status::OK);
}

void KServeService::AnswerServerMetadata(inference::ServerMetadataResponse* resp) const {
  resp->set_name(kServerName);
  resp->set_version(kServerVersion);
  resp->add_extensions("model_repository");
  resp->add_extensions("model_configuration");  // Triton's name for the ModelConfig RPC
  resp->add_extensions("statistics");
  resp->add_extensions("ensemble_uncertainty");
  if (shm_ != nullptr) resp->add_extensions("system_shared_memory");  // Triton's name
}

grpc::ServerUnaryReactor* KServeService::ModelMetadata(grpc::CallbackServerContext* ctx,
                                                       const inference::ModelMetadataRequest* req,
                                                       inference::ModelMetadataResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kInfer); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  return Reply(ctx, ToGrpcStatus(AnswerModelMetadata(*req, resp)));
}

Status KServeService::AnswerModelMetadata(const inference::ModelMetadataRequest& req,
                                          inference::ModelMetadataResponse* resp) const {
  Status error;
  const es::ModelConfig* model = FindModel(req.name(), req.version(), &error);
  if (model == nullptr) return error;
  resp->set_name(model->name);
  for (int64_t v : repository_->ReadyVersions(*model)) resp->add_versions(std::to_string(v));
  resp->set_platform(model->is_ensemble() ? "ensemble" : "pytorch_libtorch");
  for (const auto& in : model->inputs) FillTensorMetadata(*model, in, resp->add_inputs());
  for (const auto& out : model->outputs) FillTensorMetadata(*model, out, resp->add_outputs());
  return Status::Ok();
}

grpc::ServerUnaryReactor* KServeService::ModelConfig(grpc::CallbackServerContext* ctx,
                                                     const inference::ModelConfigRequest* req,
                                                     inference::ModelConfigResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kInfer); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  return Reply(ctx, ToGrpcStatus(AnswerModelConfig(*req, resp)));
}

Status KServeService::AnswerModelConfig(const inference::ModelConfigRequest& req,
                                        inference::ModelConfigResponse* resp) const {
  Status error;
  const es::ModelConfig* model = FindModel(req.name(), req.version(), &error);
  if (model == nullptr) return error;
  FillModelConfig(*model, *config_, resp->mutable_config());
  return Status::Ok();
}

grpc::ServerUnaryReactor* KServeService::ModelInfer(grpc::CallbackServerContext* ctx,
                                                    const inference::ModelInferRequest* req,
                                                    inference::ModelInferResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kInfer); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  StatusOr<InferCalls::Place> place = calls_->Admit(req->model_name());
  if (!place.ok()) return Reply(ctx, ToGrpcStatus(place.status()));
  auto* reactor = new InferReactor(*place);
  InferCalls::CallContext context{SteadyDeadline(*ctx), reactor->Cancelled()};
  calls_->Run(*place, *req, resp, std::move(context),
              [reactor](const Status& status) { reactor->Finish(ToGrpcStatus(status)); });
  return reactor;
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
KServeService::ModelStreamInfer(grpc::CallbackServerContext* ctx) {
  // Checked once, at stream start: every request on the stream is an infer call.
  if (Status s = Authorize(*ctx, *auth_, Access::kInfer); !s.ok()) return RejectStream(ToGrpcStatus(s));
  return StartStreamInfer(ctx, calls_);
}

grpc::ServerUnaryReactor* KServeService::RepositoryIndex(grpc::CallbackServerContext* ctx,
                                                         const inference::RepositoryIndexRequest* req,
                                                         inference::RepositoryIndexResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kInfer); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  AnswerRepositoryIndex(*req, resp);
  return Reply(ctx, grpc::Status::OK);
}

void KServeService::AnswerRepositoryIndex(const inference::RepositoryIndexRequest& req,
                                          inference::RepositoryIndexResponse* resp) const {
  // One entry per version (Triton lists each version of a model), and the
  // folders not loaded. A READY version whose hosts are all down is not ready.
  for (const ModelRepository::IndexEntry& entry : repository_->Index()) {
    auto* m = resp->add_models();
    m->set_name(entry.name);
    m->set_version(entry.version);
    m->set_state(entry.state);
    m->set_reason(entry.reason);
    const es::ModelConfig* model = entry.state == "READY" ? repository_->Find(entry.name) : nullptr;
    if (model != nullptr && !core_->ModelReady(*model)) {
      m->set_state("UNAVAILABLE");
      m->set_reason(model->is_ensemble() ? "a member is not ready" : "no host serving it is up");
    }
    if (req.ready() && m->state() != "READY") resp->mutable_models()->RemoveLast();
  }
}

Status KServeService::CheckExplicitMode(const char* what) const {
  if (config_->model_control_mode == ModelControlMode::kExplicit) return Status::Ok();
  return Status::Unavailable(std::string("explicit model ") + what + " is not allowed: model_control_mode is " +
                             ModelControlModeName(config_->model_control_mode) +
                             " (start the server with --model-control-mode explicit)");
}

grpc::ServerUnaryReactor* KServeService::RepositoryModelLoad(grpc::CallbackServerContext* ctx,
                                                             const inference::RepositoryModelLoadRequest* req,
                                                             inference::RepositoryModelLoadResponse*) {
  if (Status s = Authorize(*ctx, *auth_, Access::kAdmin); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  auto* reactor = ctx->DefaultReactor();
  LoadModel(*req, [reactor](const Status& s) { reactor->Finish(ToGrpcStatus(s)); });
  return reactor;
}

void KServeService::LoadModel(const inference::RepositoryModelLoadRequest& req,
                              std::function<void(const Status&)> done) {
  if (Status s = CheckExplicitMode("load"); !s.ok()) return done(s);
  if (!req.parameters().empty()) {
    return done(Status::InvalidArgument("load parameters (config, file overrides) are not supported: put the "
                                        "model's files into the repository and load it by name"));
  }
  repository_->LoadAsync(req.model_name(), std::move(done));
}

grpc::ServerUnaryReactor* KServeService::RepositoryModelUnload(grpc::CallbackServerContext* ctx,
                                                               const inference::RepositoryModelUnloadRequest* req,
                                                               inference::RepositoryModelUnloadResponse*) {
  if (Status s = Authorize(*ctx, *auth_, Access::kAdmin); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  auto* reactor = ctx->DefaultReactor();
  UnloadModel(*req, [reactor](const Status& s) { reactor->Finish(ToGrpcStatus(s)); });
  return reactor;
}

void KServeService::UnloadModel(const inference::RepositoryModelUnloadRequest& req,
                                std::function<void(const Status&)> done) {
  if (Status s = CheckExplicitMode("unload"); !s.ok()) return done(s);
  bool dependents = false;
  for (const auto& [key, value] : req.parameters()) {
    if (key != "unload_dependents" || value.parameter_choice_case() != inference::ModelRepositoryParameter::kBoolParam) {
      return done(Status::InvalidArgument("unknown unload parameter '" + key + "' (only unload_dependents, a bool)"));
    }
    dependents = value.bool_param();
  }
  repository_->UnloadAsync(req.model_name(), dependents, std::move(done));
}

grpc::ServerUnaryReactor* KServeService::ModelStatistics(grpc::CallbackServerContext* ctx,
                                                         const inference::ModelStatisticsRequest* req,
                                                         inference::ModelStatisticsResponse* resp) {
  if (Status s = Authorize(*ctx, *auth_, Access::kInfer); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  return Reply(ctx, ToGrpcStatus(AnswerModelStatistics(*req, resp)));
}

Status KServeService::AnswerModelStatistics(const inference::ModelStatisticsRequest& req,
                                            inference::ModelStatisticsResponse* resp) const {
  if (!stats_->Fill(req.name(), req.version(), resp)) {
    return Status::NotFound(req.version().empty()
                                ? "unknown model '" + req.name() + "'"
                                : "model '" + req.name() + "' has no statistics for version '" + req.version() + "'");
  }
  return Status::Ok();
}

// ---- system shared memory (Triton's extension; server/shm_registry.h) ----

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
  resp->set_status(kserve_->ServerIsReady() ? grpc::health::v1::HealthCheckResponse::SERVING
                                            : grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  return Reply(ctx, grpc::Status::OK);
}

}  // namespace es
