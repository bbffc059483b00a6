#include "server/ensemble/overload_ladder.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace es {
namespace {

std::string Millis(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", ms);
  return text;
}

// The request as the rung `rung` (served by `model`) would receive it: the
// same inputs (their bytes borrowed from `request`, which the caller keeps
// alive), outputs, deadline and priority; served in full at the rung
// (ladders do not nest), with the rung's exit threshold when it sets one.
std::shared_ptr<InferRequest> ForRung(const ModelConfig& model, const OverloadRung& rung, const InferRequest& request) {
  auto out = std::make_shared<InferRequest>();
  out->model = &model;
  out->version = model.LatestVersion();
  CopyRequestContext(request, out.get());
  out->exact = true;
  out->exit_threshold = rung.exit_threshold;
  out->inputs = request.inputs;
  out->requested_outputs = request.requested_outputs;
  return out;
}

}  // namespace

bool NeedsFullEnsemble(const InferRequest& request) {
  if (request.exact || request.return_member_outputs || request.return_uncertainty) return true;
  const std::vector<TensorSpec>& outputs = request.model->outputs;
  return std::any_of(request.requested_outputs.begin(), request.requested_outputs.end(), [&](const std::string& name) {
    return std::none_of(outputs.begin(), outputs.end(), [&](const TensorSpec& o) { return o.name == name; });
  });
}

OverloadLadder::OverloadLadder(MemberCalls* members, const ModelCatalog* catalog, RunComposite run_composite)
    : members_(members), catalog_(catalog), run_composite_(std::move(run_composite)) {}

std::shared_ptr<OverloadController> OverloadLadder::ControllerFor(const ModelConfig& ensemble) {
  MutexLock lock(&mu_);
  Entry& entry = controllers_[ensemble.name];
  if (entry.controller == nullptr || entry.spec != ensemble.overload) {
    entry.spec = ensemble.overload;
    entry.controller = std::make_shared<OverloadController>(ensemble.overload);
  }
  return entry.controller;
}

void OverloadLadder::Run(const std::shared_ptr<const InferRequest>& request, InferDone done) {
  const ModelConfig& ensemble = *request->model;
  const OverloadSpec& spec = ensemble.overload;
  std::shared_ptr<OverloadController> controller = ControllerFor(ensemble);
  const OverloadController::Ticket ticket =
      controller->Admit({request->priority, request->deadline, NeedsFullEnsemble(*request)});
  if (ticket.rung == OverloadController::kShed) {
    done(Status::ResourceExhausted(
             "ensemble '" + ensemble.name + "' is overloaded: no rung of its ladder that it can " +
             "use now meets its latency target of " + Millis(spec.latency_target_ms) +
             " ms (overload.latency_target_ms); the fastest, '" + spec.ladder[ticket.fastest].model +
             "', is predicted to take " + Millis(ticket.predicted_ms) + " ms"),
         {});
    return;
  }
  const ModelConfig* rung = ticket.rung == 0 ? &ensemble : catalog_->Find(spec.ladder[ticket.rung].model);
  const bool skipped = rung == nullptr;  // not loaded now: the ensemble answers in full
  if (skipped) rung = &ensemble;
  const OverloadRung& served = spec.ladder[skipped ? 0 : ticket.rung];
  InferDone answered = [controller, ticket, skipped, name = served.label(), accuracy = served.accuracy,
                        done = std::move(done)](const Status& status, InferResponse response) {
    // A skipped rung's answer says nothing of that rung's service time.
    controller->Finish(ticket, status.ok() && !skipped);
    response.served_by = name;
    response.served_accuracy = accuracy;
    if (!skipped) {  // the prediction and the tail were the skipped rung's
      response.served_predicted_ms = ticket.predicted_ms;
      response.served_tail_ratio = ticket.tail_ratio;
    }
    done(status, std::move(response));
  };
  if (rung == &ensemble) {
    run_composite_(request, std::move(answered));
  } else {
    RunRung(*rung, served, request, std::move(answered));
  }
}

void OverloadLadder::RunRung(const ModelConfig& rung, const OverloadRung& spec,
                             const std::shared_ptr<const InferRequest>& request, InferDone done) {
  std::shared_ptr<InferRequest> at_rung = ForRung(rung, spec, *request);
  if (rung.is_ensemble()) {
    run_composite_(at_rung, [request, done = std::move(done)](const Status& status, InferResponse response) {
      done(status, std::move(response));  // `request` owns the inputs' bytes until here
    });
    return;
  }
  // A single model: a member call (its statistics count the request), with
  // the version it computed on reported as an ensemble's members' are.
  EnsembleMember member;
  member.model = rung.name;
  members_->CallMember(member, at_rung,
                       [request, name = rung.name, done = std::move(done)](int64_t version, const Status& status,
                                                                          InferResponse response) {
                         if (version > 0) response.member_versions = name + ":" + std::to_string(version);
                         response.version = 0;  // the answer is the ensemble's (its version 1)
                         done(status, std::move(response));
                       });
}

}  // namespace es
