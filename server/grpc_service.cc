#include "server/grpc_service.h"

#include <chrono>
#include <thread>

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

// The client's gRPC deadline, on the steady clock the core uses.
std::chrono::steady_clock::time_point SteadyDeadline(const grpc::CallbackServerContext& ctx) {
  const auto deadline = ctx.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return std::chrono::steady_clock::time_point::max();
  const auto left = deadline - std::chrono::system_clock::now();
  return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(left);
}

// The reactor of one admitted ModelInfer call. gRPC calls OnDone once it is
// done with the call: the answer was handed to the transport and acknowledged
// or the call was cancelled (e.g. its connection closed). Only then does the
// call give back its place under max_inflight_calls: until OnDone the call's
// request and response messages are still held, also for a client that never
// reads its answers.
class InferReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit InferReactor(std::atomic<int64_t>* held) : held_(held) {}
  void OnDone() override {
    held_->fetch_sub(1);
    delete this;
  }

 private:
  std::atomic<int64_t>* const held_;
};

}  // namespace

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

KServeService::KServeService(const ServerConfig* config, ModelRepository* repository, InferenceCore* core,
                             es::ModelStatistics* stats, RequestMetrics* metrics)
    : config_(config), repository_(repository), core_(core), stats_(stats), metrics_(metrics) {}

bool KServeService::ServerIsReady() const {
  if (!accepting_.load()) return false;
  for (const es::ModelConfig* model : repository_->Loaded()) {
    if (!core_->ModelReady(*model)) return false;
  }
  return true;
}

