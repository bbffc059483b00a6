#include "server/ensemble/ensemble_call.h"

#include <algorithm>
#include <string>
#include <utility>

#include "server/ensemble/ensemble_combiner.h"

namespace es {
namespace {

// The slowest used member's stages (the members run in parallel).
StageTimes SlowestMember(const std::vector<const InferResponse*>& results) {
  StageTimes t;
  for (const InferResponse* r : results) {
    t.queue_ns = std::max(t.queue_ns, r->stages.queue_ns);
    t.ipc_ns = std::max(t.ipc_ns, r->stages.ipc_ns);
    t.compute_ns = std::max(t.compute_ns, r->stages.compute_ns);
    t.batch_size = std::max(t.batch_size, r->stages.batch_size);
  }
  return t;
}

}  // namespace

EnsembleCall::EnsembleCall(std::shared_ptr<const InferRequest> request, InferDone done,
                           std::function<void()> released)
    : request_(std::move(request)) {
  const size_t n = request_->model->ensemble.members.size();
  MutexLock lock(&mu_);  // not shared yet; the lock keeps the analysis simple
  done_ = std::move(done);
  released_ = std::move(released);
  results_.resize(n);
  errors_.resize(n);
  versions_.resize(n);
  latency_ns_.resize(n);
  answered_.resize(n);
}

void EnsembleCall::MemberAnswered(size_t m, int64_t version, const Status& status, InferResponse response) {
  const Clock::duration elapsed = Clock::now() - start_;
  std::optional<Answer> answer;
  {
    MutexLock lock(&mu_);
    if (answered_[m]) return;  // a member answers once; never count it twice
    answered_[m] = true;
    versions_[m] = version;
    latency_ns_[m] = static_cast<uint64_t>(
        std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()));
    if (status.ok()) {
      ++succeeded_;
      if (!finished_) results_[m] = std::move(response);
    } else {
      errors_[m] = status;
      failure_order_.push_back(m);
    }
    answer = DecideLocked();
  }
  if (answer) answer->Deliver();
}

void EnsembleCall::TimedOut() {
  std::optional<Answer> answer;
  {
    MutexLock lock(&mu_);
    timed_out_ = true;
    answer = DecideLocked();
  }
  if (answer) answer->Deliver();
}

void EnsembleCall::Answer::Deliver() {
  if (released) released();
  done(status, std::move(response));
}

Status EnsembleCall::QuorumErrorLocked() const {
  const ModelConfig& ensemble = *request_->model;
  const auto& members = ensemble.ensemble.members;
  const size_t first = failure_order_.front();
  if (ensemble.ensemble.Quorum() == members.size()) {
    return Status(errors_[first].code(),
                  "ensemble '" + ensemble.name + "' member '" + members[first].model + "': " + errors_[first].message());
  }
  std::string what = "ensemble '" + ensemble.name + "': " + std::to_string(failure_order_.size()) + " of " +
                     std::to_string(members.size()) + " members failed, fewer than min_members " +
                     std::to_string(ensemble.ensemble.Quorum()) + " can answer";
  for (size_t m : failure_order_) {
    what.append("; member '");
    what.append(members[m].model);
    what.append("': ");
    what.append(errors_[m].message());
  }
  return Status(errors_[first].code(), std::move(what));
}

std::optional<EnsembleCall::Answer> EnsembleCall::DecideLocked() {
  const auto& members = request_->model->ensemble.members;
  const size_t n = members.size();
  const size_t quorum = request_->model->ensemble.Quorum();
  const size_t answered = succeeded_ + failure_order_.size();
  Status status;
  InferResponse combined;
  // The admission slot is held until the last member answered, not just the
  // ensemble: members still running after a quorum's answer are work the
  // ensemble.max_in_flight bound must count, or a client retrying at once
  // could pile unbounded straggler calls onto a slow member's host.
  std::function<void()> released;
  if (answered == n) released = std::move(released_);
  if (finished_) {
    if (released) released();
    return std::nullopt;
  }
  const bool waited = answered == n || timed_out_;  // everyone, or everyone member_timeout_ms allows
  if (!waited) return std::nullopt;
  if (succeeded_ >= quorum) {
    status = CombineLocked(&combined);
  } else if (failure_order_.size() > n - quorum) {
    status = QuorumErrorLocked();
  } else {
    return std::nullopt;  // past the timeout, short of the quorum with members still out: wait for them
  }
  finished_ = true;
  if (!status.ok()) combined = InferResponse{};
  return Answer{std::move(done_), std::move(released), std::move(status), std::move(combined)};
}

Status EnsembleCall::CombineLocked(InferResponse* out) {
  const auto start = Clock::now();
  const ModelConfig& ensemble = *request_->model;
  const auto& members = ensemble.ensemble.members;
  auto report = std::make_shared<EnsembleReport>();
  std::vector<size_t> used;
  for (size_t m = 0; m < members.size(); ++m) {
    const bool ok = answered_[m] && errors_[m].ok();
    if (ok) used.push_back(m);
    report->members.push_back({members[m].model, latency_ns_[m], ok});
  }
  report->members_used = static_cast<int64_t>(used.size());
  report->degraded = used.size() < members.size();
  std::vector<double> weights;
  std::vector<const InferResponse*> results;
  for (size_t m : used) {
    weights.push_back(members[m].weight);
    results.push_back(&results_[m]);
  }
  for (size_t o = 0; o < ensemble.outputs.size(); ++o) {
    std::vector<const InferOutput*> parts;
    for (const InferResponse* r : results) parts.push_back(&r->outputs[o]);
    ES_ASSIGN_OR_RETURN(auto combined, CombineOutputs(parts, weights, ensemble.ensemble.combine));
    combined.name = ensemble.outputs[o].name;
    if (o == 0) {
      // Uncertainty of the first output always feeds the disagreement
      // metric; it is returned only when asked for.
      ES_ASSIGN_OR_RETURN(auto u, ComputeUncertainty(combined, parts));
      const auto* d = reinterpret_cast<const float*>(u.disagreement.data.data());
      out->disagreement.assign(d, d + u.disagreement.data.size() / sizeof(float));
      out->outputs.push_back(std::move(combined));
      if (request_->return_uncertainty) {
        out->outputs.push_back(std::move(u.entropy));
        out->outputs.push_back(std::move(u.disagreement));
      }
      continue;
    }
    out->outputs.push_back(std::move(combined));
  }
  out->stages = SlowestMember(results);
  for (const InferResponse* r : results) out->compute_ns = std::max(out->compute_ns, r->compute_ns);
  for (size_t m : used) {
    if (request_->return_member_outputs) {
      for (auto& o : results_[m].outputs) {
        o.name = members[m].model + "." + o.name;
        out->outputs.push_back(std::move(o));
      }
    }
    if (!out->member_versions.empty()) out->member_versions.push_back(',');
    out->member_versions.append(members[m].model);
    out->member_versions.push_back(':');
    out->member_versions.append(std::to_string(versions_[m]));
  }
  out->ensemble = std::move(report);
  out->stages.combine_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
  return Status::Ok();
}

}  // namespace es
