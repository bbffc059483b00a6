#include "server/ensemble/ensemble_call.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/steady_clock.h"
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
    const size_t count = request_->model->ensemble.members[m].Count();
    if (status.ok()) {
      ++succeeded_;
      succeeded_members_ += count;
      if (!finished_) results_[m] = std::move(response);
    } else {
      errors_[m] = status;
      failure_order_.push_back(m);
      failed_members_ += count;
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
  if (ensemble.ensemble.Quorum() == ensemble.ensemble.MemberCount()) {
    return Status(errors_[first].code(),
                  "ensemble '" + ensemble.name + "' member '" + members[first].model + "': " + errors_[first].message());
  }
  std::string what = "ensemble '" + ensemble.name + "': " + std::to_string(failed_members_) + " of " +
                     std::to_string(ensemble.ensemble.MemberCount()) + " members failed, fewer than min_members " +
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
  if (succeeded_members_ >= quorum) {
    status = CombineLocked(&combined);
  } else if (failed_members_ > request_->model->ensemble.MemberCount() - quorum) {
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
  std::vector<const InferResponse*> results;
  results.reserve(used.size());
  for (size_t m : used) results.push_back(&results_[m]);
  // Each member's answer, a packed call's split into its members'.
  std::vector<MemberOutputs> answers;
  ES_RETURN_IF_ERROR(MemberAnswersLocked(used, &answers));
  std::vector<double> weights;
  weights.reserve(answers.size());
  for (const MemberOutputs& a : answers) weights.push_back(a.weight);
  for (size_t o = 0; o < ensemble.outputs.size(); ++o) {
    std::vector<const InferOutput*> parts;
    parts.reserve(answers.size());
    for (const MemberOutputs& a : answers) parts.push_back(a.outputs[o]);
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
  if (request_->return_member_outputs) {
    for (MemberOutputs& a : answers) {
      for (size_t o = 0; o < a.outputs.size(); ++o) {
        InferOutput member = std::move(*a.outputs[o]);
        member.name = *a.name + "." + member.name;
        out->outputs.push_back(std::move(member));
      }
    }
  }
  for (size_t m : used) {
    if (!out->member_versions.empty()) out->member_versions.push_back(',');
    out->member_versions.append(members[m].model);
    out->member_versions.push_back(':');
    out->member_versions.append(std::to_string(versions_[m]));
  }
  out->ensemble = std::move(report);
  const auto end = Clock::now();
  out->stages.combine_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
  if (request_->trace != nullptr) request_->trace->AddSpan("combine", SteadyNs(start), SteadyNs(end));
  return Status::Ok();
}

Status EnsembleCall::MemberAnswersLocked(const std::vector<size_t>& used, std::vector<MemberOutputs>* answers) {
  const auto& members = request_->model->ensemble.members;
  const size_t outputs = request_->model->outputs.size();
  for (size_t m : used) {
    const EnsembleMember& entry = members[m];
    InferResponse& result = results_[m];
    if (result.outputs.size() < outputs) {
      return Status::Internal("ensemble member '" + entry.model + "' answered " +
                              std::to_string(result.outputs.size()) + " outputs, the ensemble has " +
                              std::to_string(outputs));
    }
    if (entry.packed.empty()) {
      MemberOutputs& a = answers->emplace_back();
      a.name = &entry.model;
      a.weight = entry.weight;
      a.outputs.reserve(outputs);
      for (size_t o = 0; o < outputs; ++o) a.outputs.push_back(&result.outputs[o]);
      continue;
    }
    const size_t first = answers->size();
    answers->resize(first + entry.Count());
    for (size_t o = 0; o < outputs; ++o) {
      StatusOr<std::vector<InferOutput>> split = SplitPacked(result.outputs[o], entry.Count());
      if (!split.ok()) return Status::Internal("ensemble member '" + entry.model + "': " + split.status().message());
      for (size_t k = 0; k < entry.Count(); ++k) (*answers)[first + k].owned.push_back(std::move((*split)[k]));
    }
    for (size_t k = 0; k < entry.Count(); ++k) {
      MemberOutputs& a = (*answers)[first + k];
      a.name = &entry.packed[k];
      a.weight = entry.WeightOf(k);
      a.outputs.reserve(a.owned.size());
      // Into `owned`'s buffer, which stays where it is when `answers` grows.
      for (InferOutput& o : a.owned) a.outputs.push_back(&o);
    }
  }
  return Status::Ok();
}

}  // namespace es
