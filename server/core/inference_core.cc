#include "server/core/inference_core.h"

#include <atomic>
#include <chrono>

#include "common/mutex.h"
#include "config/host_model_spec.h"

namespace es {
InferenceCore::InferenceCore(const ServerConfig* config, const ModelCatalog* catalog,
                             const std::map<std::string, HostSupervisor*>& hosts, ModelStatistics* stats,
                             ResponseCache* cache)
    : config_(config), catalog_(catalog), hosts_(hosts), stats_(stats), cache_(cache) {}

namespace {

uint64_t NsSince(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

void InferenceCore::RunModel(const ModelConfig& model, int64_t version, std::shared_ptr<const InferRequest> request,
                             InferDone done, std::shared_ptr<RequestTrace> trace) {
  const std::string key = cache_ != nullptr && model.response_cache ? ResponseCache::KeyOf(model, version, *request)
                                                                    : std::string();
  if (key.empty()) {
    DispatcherFor(model)->Infer(std::move(request), version, std::move(done), std::move(trace));
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  uint64_t generation = 0;
  if (std::optional<std::vector<InferOutput>> outputs = cache_->Lookup(key, model.name, &generation)) {
    InferResponse response;
    response.outputs = std::move(*outputs);
    if (stats_ != nullptr) stats_->RecordCache(model.name, version, /*hit=*/true, NsSince(start));
    done(Status::Ok(), std::move(response));
    return;
  }
  const uint64_t lookup_ns = NsSince(start);
  DispatcherFor(model)->Infer(
      std::move(request), version,
      [this, key, generation, lookup_ns, name = model.name, version, done = std::move(done)](const Status& status,
                                                                                             InferResponse response) {
        const auto insert_start = std::chrono::steady_clock::now();
        if (status.ok()) cache_->Insert(key, name, generation, response.outputs);
        if (stats_ != nullptr) stats_->RecordCache(name, version, /*hit=*/false, lookup_ns + NsSince(insert_start));
        done(status, std::move(response));
      },
      std::move(trace));
}

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
    std::atomic<int64_t>* count = Enter(model->HostKey(), *version);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with ModelRepository::Retire
    // Still the served config (a reload switches configs before it retires
    // the old one's host key), and the version still takes requests.
    if (catalog_->Serves(*model, *version)) return LeaveThen(count, std::move(done));
    count->fetch_sub(1);  // being replaced or unloaded: this request must not reach it
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

std::atomic<int64_t>* InferenceCore::Enter(const std::string& model, int64_t version) {
  MutexLock lock(&mu_);
  std::unique_ptr<std::atomic<int64_t>>& count = in_flight_[{model, version}];
  if (count == nullptr) count = std::make_unique<std::atomic<int64_t>>(0);
  count->fetch_add(1);
  return count.get();
}

InferDone InferenceCore::LeaveThen(std::atomic<int64_t>* count, InferDone done) {
  return [count, done = std::move(done)](const Status& status, InferResponse response) {
    count->fetch_sub(1);
    done(status, std::move(response));
  };
}

int64_t InferenceCore::InFlight(const std::string& model, int64_t version) const {
  MutexLock lock(&mu_);
  auto it = in_flight_.find({model, version});
  return it == in_flight_.end() ? 0 : it->second->load();
}

size_t InferenceCore::FailQueued(const Status& why) {
  std::vector<ModelDispatcher*> dispatchers;
  {
    MutexLock lock(&mu_);
    for (auto& [signature, d] : dispatchers_) dispatchers.push_back(d.get());
  }
  // Outside the lock: the answers run the callers' callbacks. Dispatchers are
  // never removed, so the pointers stay valid.
  size_t failed = 0;
  for (ModelDispatcher* d : dispatchers) failed += d->FailQueued(why);
  return failed;
}

bool InferenceCore::ModelReady(const ModelConfig& model) {
  if (catalog_->ReadyVersions(model).empty()) return false;
  if (model.is_ensemble()) {
    // Ready when it can answer: its quorum of members (every member unless
    // ensemble.min_members says fewer) is ready.
    size_t ready = 0;
    for (const auto& m : model.ensemble.members) {
      const ModelConfig* member = catalog_->Find(m.model);
      if (member != nullptr && ModelReady(*member)) ready += m.Count();
    }
    return ready >= model.ensemble.Quorum();
  }
  return DispatcherFor(model)->Ready();
}

void InferenceCore::Infer(std::shared_ptr<const InferRequest> request, InferDone done) {
  if (std::chrono::steady_clock::now() >= request->deadline) {
    done(Status::DeadlineExceeded("model '" + request->model->name + "': deadline passed before dispatch"), {});
    return;
  }
  if (request->model->is_ensemble()) {
    CompositeRunner* runner = composite_.load();
    if (runner == nullptr) {
      done(Status::Unimplemented("model '" + request->model->name + "': composite models are not served here"), {});
      return;
    }
    runner->Run(request, std::move(done));
    return;
  }
  const ModelConfig* model = request->model;
  int64_t version = request->version;
  auto used = std::make_shared<int64_t>(0);  // the version CountedReady settles on
  InferDone reported = [used, done = std::move(done)](const Status& status, InferResponse response) {
    response.version = *used;
    done(status, std::move(response));
  };
  InferDone counted = CountedReady(model, &version, request->version_pinned, std::move(reported));
  if (counted == nullptr) return;
  *used = version;
  std::shared_ptr<RequestTrace> trace = request->trace;
  RunModel(*model, version, std::move(request), std::move(counted), std::move(trace));
}

void InferenceCore::CallMember(const EnsembleMember& member, const std::shared_ptr<const InferRequest>& request,
                               MemberDone done) {
  const auto start = std::chrono::steady_clock::now();
  auto version_used = std::make_shared<int64_t>(0);  // set once the call reaches a version
  // A traced request's member call is a trace of its own, linked to it.
  Tracer* tracer = tracer_.load();
  std::shared_ptr<RequestTrace> trace =
      tracer != nullptr && request->trace != nullptr ? tracer->Child(*request->trace, member.model) : nullptr;
  if (trace != nullptr) trace->Mark("REQUEST_START");
  InferDone answered = [this, start, version_used, tracer, trace, name = member.model, rows = request->batch_rows(),
                        done = std::move(done)](const Status& status, InferResponse response) {
    if (trace != nullptr) {
      trace->set_version(*version_used);
      if (!status.ok()) trace->SetError(status.ToString());
      trace->Mark("REQUEST_END");
      tracer->Finish(trace);
    }
    // A member call is a request of the member model in its statistics
    // (as in Triton: where a user looks for what the member served); not
    // when it never reached a version (not loaded, not ready).
    if (stats_ != nullptr && *version_used > 0) {
      const auto elapsed = std::chrono::steady_clock::now() - start;
      stats_->Record(name, *version_used, status.ok(),
                     static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()),
                     response.stages, static_cast<uint64_t>(rows));
    }
    done(*version_used, status, std::move(response));
  };
  const ModelConfig* model = catalog_->Find(member.model);
  if (model == nullptr) {
    answered(Status::Unavailable("model '" + member.model + "' is not loaded"), {});
    return;
  }
  // A member pinned in the ensemble's config runs on that version; the
  // others on their highest ready one.
  const int64_t pin = member.version;
  StatusOr<int64_t> version = ResolveVersion(*catalog_, *model, pin > 0 ? std::to_string(pin) : "");
  if (!version.ok()) {
    answered(version.status(), {});
    return;
  }
  InferDone counted = CountedReady(model, &*version, /*pinned=*/pin > 0, std::move(answered));
  if (counted == nullptr) return;
  *version_used = *version;  // before the dispatch, which may answer at once
  RunModel(*model, *version, request, std::move(counted), std::move(trace));
}

}  // namespace es
