#include "server/inference_core.h"

#include <atomic>
#include <chrono>

#include "common/mutex.h"
#include "config/host_model_spec.h"
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
  std::vector<int64_t> versions ABSL_GUARDED_BY(mu);       // the version each member runs on
  Status error ABSL_GUARDED_BY(mu);                        // the first member error
  std::atomic<size_t> remaining{0};
  std::chrono::steady_clock::time_point start;  // when the members were called
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

InferenceCore::InferenceCore(const ServerConfig* config, const ModelCatalog* catalog,
                             const std::map<std::string, HostSupervisor*>& hosts, ModelStatistics* stats)
    : config_(config), catalog_(catalog), hosts_(hosts), stats_(stats) {}

ModelDispatcher* InferenceCore::DispatcherFor(const ModelConfig& model) {
  MutexLock lock(&mu_);
  ModelDispatcher*& known = dispatcher_of_[&model];
  if (known != nullptr) return known;
  std::unique_ptr<ModelDispatcher>& d = dispatchers_[ServingSignature(model)];
  if (d == nullptr) {
    std::vector<HostSupervisor*> serving;
    for (const auto& h : model.hosts) {
      auto it = hosts_.find(h);
      if (it != hosts_.end()) serving.push_back(it->second);
    }
    d = std::make_unique<ModelDispatcher>(&model, config_, std::move(serving), stats_);
  }
  known = d.get();
  return known;
}

InferDone InferenceCore::CountedReady(const ModelConfig*& model, int64_t* version, bool pinned, InferDone done) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    Enter(model->HostKey(), *version);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with ModelRepository::Retire
    // Still the served config (a reload switches configs before it retires
    // the old one's host key), and the version still takes requests.
    if (catalog_->Serves(*model, *version)) return LeaveThen(model->HostKey(), *version, std::move(done));
    Leave(model->HostKey(), *version);  // being replaced or unloaded: this request must not reach it
    const ModelConfig* current = catalog_->Find(model->name);
    if (current == nullptr) break;
    if (pinned) {
      const std::vector<int64_t> now_ready = catalog_->ReadyVersions(*current);
      if (std::find(now_ready.begin(), now_ready.end(), *version) == now_ready.end()) break;
      model = current;
      continue;
    }
    StatusOr<int64_t> next = ResolveVersion(*catalog_, *current, "");
    if (!next.ok()) break;
    model = current;
    *version = *next;
  }
  done(Status::Unavailable("model '" + model->name + "' version " + std::to_string(*version) +
                           " is being unloaded; retry"),
       {});
  return nullptr;
}

std::atomic<int64_t>* InferenceCore::EnsembleLoad(const std::string& name) {
  MutexLock lock(&mu_);
  std::unique_ptr<std::atomic<int64_t>>& load = ensemble_load_[name];
  if (load == nullptr) load = std::make_unique<std::atomic<int64_t>>(0);
  return load.get();
}

void InferenceCore::Enter(const std::string& model, int64_t version) {
  MutexLock lock(&mu_);
  ++in_flight_[{model, version}];
}

void InferenceCore::Leave(const std::string& model, int64_t version) {
  MutexLock lock(&mu_);
  auto it = in_flight_.find({model, version});
  if (it != in_flight_.end() && --it->second == 0) in_flight_.erase(it);
}

InferDone InferenceCore::LeaveThen(const std::string& model, int64_t version, InferDone done) {
  return [this, model, version, done = std::move(done)](const Status& status, InferResponse response) {
    Leave(model, version);
    done(status, std::move(response));
  };
}

int64_t InferenceCore::InFlight(const std::string& model, int64_t version) const {
  MutexLock lock(&mu_);
  auto it = in_flight_.find({model, version});
  return it == in_flight_.end() ? 0 : it->second;
}

bool InferenceCore::ModelReady(const ModelConfig& model) {
  if (catalog_->ReadyVersions(model).empty()) return false;
  if (model.is_ensemble()) {
    for (const auto& m : model.ensemble.members) {
      const ModelConfig* member = catalog_->Find(m.model);
      if (member == nullptr || !ModelReady(*member)) return false;
    }
    return true;
  }
  return DispatcherFor(model)->Ready();
}

void InferenceCore::Infer(std::shared_ptr<const InferRequest> request, InferDone done) {
  if (std::chrono::steady_clock::now() >= request->deadline) {
    done(Status::DeadlineExceeded("model '" + request->model->name + "': deadline passed before dispatch"), {});
    return;
  }
  if (request->model->is_ensemble()) {
    RunEnsemble(request, std::move(done));
    return;
  }
  const ModelConfig* model = request->model;
  int64_t version = request->version;
  InferDone counted = CountedReady(model, &version, request->version_pinned, std::move(done));
  if (counted == nullptr) return;
  DispatcherFor(*model)->Infer(std::move(request), version, std::move(counted));
}

void InferenceCore::RunEnsemble(const std::shared_ptr<const InferRequest>& request, InferDone done) {
  const ModelConfig& ensemble = *request->model;
  std::atomic<int64_t>* load = EnsembleLoad(ensemble.name);
  if (load->fetch_add(1) >= ensemble.ensemble.max_in_flight) {
    load->fetch_sub(1);
    done(Status::ResourceExhausted("ensemble '" + ensemble.name +
                                   "': " + std::to_string(ensemble.ensemble.max_in_flight) +
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
    call->versions.resize(members.size());
  }
  call->remaining.store(members.size());
  call->start = std::chrono::steady_clock::now();
  for (size_t m = 0; m < members.size(); ++m) {
    auto on_member = [this, call, m, name = members[m].model](const Status& status, InferResponse response) {
      {
        MutexLock lock(&call->mu);
        // A member call is a request of the member model in its statistics
        // (as in Triton: where a user looks for what the member served);
        // not when it never reached a version (0: not loaded, not ready).
        if (stats_ != nullptr && call->versions[m] > 0) {
          const auto elapsed = std::chrono::steady_clock::now() - call->start;
          stats_->Record(name, call->versions[m], status.ok(),
                         static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()),
                         response.stages, static_cast<uint64_t>(call->request->batch_rows()));
        }
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
      const auto& members = call->request->model->ensemble.members;
      for (size_t i = 0; i < members.size(); ++i) {
        if (i > 0) combined.member_versions.push_back(',');
        combined.member_versions.append(members[i].model);
        combined.member_versions.push_back(':');
        combined.member_versions.append(std::to_string(call->versions[i]));
      }
      call->done(s, s.ok() ? std::move(combined) : InferResponse{});
    };
    const ModelConfig* member = catalog_->Find(members[m].model);
    if (member == nullptr) {
      on_member(Status::Unavailable("model '" + members[m].model + "' is not loaded"), {});
      continue;
    }
    // A member pinned in the ensemble's config runs on that version; the
    // others on their highest ready one.
    const int64_t pin = members[m].version;
    StatusOr<int64_t> version = ResolveVersion(*catalog_, *member, pin > 0 ? std::to_string(pin) : "");
    if (!version.ok()) {
      on_member(version.status(), {});
      continue;
    }
    InferDone counted = CountedReady(member, &*version, /*pinned=*/pin > 0, std::move(on_member));
    if (counted == nullptr) continue;
    {
      MutexLock lock(&call->mu);  // before the dispatch: the combine reads it after every member answered
      call->versions[m] = *version;
    }
    DispatcherFor(*member)->Infer(request, *version, std::move(counted));
  }
}

}  // namespace es
