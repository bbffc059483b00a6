#include "server/inference_core.h"

#include <atomic>
#include <chrono>

#include "common/mutex.h"
#include "server/ensemble_combiner.h"

namespace es {
namespace {

// Gathers the members' answers of one ensemble request.
struct EnsembleCall {
  std::shared_ptr<const InferRequest> request;
  InferDone done;
  std::atomic<int64_t>* load = nullptr;  // the ensemble's in-flight count
  Mutex mu;
  std::vector<InferResponse> results ABSL_GUARDED_BY(mu);  // one per member
  Status error ABSL_GUARDED_BY(mu);                        // the first member error
  std::atomic<size_t> remaining{0};
};

// The slowest member's stages (the members run in parallel).
StageTimes SlowestMember(const std::vector<InferResponse>& results) {
  StageTimes t;
  for (const auto& r : results) {
    t.queue_ns = std::max(t.queue_ns, r.stages.queue_ns);
    t.ipc_ns = std::max(t.ipc_ns, r.stages.ipc_ns);
    t.compute_ns = std::max(t.compute_ns, r.stages.compute_ns);
    t.batch_size = std::max(t.batch_size, r.stages.batch_size);
  }
  return t;
}

Status CombineMembers(const InferRequest& request, std::vector<InferResponse>& results, InferResponse* out) {
  const auto start = std::chrono::steady_clock::now();
  const ModelConfig& ensemble = *request.model;
  const auto& members = ensemble.ensemble.members;
  std::vector<double> weights;
  for (const auto& m : members) weights.push_back(m.weight);
  for (size_t o = 0; o < ensemble.outputs.size(); ++o) {
    std::vector<const InferOutput*> parts;
    for (const auto& r : results) parts.push_back(&r.outputs[o]);
    auto combined = CombineOutputs(parts, weights, ensemble.ensemble.combine);
    if (!combined.ok()) return combined.status();
    combined->name = ensemble.outputs[o].name;
    if (o == 0) {
      // Uncertainty of the first output always feeds the disagreement
      // metric; it is returned only when asked for.
      auto u = ComputeUncertainty(*combined, parts);
      if (!u.ok()) return u.status();
      const auto* d = reinterpret_cast<const float*>(u->disagreement.data.data());
      out->disagreement.assign(d, d + u->disagreement.data.size() / sizeof(float));
      out->outputs.push_back(std::move(combined).value());
      if (request.return_uncertainty) {
        out->outputs.push_back(std::move(u->entropy));
        out->outputs.push_back(std::move(u->disagreement));
      }
      continue;
    }
    out->outputs.push_back(std::move(combined).value());
  }
  out->stages = SlowestMember(results);
  for (const auto& r : results) out->compute_ns = std::max(out->compute_ns, r.compute_ns);
  if (request.return_member_outputs) {
    for (size_t m = 0; m < members.size(); ++m) {
      for (auto& o : results[m].outputs) {
        o.name = members[m].model + "." + o.name;
        out->outputs.push_back(std::move(o));
      }
    }
  }
  out->stages.combine_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  return Status::Ok();
}

}  // namespace

InferenceCore::InferenceCore(const ServerConfig* config, const std::map<std::string, HostSupervisor*>& hosts,
                             ModelStatistics* stats)
    : config_(config) {
  for (const auto& [name, model] : config->models) {
    if (model.is_ensemble()) {
      ensemble_load_[name] = std::make_unique<std::atomic<int64_t>>(0);
      continue;
    }
    std::vector<HostSupervisor*> serving;
    for (const auto& h : model.hosts) {
      auto it = hosts.find(h);
      if (it != hosts.end()) serving.push_back(it->second);
    }
    dispatchers_[name] = std::make_unique<ModelDispatcher>(&model, config, std::move(serving), stats);
  }
}

bool InferenceCore::ModelReady(const ModelConfig& model) const {
  if (model.is_ensemble()) {
    for (const auto& m : model.ensemble.members) {
      const ModelConfig* member = config_->FindModel(m.model);
      if (member == nullptr || !ModelReady(*member)) return false;
    }
    return true;
  }
  auto it = dispatchers_.find(model.name);
  return it != dispatchers_.end() && it->second->Ready();
}

void InferenceCore::Infer(std::shared_ptr<const InferRequest> request, InferDone done) const {
  if (std::chrono::steady_clock::now() >= request->deadline) {
    done(Status::DeadlineExceeded("model '" + request->model->name + "': deadline passed before dispatch"), {});
    return;
  }
  if (request->model->is_ensemble()) {
    RunEnsemble(request, std::move(done));
    return;
  }
  dispatchers_.at(request->model->name)->Infer(std::move(request), std::move(done));
}

void InferenceCore::RunEnsemble(const std::shared_ptr<const InferRequest>& request, InferDone done) const {
  const ModelConfig& ensemble = *request->model;
  std::atomic<int64_t>* load = ensemble_load_.at(ensemble.name).get();
  if (load->fetch_add(1) >= ensemble.ensemble.max_in_flight) {
    load->fetch_sub(1);
    done(Status::ResourceExhausted("ensemble '" + ensemble.name + "': " +
                                   std::to_string(ensemble.ensemble.max_in_flight) +
                                   " requests already in flight (ensemble.max_in_flight)"),
         {});
    return;
  }
  const auto& members = ensemble.ensemble.members;
  auto call = std::make_shared<EnsembleCall>();
  call->request = request;
  call->done = std::move(done);
  call->load = load;
  {
    MutexLock lock(&call->mu);  // not shared yet; the lock keeps the analysis simple
    call->results.resize(members.size());
  }
  call->remaining.store(members.size());
  for (size_t m = 0; m < members.size(); ++m) {
    auto on_member = [call, m, name = members[m].model](const Status& status, InferResponse response) {
      {
        MutexLock lock(&call->mu);
        if (!status.ok() && call->error.ok()) {
          call->error = Status(status.code(), "ensemble '" + call->request->model->name + "' member '" + name +
                                                  "': " + status.message());
        }
        call->results[m] = std::move(response);
      }
      if (call->remaining.fetch_sub(1) != 1) return;
      // The last member to answer combines; the others have published their
      // results under the mutex, which this thread has since taken.
      MutexLock lock(&call->mu);
      call->load->fetch_sub(1);
      if (!call->error.ok()) {
        call->done(call->error, {});
        return;
      }
      InferResponse combined;
      Status s = CombineMembers(*call->request, call->results, &combined);
      call->done(s, s.ok() ? std::move(combined) : InferResponse{});
    };
    dispatchers_.at(members[m].model)->Infer(request, std::move(on_member));
  }
}

}  // namespace es
