#include "server/grpc/experiment_service.h"

#include "server/grpc/grpc_service.h"

namespace es {

grpc::ServerUnaryReactor* ExperimentGrpcService::Experiment(grpc::CallbackServerContext* ctx,
                                                            const ensemble_serve::v1::ExperimentRequest* req,
                                                            ensemble_serve::v1::ExperimentResponse* resp) {
  auto reply = [ctx](const Status& status) { return Reply(ctx, ToGrpcStatus(status)); };
  const bool update = !req->spec_json().empty();
  if (Status s = Authorize(*ctx, *auth_, update ? Access::kAdmin : Access::kInfer); !s.ok()) return reply(s);
  const ModelConfig* model = catalog_->Find(req->model());
  if (model == nullptr) return reply(Status::NotFound("unknown model '" + req->model() + "'"));
  if (update) {
    StatusOr<ExperimentSpec> spec = ParseExperimentText(req->spec_json(), model->name, "spec_json");
    if (!spec.ok()) return reply(spec.status());
    if (Status s = experiments_->Set(*model, *spec); !s.ok()) return reply(s);
  }
  resp->set_status_json(experiments_->Describe(*model).dump());
  return reply(Status::Ok());
}

}  // namespace es