bool KServeService::WaitForInFlight(std::chrono::steady_clock::time_point deadline) const {
  // A short poll: this runs once, at shutdown, and must not slow the hot path
  // with a condition variable that every call would have to signal.
  while (in_flight_.load() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
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
  resp->set_live(true);
  return Reply(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KServeService::ServerReady(grpc::CallbackServerContext* ctx,
                                                     const inference::ServerReadyRequest*,
                                                     inference::ServerReadyResponse* resp) {
  resp->set_ready(ServerIsReady());
  return Reply(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KServeService::ModelReady(grpc::CallbackServerContext* ctx,
                                                    const inference::ModelReadyRequest* req,
                                                    inference::ModelReadyResponse* resp) {
  Status error;
  const es::ModelConfig* model = FindModel(req->name(), req->version(), &error);
  if (model == nullptr) return Reply(ctx, ToGrpcStatus(error));
  resp->set_ready(accepting_.load() && core_->ModelReady(*model));
  return Reply(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KServeService::ServerMetadata(grpc::CallbackServerContext* ctx,
                                                        const inference::ServerMetadataRequest*,
                                                        inference::ServerMetadataResponse* resp) {
  resp->set_name(kServerName);
  resp->set_version(kServerVersion);
  resp->add_extensions("model_repository");
  resp->add_extensions("model_configuration");  // Triton's name for the ModelConfig RPC
  resp->add_extensions("statistics");
  resp->add_extensions("ensemble_uncertainty");
  return Reply(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KServeService::ModelMetadata(grpc::CallbackServerContext* ctx,
                                                       const inference::ModelMetadataRequest* req,
                                                       inference::ModelMetadataResponse* resp) {
  Status error;
  const es::ModelConfig* model = FindModel(req->name(), req->version(), &error);
  if (model == nullptr) return Reply(ctx, ToGrpcStatus(error));
  resp->set_name(model->name);
  for (int64_t v : repository_->ReadyVersions(*model)) resp->add_versions(std::to_string(v));
  resp->set_platform(model->is_ensemble() ? "ensemble" : "pytorch_libtorch");
  for (const auto& in : model->inputs) FillTensorMetadata(*model, in, resp->add_inputs());
  for (const auto& out : model->outputs) FillTensorMetadata(*model, out, resp->add_outputs());
  return Reply(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KServeService::ModelConfig(grpc::CallbackServerContext* ctx,
                                                     const inference::ModelConfigRequest* req,
                                                     inference::ModelConfigResponse* resp) {
  Status error;
  const es::ModelConfig* model = FindModel(req->name(), req->version(), &error);
  if (model == nullptr) return Reply(ctx, ToGrpcStatus(error));
  FillModelConfig(*model, *config_, resp->mutable_config());
  return Reply(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* KServeService::ModelInfer(grpc::CallbackServerContext* ctx,
                                                    const inference::ModelInferRequest* req,
                                                    inference::ModelInferResponse* resp) {
  const auto start = std::chrono::steady_clock::now();
  // Counted before the accepting check, so Shutdown cannot miss a call that
  // slipped in just as draining began.
  in_flight_.fetch_add(1);
  const int64_t held = held_calls_.fetch_add(1) + 1;
  // Read-only map lookup; from here on metrics are relaxed atomics only.
  ModelMetrics* metrics = metrics_ != nullptr ? metrics_->Find(req->model_name()) : nullptr;
  auto refuse = [&](const grpc::Status& status) {
    if (metrics != nullptr) {
      metrics->Refused(status.error_code());
    } else if (metrics_ != nullptr) {
      metrics_->CountUnknownModel();
    }
    held_calls_.fetch_sub(1);
    in_flight_.fetch_sub(1);
    return Reply(ctx, status);
  };
  if (!accepting_.load()) return refuse(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down"));
  // Refused before decoding: the point is to bound what the router holds.
  const int64_t max_calls = config_->limits.max_inflight_calls;
  if (held > max_calls) {
    return refuse(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                               "server busy: " + std::to_string(held - 1) +
                                   " ModelInfer calls are held (limits.max_inflight_calls " +
                                   std::to_string(max_calls) + "); retry later"));
  }
  auto decoded = DecodeInferRequest(*req, *repository_, config_->limits);
  if (!decoded.ok()) {
    // Counted against the version it would have gone to (none: not counted).
    if (const es::ModelConfig* model = repository_->Find(req->model_name()); model != nullptr) {
      const std::vector<int64_t> ready = repository_->ReadyVersions(*model);
      if (!ready.empty()) stats_->Record(model->name, ready.back(), false, 0, {}, 0);
    }
    return refuse(ToGrpcStatus(decoded.status()));
  }
  std::shared_ptr<InferRequest> request = std::move(decoded).value();
  request->deadline = std::min(request->deadline, SteadyDeadline(*ctx));
  // The context lives until Finish, which comes after any look at this.
  request->cancelled = [ctx] { return ctx->IsCancelled(); };
  auto* reactor = new InferReactor(&held_calls_);
  if (metrics != nullptr) metrics->Started();
  core_->Infer(request, [this, reactor, resp, request, start, stats = stats_, metrics](const Status& status,
                                                                                      InferResponse response) {
    const auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
    stats->Record(request->model->name, request->version, status.ok(), static_cast<uint64_t>(elapsed.count()),
                  response.stages, static_cast<uint64_t>(request->batch_rows()));
    if (metrics != nullptr) {
      metrics->Finished(static_cast<int>(status.code()), static_cast<uint64_t>(elapsed.count()), response,
                        request->batch_rows());
    }
    if (status.ok()) EncodeInferResponse(*request, std::move(response), resp);
    reactor->Finish(ToGrpcStatus(status));
    in_flight_.fetch_sub(1);
  });
  return reactor;
}

grpc::ServerUnaryReactor* KServeService::RepositoryIndex(grpc::CallbackServerContext* ctx,
                                                         const inference::RepositoryIndexRequest*,
                                                         inference::RepositoryIndexResponse* resp) {
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
  }
  return Reply(ctx, grpc::Status::OK);
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
  if (Status s = CheckExplicitMode("load"); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  if (!req->parameters().empty()) {
    return Reply(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   "load parameters (config, file overrides) are not supported: put the model's "
                                   "files into the repository and load it by name"));
  }
  auto* reactor = ctx->DefaultReactor();
  repository_->LoadAsync(req->model_name(), [reactor](const Status& s) { reactor->Finish(ToGrpcStatus(s)); });
  return reactor;
}

grpc::ServerUnaryReactor* KServeService::RepositoryModelUnload(grpc::CallbackServerContext* ctx,
                                                               const inference::RepositoryModelUnloadRequest* req,
                                                               inference::RepositoryModelUnloadResponse*) {
  if (Status s = CheckExplicitMode("unload"); !s.ok()) return Reply(ctx, ToGrpcStatus(s));
  bool dependents = false;
  for (const auto& [key, value] : req->parameters()) {
    if (key != "unload_dependents" || value.parameter_choice_case() != inference::ModelRepositoryParameter::kBoolParam) {
      return Reply(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                     "unknown unload parameter '" + key + "' (only unload_dependents, a bool)"));
    }
    dependents = value.bool_param();
  }
  auto* reactor = ctx->DefaultReactor();
  repository_->UnloadAsync(req->model_name(), dependents,
                           [reactor](const Status& s) { reactor->Finish(ToGrpcStatus(s)); });
  return reactor;
}

grpc::ServerUnaryReactor* KServeService::ModelStatistics(grpc::CallbackServerContext* ctx,
                                                         const inference::ModelStatisticsRequest* req,
                                                         inference::ModelStatisticsResponse* resp) {
  if (!stats_->Fill(req->name(), req->version(), resp)) {
    return Reply(ctx, grpc::Status(grpc::StatusCode::NOT_FOUND,
                                   req->version().empty() ? "unknown model '" + req->name() + "'"
                                                          : "model '" + req->name() + "' has no statistics for version '" +
                                                                req->version() + "'"));
  }
  return Reply(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* ctx,
                                               const grpc::health::v1::HealthCheckRequest* req,
                                               grpc::health::v1::HealthCheckResponse* resp) {
  const std::string& service = req->service();
  if (!service.empty() && service != "inference.GRPCInferenceService") {
    return Reply(ctx, grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service '" + service + "'"));
  }
  resp->set_status(kserve_->ServerIsReady() ? grpc::health::v1::HealthCheckResponse::SERVING
                                            : grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  return Reply(ctx, grpc::Status::OK);
}

}  // namespace es
