// ExperimentGrpcService: ensemble-serve's own gRPC extension
// ensemble_serve.v1.ExperimentService (proto/experiments.proto): read or set
// a model's experiment (server/experiment/experiments.h), as HTTP's
// /v2/models/{model}/experiment does. Reading takes an infer token,
// setting an admin one (server/security/auth_policy.h).
//
// Thread safety: called on gRPC's threads, concurrently; the parts outlive it.
#pragma once

#include "proto/experiments.grpc.pb.h"
#include "server/core/model_catalog.h"
#include "server/experiment/experiments.h"
#include "server/security/auth_policy.h"

namespace es {

class ExperimentGrpcService final : public ensemble_serve::v1::ExperimentService::CallbackService {
 public:
  ExperimentGrpcService(Experiments* experiments, const ModelCatalog* catalog, const AuthPolicy* auth)
      : experiments_(experiments), catalog_(catalog), auth_(auth) {}

  grpc::ServerUnaryReactor* Experiment(grpc::CallbackServerContext* ctx,
                                       const ensemble_serve::v1::ExperimentRequest* req,
                                       ensemble_serve::v1::ExperimentResponse* resp) override;

 private:
  Experiments* experiments_;
  const ModelCatalog* catalog_;
  const AuthPolicy* auth_;
};

}  // namespace es
