#include "server/ensemble/ensemble_runner.h"

#include <chrono>
#include <optional>
#include <utility>

#include "server/ensemble/cascade_call.h"
#include "server/ensemble/ensemble_call.h"
#include "server/hosts/submission_burst.h"

namespace es {

EnsembleRunner::EnsembleRunner(MemberCalls* members, const ModelCatalog* catalog)
    : members_(members),
      ladder_(members, catalog, [this](const std::shared_ptr<const InferRequest>& request, InferDone done) {
        RunComposite(request, std::move(done));
      }) {}

std::atomic<int64_t>* EnsembleRunner::EnsembleLoad(const std::string& name) {
  MutexLock lock(&mu_);
  std::unique_ptr<std::atomic<int64_t>>& load = ensemble_load_[name];
  if (load == nullptr) load = std::make_unique<std::atomic<int64_t>>(0);
  return load.get();
}

bool EnsembleRunner::Admit(const ModelConfig& ensemble, std::atomic<int64_t>** load, const InferDone& done) {
  *load = EnsembleLoad(ensemble.name);
  if ((*load)->fetch_add(1) < ensemble.ensemble.max_in_flight) return true;
  (*load)->fetch_sub(1);
  done(Status::ResourceExhausted("ensemble '" + ensemble.name + "': " +
                                 std::to_string(ensemble.ensemble.max_in_flight) +
                                 " requests already in flight (ensemble.max_in_flight)"),
       {});
  return false;
}

void EnsembleRunner::Run(const std::shared_ptr<const InferRequest>& request, InferDone done) {
  if (request->model->overload.enabled()) {
    ladder_.Run(request, std::move(done));
    return;
  }
  RunComposite(request, std::move(done));
}

void EnsembleRunner::RunComposite(const std::shared_ptr<const InferRequest>& request, InferDone done) {
  std::atomic<int64_t>* load = nullptr;
  if (!Admit(*request->model, &load, done)) return;
  if (request->model->ensemble.cascade()) {
    RunCascade(request, std::move(done), load);
  } else {
    RunFanOut(request, std::move(done), load);
  }
}

void EnsembleRunner::RunCascade(const std::shared_ptr<const InferRequest>& request, InferDone done,
                                std::atomic<int64_t>* load) {
  auto cascade = std::make_shared<CascadeCall>(
      request, std::move(done), [load] { load->fetch_sub(1); },
      [this, request](size_t m, const std::shared_ptr<const InferRequest>& rows, CascadeCall::MemberDone member_done) {
        members_->CallMember(request->model->ensemble.members[m], rows, std::move(member_done));
      });
  cascade->Start();
}

void EnsembleRunner::RunFanOut(const std::shared_ptr<const InferRequest>& request, InferDone done,
                               std::atomic<int64_t>* load) {
  const EnsembleSpec& spec = request->model->ensemble;
  auto call = std::make_shared<EnsembleCall>(request, std::move(done), [load] { load->fetch_sub(1); });
  if (spec.member_timeout_ms > 0) {
    // Weak: a call every member answered is gone before its timeout comes.
    timer_.Schedule(call->start() + std::chrono::milliseconds(spec.member_timeout_ms),
                    [weak = std::weak_ptr<EnsembleCall>(call)] {
                      if (auto c = weak.lock()) c->TimedOut();
                    });
  }
  // The member calls follow one another: a host need not wake the router
  // for each completion, only for the last of the burst it runs. Not when
  // the call may answer before every member is back (a held completion may
  // wait for the burst's later calls on its host).
  std::optional<SubmissionBurst> burst;
  if (spec.member_timeout_ms == 0) burst.emplace();
  for (size_t m = 0; m < spec.members.size(); ++m) {
    if (burst) burst->MarkNext(/*last=*/m + 1 == spec.members.size());
    members_->CallMember(spec.members[m], request,
                         [call, m](int64_t version, const Status& status, InferResponse response) {
                           call->MemberAnswered(m, version, status, std::move(response));
                         });
  }
}

}  // namespace es
