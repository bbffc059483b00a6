#include "server/kserve/kserve_answers.h"

#include <utility>

#include "server/kserve/model_config_reply.h"
#include "server/kserve/model_upload_request.h"
#include "server/kserve/request_codec.h"
#include "server/kserve/statistics_reply.h"

namespace es {
namespace {

constexpr const char* kServerName = "ensemble-serve";
constexpr const char* kServerVersion = "0.1.0";

}  // namespace

KServeAnswers::KServeAnswers(const ServerConfig* config, ModelRepository* repository, InferenceCore* core,
                             ModelStatistics* stats, InferCalls* calls, SharedMemoryRegistry* shm)
    : config_(config), repository_(repository), core_(core), stats_(stats), calls_(calls), shm_(shm) {}

bool KServeAnswers::ServerIsReady() const {
  if (!calls_->accepting()) return false;
  for (const ModelConfig* model : repository_->Loaded()) {
    if (!core_->ModelReady(*model)) return false;
  }
  return true;
}

StatusOr<const ModelConfig*> KServeAnswers::FindModel(const std::string& name, const std::string& version) const {
  const ModelConfig* model = repository_->Find(name);
  if (model == nullptr) return Status::NotFound("unknown model '" + name + "'");
  // No version: the model itself (ModelReady then says whether a version is
  // ready); a version must be a ready one.
  if (version.empty()) return model;
  ES_RETURN_IF_ERROR(ResolveVersion(*repository_, *model, version).status());
  return model;
}

Status KServeAnswers::AnswerModelReady(const inference::ModelReadyRequest& req,
                                       inference::ModelReadyResponse* resp) const {
  ES_ASSIGN_OR_RETURN(const ModelConfig* model, FindModel(req.name(), req.version()));
  resp->set_ready(calls_->accepting() && core_->ModelReady(*model));
  return Status::Ok();
}

void KServeAnswers::AnswerServerMetadata(inference::ServerMetadataResponse* resp) const {
  resp->set_name(kServerName);
  resp->set_version(kServerVersion);
  resp->add_extensions("model_repository");
  resp->add_extensions("model_configuration");  // Triton's name for the ModelConfig RPC
  resp->add_extensions("statistics");
  resp->add_extensions("ensemble_uncertainty");
  if (shm_ != nullptr) resp->add_extensions("system_shared_memory");  // Triton's name
}

Status KServeAnswers::AnswerModelMetadata(const inference::ModelMetadataRequest& req,
                                          inference::ModelMetadataResponse* resp) const {
  ES_ASSIGN_OR_RETURN(const ModelConfig* model, FindModel(req.name(), req.version()));
  resp->set_name(model->name);
  for (int64_t v : repository_->ReadyVersions(*model)) resp->add_versions(std::to_string(v));
  resp->set_platform(model->is_ensemble() ? "ensemble" : "pytorch_libtorch");
  for (const auto& in : model->inputs) FillTensorMetadata(*model, in, resp->add_inputs());
  for (const auto& out : model->outputs) FillTensorMetadata(*model, out, resp->add_outputs());
  return Status::Ok();
}

Status KServeAnswers::AnswerModelConfig(const inference::ModelConfigRequest& req,
                                        inference::ModelConfigResponse* resp) const {
  ES_ASSIGN_OR_RETURN(const ModelConfig* model, FindModel(req.name(), req.version()));
  FillModelConfig(*model, *config_, resp->mutable_config());
  return Status::Ok();
}

void KServeAnswers::AnswerRepositoryIndex(const inference::RepositoryIndexRequest& req,
                                          inference::RepositoryIndexResponse* resp) const {
  // One entry per version (Triton lists each version of a model), and the
  // folders not loaded. A READY version whose hosts are all down is not ready.
  for (const ModelRepository::IndexEntry& entry : repository_->Index()) {
    auto* m = resp->add_models();
    m->set_name(entry.name);
    m->set_version(entry.version);
    m->set_state(entry.state);
    m->set_reason(entry.reason);
    const ModelConfig* model = entry.state == "READY" ? repository_->Find(entry.name) : nullptr;
    if (model != nullptr && !core_->ModelReady(*model)) {
      m->set_state("UNAVAILABLE");
      m->set_reason(model->is_ensemble() ? "a member is not ready" : "no host serving it is up");
    }
    if (req.ready() && m->state() != "READY") resp->mutable_models()->RemoveLast();
  }
}

Status KServeAnswers::AnswerModelStatistics(const inference::ModelStatisticsRequest& req,
                                            inference::ModelStatisticsResponse* resp) const {
  if (!FillModelStatistics(*stats_, req.name(), req.version(), resp)) {
    return Status::NotFound(req.version().empty()
                                ? "unknown model '" + req.name() + "'"
                                : "model '" + req.name() + "' has no statistics for version '" + req.version() + "'");
  }
  return Status::Ok();
}

Status KServeAnswers::CheckExplicitMode(const char* what) const {
  if (config_->model_control_mode == ModelControlMode::kExplicit) return Status::Ok();
  return Status::Unavailable(std::string("explicit model ") + what + " is not allowed: model_control_mode is " +
                             ModelControlModeName(config_->model_control_mode) +
                             " (start the server with --model-control-mode explicit)");
}

void KServeAnswers::LoadModel(const inference::RepositoryModelLoadRequest& req,
                              std::function<void(const Status&)> done) {
  if (Status s = CheckExplicitMode("load"); !s.ok()) return done(s);
  if (req.parameters().empty()) return repository_->LoadAsync(req.model_name(), std::move(done));
  StatusOr<ModelRepository::Upload> upload = UploadFromLoadParameters(req.model_name(), req.parameters(), *config_);
  if (!upload.ok()) return done(upload.status());
  repository_->LoadUploadAsync(req.model_name(), std::move(upload).value(), std::move(done));
}

void KServeAnswers::UnloadModel(const inference::RepositoryModelUnloadRequest& req,
                                std::function<void(const Status&)> done) {
  if (Status s = CheckExplicitMode("unload"); !s.ok()) return done(s);
  bool dependents = false;
  for (const auto& [key, value] : req.parameters()) {
    if (key != "unload_dependents") {
      return done(Status::InvalidArgument("unknown unload parameter '" + key + "' (only unload_dependents, a bool)"));
    }
    if (value.parameter_choice_case() != inference::ModelRepositoryParameter::kBoolParam) {
      return done(Status::InvalidArgument("unload parameter 'unload_dependents' must be a bool"));
    }
    dependents = value.bool_param();
  }
  repository_->UnloadAsync(req.model_name(), dependents, std::move(done));
}

}  // namespace es
