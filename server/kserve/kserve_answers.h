// KServeAnswers: the answers of the KServe v2 protocol's non-inference calls
// (server and model metadata, readiness, model config, repository index and
// load/unload, statistics), as protocol messages and a Status, without
// transport or authorization: the caller has checked the token. The gRPC
// service (grpc/grpc_service.h) sends them as they are; the HTTP routes
// (http/http_routes.h) turn them into JSON. Both transports therefore answer
// the same thing, and neither depends on the other.
//
// Thread safety: every method may be called concurrently; it reads the
// config and calls thread-safe collaborators.
#pragma once

#include <functional>
#include <string>

#include "config/server_config.h"
#include "proto/grpc_service.pb.h"
#include "server/core/inference_core.h"
#include "server/core/model_statistics.h"
#include "server/kserve/infer_calls.h"
#include "server/repository/model_repository.h"
#include "server/shm/shm_registry.h"

namespace es {

class KServeAnswers {
 public:
  // `shm`: the system shared-memory regions (null: the extension is not
  // announced). Every pointer must outlive this object.
  KServeAnswers(const ServerConfig* config, ModelRepository* repository, InferenceCore* core,
                ModelStatistics* stats, InferCalls* calls, SharedMemoryRegistry* shm);

  // Ready: accepting calls (not draining) and every served model ready.
  bool ServerIsReady() const;

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
  // Triton's semantics (model_control_mode explicit only): load (re)reads the
  // model's folder and loads it, an ensemble with its members; unload answers
  // the requests in flight first; parameter `unload_dependents` (bool)
  // unloads the ensembles that use the model too. `done` runs once, maybe
  // from the repository's worker thread.
  void LoadModel(const inference::RepositoryModelLoadRequest& req, std::function<void(const Status&)> done);
  void UnloadModel(const inference::RepositoryModelUnloadRequest& req, std::function<void(const Status&)> done);

 private:
  // The model named, checking that `version` (when not empty) is a ready one;
  // the error names what was not found.
  StatusOr<const ModelConfig*> FindModel(const std::string& name, const std::string& version) const;

  // OK in explicit mode; otherwise the error a load or unload gets.
  Status CheckExplicitMode(const char* what) const;

  const ServerConfig* config_;
  ModelRepository* repository_;
  InferenceCore* core_;
  ModelStatistics* stats_;
  InferCalls* calls_;
  SharedMemoryRegistry* shm_;  // may be null
};

}  // namespace es
