#include "server/repository/model_repository.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "config/host_model_spec.h"

namespace es {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Ensembles name members, which name no one: deeper is a cycle.
constexpr int kMaxLoadDepth = 2;

std::string Describe(const std::string& model, int64_t version) {
  return "model '" + model + "' version " + std::to_string(version);
}

// A config's serving signature as if it had no host key of its own (a
// reloaded config carries the key it was loaded under; one just read from
// disk none).
std::string SignatureWithoutKey(const ModelConfig& m) {
  ModelConfig plain = m;
  plain.host_key.clear();
  return ServingSignature(plain);
}

// Whether two configs of one model are served alike (version folders aside).
bool SameServing(const ModelConfig& a, const ModelConfig& b) { return SignatureWithoutKey(a) == SignatureWithoutKey(b); }

// What a load of a torchscript model tried: how it is served and the
// version folders found.
std::string LoadAttempt(const ModelConfig& m) {
  std::string s = SignatureWithoutKey(m);
  for (int64_t v : m.versions) {
    s.append("|v");
    s.append(std::to_string(v));
  }
  return s;
}

bool SameEnsemble(const ModelConfig& a, const ModelConfig& b) {
  if (a.ensemble.combine != b.ensemble.combine || a.ensemble.max_in_flight != b.ensemble.max_in_flight ||
      a.ensemble.min_members != b.ensemble.min_members ||
      a.ensemble.member_timeout_ms != b.ensemble.member_timeout_ms || a.ensemble.stages != b.ensemble.stages ||
      a.ensemble.exit_threshold != b.ensemble.exit_threshold ||
      a.ensemble.members != b.ensemble.members || a.max_batch_size != b.max_batch_size ||
      a.overload != b.overload || a.experiment != b.experiment) {
    return false;
  }
  return EncodeHostModelSpec(a) == EncodeHostModelSpec(b);
}

}  // namespace

const char* ModelRepository::StateName(State state) {
  switch (state) {
    case State::kLoading:
      return "LOADING";
    case State::kReady:
      return "READY";
    case State::kUnloading:
      return "UNLOADING";
    case State::kUnavailable:
      return "UNAVAILABLE";
  }
  return "UNAVAILABLE";
}

ModelRepository::ModelRepository(const ServerConfig* config)
    : config_(config),
      // A load may take as long as a host's start-up (it reads and warms up a model).
      control_timeout_(milliseconds(config->limits.host_startup_timeout_ms)),
      uploads_(config->model_upload_dir, config->limits.max_request_bytes) {}

ModelRepository::~ModelRepository() { Stop(); }

const ModelConfig* ModelRepository::Keep(std::unique_ptr<ModelConfig> config) {
  kept_.push_back(std::move(config));
  return kept_.back().get();
}

Status ModelRepository::Begin(const std::vector<std::string>& explicit_models) {
  if (config_->model_control_mode == ModelControlMode::kExplicit) {
    // Loaded one by one (members first), each from its folder, as a load
    // call would (the hosts, not started yet, load them as they start): a
    // broken model that nobody asked for does not stop the server.
    MutexLock control(&control_mu_);
    for (const std::string& name : explicit_models) {
      Status s = LoadLocked(name, 0);
      if (!s.ok()) return Status(s.code(), "--load-model " + name + ": " + s.message());
    }
    return Status::Ok();
  }
  if (!explicit_models.empty()) {
    return Status::InvalidArgument("--load-model is for model_control_mode explicit (the mode is " +
                                   std::string(ModelControlModeName(config_->model_control_mode)) +
                                   ": every model of the repository is loaded)");
  }
  MutexLock lock(&mu_);
  for (const auto& [name, model] : config_->models) {
    ModelState& state = models_[name];
    state.config = Keep(std::make_unique<ModelConfig>(model));
    for (int64_t v : model.ServedVersions()) state.versions[v] = VersionState{State::kLoading, ""};
  }
  return Status::Ok();
}

void ModelRepository::Attach(std::map<std::string, HostSupervisor*> hosts, InFlightCount in_flight) {
  {
    MutexLock control(&control_mu_);
    hosts_ = std::move(hosts);
    in_flight_ = std::move(in_flight);
  }
  MutexLock lock(&mu_);
  for (auto& [name, state] : models_) {
    for (auto& [version, v] : state.versions) v.state = State::kReady;
  }
}

const ModelConfig* ModelRepository::Find(const std::string& name) const {
  MutexLock lock(&mu_);
  auto it = models_.find(name);
  return it == models_.end() ? nullptr : it->second.config;
}

std::vector<int64_t> ModelRepository::ReadyVersions(const ModelConfig& model) const {
  MutexLock lock(&mu_);
  auto it = models_.find(model.name);
  if (it == models_.end() || it->second.config == nullptr) return {};
  if (model.is_ensemble()) {
    for (const EnsembleMember& m : model.ensemble.members) {
      auto member = models_.find(m.model);
      if (member == models_.end() || member->second.config == nullptr) return {};
      // A pinned member needs that version ready; otherwise any version.
      const auto& versions = member->second.versions;
      const bool ready = std::any_of(versions.begin(), versions.end(), [&m](const auto& v) {
        return v.second.state == State::kReady && (m.version == 0 || v.first == m.version);
      });
      if (!ready) return {};
    }
    return {1};
  }
  std::vector<int64_t> ready;
  for (const auto& [version, v] : it->second.versions) {
    if (v.state == State::kReady) ready.push_back(version);
  }
  return ready;
}

std::optional<int64_t> ModelRepository::HighestReady(const ModelConfig& model) const {
  if (model.is_ensemble()) return ModelCatalog::HighestReady(model);  // {1} when its members are ready
  MutexLock lock(&mu_);
  auto it = models_.find(model.name);
  if (it == models_.end() || it->second.config == nullptr) return std::nullopt;
  const auto& versions = it->second.versions;
  for (auto v = versions.rbegin(); v != versions.rend(); ++v) {
    if (v->second.state == State::kReady) return v->first;
  }
  return std::nullopt;
}

bool ModelRepository::Serves(const ModelConfig& model, int64_t version) const {
  if (model.is_ensemble()) return ModelCatalog::Serves(model, version);
  MutexLock lock(&mu_);
  auto it = models_.find(model.name);
  if (it == models_.end() || it->second.config != &model) return false;
  auto v = it->second.versions.find(version);
  return v != it->second.versions.end() && v->second.state == State::kReady;
}

std::vector<const ModelConfig*> ModelRepository::Loaded() const {
  std::vector<const ModelConfig*> loaded;
  MutexLock lock(&mu_);
  for (const auto& [name, state] : models_) {
    if (state.config != nullptr) loaded.push_back(state.config);
  }
  return loaded;
}

std::vector<HostModelLoad> ModelRepository::AssignmentOf(const std::string& host) const {
  std::vector<HostModelLoad> loads;
  std::set<std::pair<std::string, int64_t>> seen;
  const auto add = [&](const ModelConfig* config, int64_t version) {
    if (config == nullptr || config->is_ensemble()) return;
    if (std::find(config->hosts.begin(), config->hosts.end(), host) == config->hosts.end()) return;
    if (seen.insert({config->HostKey(), version}).second) {
      loads.push_back({config->HostKey(), version, EncodeHostModelSpec(*config)});
    }
  };
  MutexLock lock(&mu_);
  for (const auto& [name, state] : models_) {
    // Served versions with the served config; what a load in progress brings
    // (new versions, or every version under a changed config's new key)
    // with the config being loaded. Versions on their way out: neither.
    for (const auto& [version, v] : state.versions) {
      // (LOADING without a load in progress: the start-up set, loaded by
      // the hosts as they start.)
      if (v.state == State::kReady || (v.state == State::kLoading && state.loading == nullptr)) {
        add(state.config, version);
      }
    }
    if (state.loading == nullptr) continue;
    for (int64_t version : state.loading->ServedVersions()) {
      auto it = state.versions.find(version);
      if (it != state.versions.end() && (it->second.state == State::kLoading || it->second.state == State::kReady)) {
        add(state.loading, version);
      }
    }
  }
  return loads;
}

std::vector<ModelRepository::IndexEntry> ModelRepository::Index() const {
  std::set<std::string> names;
  if (StatusOr<std::vector<std::string>> folders = RepositoryModelNames(config_->repository); folders.ok()) {
    names.insert(folders->begin(), folders->end());
  }
  std::vector<IndexEntry> entries;
  MutexLock lock(&mu_);
  for (const auto& [name, state] : models_) names.insert(name);
  for (const std::string& name : names) {
    auto it = models_.find(name);
    if (it == models_.end() || it->second.config == nullptr) {
      const std::string reason = it == models_.end() || it->second.reason.empty() ? "not loaded" : it->second.reason;
      entries.push_back({name, "", StateName(State::kUnavailable), reason});
      continue;
    }
    const ModelState& state = it->second;
    if (state.config->is_ensemble()) {
      entries.push_back({name, "1", StateName(State::kReady), state.reason});
      continue;
    }
    for (const auto& [version, v] : state.versions) {
      entries.push_back(
          {name, std::to_string(version), StateName(v.state), v.reason.empty() ? state.reason : v.reason});
    }
  }
  return entries;
}

std::map<std::string, ModelConfig> ModelRepository::ServedConfigs() const {
  std::map<std::string, ModelConfig> served;
  MutexLock lock(&mu_);
  for (const auto& [name, state] : models_) {
    if (state.config != nullptr) served.emplace(name, *state.config);
  }
  return served;
}

Status ModelRepository::Load(const std::string& name) {
  MutexLock control(&control_mu_);
  return LoadLocked(name, 0);
}

Status ModelRepository::LoadUpload(const std::string& name, const Upload& upload) {
  MutexLock control(&control_mu_);
  const bool config_only = upload.files.empty();
  if (const ModelConfig* served = Find(name); served != nullptr && served->is_ensemble()) {
    return Status::InvalidArgument("model '" + name + "' is an ensemble; an upload cannot replace it");
  }
  if (config_only && !IsModelFolder(name)) {
    return Status::NotFound("a config without files overrides the config of a repository model, and there is no "
                            "model folder '" + name + "' in the repository " + config_->repository +
                            " (upload the model's files too: file:1/model.pt)");
  }
  ES_ASSIGN_OR_RETURN(const std::string folder, uploads_.Stage(name, upload.config_yaml, upload.files));
  const std::string files_folder = config_only ? config_->repository + "/" + name : folder;
  StatusOr<ModelConfig> loaded = LoadUploadedModel(*config_, folder, files_folder, uploads_.root());
  Status s = loaded.status();
  if (!s.ok()) {
    // The client never sees the staged folder: name its files as the
    // upload's own ("config.yaml:8: inputs[0].datatype: ...").
    std::string message = s.message();
    for (size_t at; (at = message.find(folder + "/")) != std::string::npos;) message.erase(at, folder.size() + 1);
    s = Status(s.code(), "uploaded model '" + name + "': " + message);
  }
  if (s.ok()) s = LoadTorchScript(name, std::make_unique<ModelConfig>(std::move(loaded).value()));
  if (!s.ok()) {
    uploads_.Remove(folder);
    RecordFailure(name, s);
    return s;
  }
  ServeFrom(name, folder);
  spdlog::info("model '{}' uploaded ({} file(s){})", name, upload.files.size(),
               config_only ? ", the repository's version folders" : "");
  if (on_served_) on_served_(*Find(name));
  return Status::Ok();
}

void ModelRepository::ServeFrom(const std::string& name, const std::string& folder) {
  auto it = upload_folders_.find(name);
  if (it != upload_folders_.end() && it->second != folder) uploads_.Remove(it->second);
  if (folder.empty()) {
    if (it != upload_folders_.end()) upload_folders_.erase(it);
  } else {
    upload_folders_[name] = folder;
  }
}

// The same error again (a poll every few seconds over a broken folder) is
// neither logged nor counted again.
void ModelRepository::RecordFailure(const std::string& name, const Status& error) {
  MutexLock lock(&mu_);
  std::string& reason = models_[name].reason;
  if (reason == error.message()) return;
  reason = error.message();
  load_failures_.fetch_add(1, std::memory_order_relaxed);
  spdlog::error("cannot load model '{}': {}", name, error.message());
}

bool ModelRepository::IsModelFolder(const std::string& name) const {
  StatusOr<std::vector<std::string>> folders = RepositoryModelNames(config_->repository);
  return folders.ok() && std::find(folders->begin(), folders->end(), name) != folders->end();
}

Status ModelRepository::LoadFirst(const std::string& name, int depth, const StatusOr<std::vector<std::string>>& names,
                                  const char* what) {
  if (!names.ok()) {
    RecordFailure(name, names.status());
    return names.status();
  }
  for (const std::string& other : *names) {
    if (other == name || Find(other) != nullptr) continue;  // a served one is not reloaded
    Status s = LoadLocked(other, depth + 1);
    if (!s.ok()) {
      std::string message = "ensemble '" + name + "': ";
      message.append(what).append(" '").append(other).append("': ").append(s.message());
      Status error(s.code(), message);
      RecordFailure(name, error);
      return error;
    }
  }
  return Status::Ok();
}

Status ModelRepository::LoadLocked(const std::string& name, int depth) {
  if (depth > kMaxLoadDepth) return Status::InvalidArgument("model '" + name + "': ensembles nest too deep");
  // Only folders of the repository are models: a name a client made up
  // leaves no trace (no index entry, no failure counted).
  if (!IsModelFolder(name)) {
    return Status::NotFound("no model folder '" + name + "' in the repository " + config_->repository);
  }
  // What an ensemble names is loaded first: its members, then its overload
  // rungs (other models that answer in its place; a rung's own ladder is
  // refused by the checks, so this ends).
  ES_RETURN_IF_ERROR(LoadFirst(name, depth, RepositoryEnsembleMembers(*config_, name), "member"));
  ES_RETURN_IF_ERROR(LoadFirst(name, depth, RepositoryLadderRungs(*config_, name), "overload rung"));
  StatusOr<ModelConfig> loaded = LoadRepositoryModel(*config_, name, ServedConfigs());
  if (!loaded.ok()) {
    RecordFailure(name, loaded.status());
    return loaded.status();
  }
  auto fresh = std::make_unique<ModelConfig>(std::move(loaded).value());
  if (!fresh->is_ensemble()) {
    // A poll does not retry a load that failed on the hosts until the
    // folder changes (a broken model.pt would be loaded and dropped again
    // at every poll); an explicit load always tries.
    const std::string attempt = LoadAttempt(*fresh);
    if (polling_ && failed_attempt_[name] == attempt) return Status::Ok();
    Status s = LoadTorchScript(name, std::move(fresh));
    failed_attempt_[name] = s.ok() ? "" : attempt;
    if (s.ok()) ServeFrom(name, "");
    if (s.ok() && on_served_) on_served_(*Find(name));
    return s;
  }
  MutexLock lock(&mu_);
  ModelState& state = models_[name];
  state.reason.clear();
  if (state.config != nullptr && SameEnsemble(*state.config, *fresh)) return Status::Ok();
  state.config = Keep(std::move(fresh));
  state.versions = {{1, VersionState{State::kReady, ""}}};
  const ModelConfig* served = state.config;
  lock.Unlock();
  spdlog::info("ensemble '{}' loaded", name);
  if (on_served_) on_served_(*served);
  return Status::Ok();
}

Status ModelRepository::LoadTorchScript(const std::string& name, std::unique_ptr<ModelConfig> fresh_config) {
  const std::vector<int64_t> target = fresh_config->ServedVersions();
  const ModelConfig* old = nullptr;
  std::vector<int64_t> ready;
  const ModelConfig* fresh = nullptr;
  bool reload_all = true;
  {
    MutexLock lock(&mu_);
    generation_.fetch_add(1);  // what hosts must hold changes
    ModelState& state = models_[name];
    old = state.config;
    for (const auto& [version, v] : state.versions) {
      if (v.state == State::kReady) ready.push_back(version);
    }
    if (old != nullptr && SameServing(*old, *fresh_config) && old->versions == fresh_config->versions &&
        ready == target) {
      state.reason.clear();
      if (old->experiment != fresh_config->experiment) {
        // Only the experiment changed: the same versions on the same hosts
        // serve on under the new config (requests read it from there).
        fresh_config->host_key = old->host_key;
        state.config = Keep(std::move(fresh_config));
        spdlog::info("model '{}': experiment now {} ({})", name, ExperimentModeName(state.config->experiment.mode),
                     state.config->experiment.candidate);
      }
      return Status::Ok();  // nothing else changed on disk
    }
    reload_all = old == nullptr || !SameServing(*old, *fresh_config);
    // A served model whose config changed is loaded under a new host key,
    // beside the old one: requests already given to the old config finish
    // there. Otherwise the key stays (new versions join the old ones).
    if (old != nullptr) {
      if (reload_all) {
        fresh_config->host_key = name;
        fresh_config->host_key.push_back('@');
        fresh_config->host_key.append(std::to_string(++key_generations_[name]));
      } else {
        fresh_config->host_key = old->host_key;
      }
    }
    fresh = Keep(std::move(fresh_config));
    state.loading = fresh;
    for (int64_t v : target) {
      if (reload_all || !std::binary_search(ready.begin(), ready.end(), v)) {
        auto [it, added] = state.versions.try_emplace(v, VersionState{State::kLoading, ""});
        if (!added && it->second.state != State::kReady) it->second = VersionState{State::kLoading, ""};
      }
    }
  }
  // Load what is new (or everything, when the config changed) before any
  // of it takes requests; the old versions serve meanwhile.
  std::vector<int64_t> loaded;
  Status failed = Status::Ok();
  for (int64_t v : target) {
    if (!reload_all && std::binary_search(ready.begin(), ready.end(), v)) continue;
    Status s = LoadOnHosts(*fresh, v);
    if (!s.ok()) {
      failed = s;
      break;
    }
    loaded.push_back(v);
  }
  if (!failed.ok()) {
    AbandonLoad(name, *fresh, ready, loaded, failed);
    return failed;
  }
  // The switch: requests resolve against the new config and versions.
  std::vector<int64_t> leaving;
  {
    MutexLock lock(&mu_);
    generation_.fetch_add(1);  // what hosts must hold changes
    ModelState& state = models_[name];
    state.config = fresh;
    state.loading = nullptr;
    state.reason.clear();
    for (int64_t v : loaded) state.versions[v] = VersionState{State::kReady, ""};
    for (int64_t v : ready) {
      if (!std::binary_search(target.begin(), target.end(), v)) leaving.push_back(v);
    }
  }
  for (int64_t v : loaded) spdlog::info("{} is ready", Describe(name, v));
  if (old != nullptr && old->HostKey() != fresh->HostKey()) {
    // A changed config: the versions that leave are out of routing already
    // (the new config does not serve them); everything under the old key
    // drains and goes from the old config's hosts.
    {
      MutexLock lock(&mu_);
      generation_.fetch_add(1);  // what hosts must hold changes
      for (int64_t v : leaving) models_[name].versions.erase(v);
    }
    Retire(*old, ready, old->hosts, /*hosts_only=*/true);
  } else if (!leaving.empty()) {
    Retire(*fresh, leaving, fresh->hosts);
  }
  return Status::Ok();
}

void ModelRepository::AbandonLoad(const std::string& name, const ModelConfig& fresh,
                                  const std::vector<int64_t>& ready, const std::vector<int64_t>& loaded,
                                  const Status& failed) {
  {
    MutexLock lock(&mu_);
    generation_.fetch_add(1);  // what hosts must hold changes
    ModelState& state = models_[name];
    state.loading = nullptr;
    for (auto it = state.versions.begin(); it != state.versions.end();) {
      const bool was_ready = std::binary_search(ready.begin(), ready.end(), it->first);
      if (!was_ready) {
        it = state.versions.erase(it);
      } else {
        ++it;
      }
    }
  }
  // What it loaded goes again: new versions, or everything under a new
  // key (the served key's versions were not touched).
  for (const std::string& host : fresh.hosts) {
    auto h = hosts_.find(host);
    if (h == hosts_.end()) continue;
    for (int64_t v : loaded) {
      (void)h->second->Control(ipc::RequestKind::kUnload, {fresh.HostKey(), v, ""}, control_timeout_);
    }
  }
  RecordFailure(name, failed);
}

Status ModelRepository::LoadOnHosts(const ModelConfig& model, int64_t version) {
  const HostModelLoad load{model.HostKey(), version, EncodeHostModelSpec(model)};
  std::vector<HostSupervisor*> took;
  int live = 0;
  for (const std::string& host : model.hosts) {
    auto it = hosts_.find(host);
    if (it == hosts_.end()) continue;
    if (!it->second->ready()) continue;  // down: its next start loads the assignment
    ++live;
    Status s = it->second->Control(ipc::RequestKind::kLoad, load, control_timeout_);
    if (s.code() == StatusCode::kUnavailable && !it->second->ready()) continue;  // died meanwhile: same
    if (!s.ok()) {
      for (HostSupervisor* h : took) (void)h->Control(ipc::RequestKind::kUnload, load, control_timeout_);
      return Status(s.code(), "host '" + host + "': " + s.message());
    }
    took.push_back(it->second);
  }
  if (live == 0 && !hosts_.empty()) {
    spdlog::warn("{}: no host of it is up; it loads when one starts", Describe(model.name, version));
  }
  return Status::Ok();
}

void ModelRepository::Retire(const ModelConfig& model, const std::vector<int64_t>& versions,
                             const std::vector<std::string>& hosts, bool hosts_only) {
  if (!hosts_only) {
    MutexLock lock(&mu_);
    generation_.fetch_add(1);  // what hosts must hold changes
    ModelState& state = models_[model.name];
    for (int64_t v : versions) {
      if (auto it = state.versions.find(v); it != state.versions.end()) it->second.state = State::kUnloading;
    }
  }
  // Requests already given to these versions are answered first. (The
  // fence pairs with InferenceCore::CountedReady: a request counted after
  // this reads UNLOADING; one counted before is waited for.)
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const auto deadline = Clock::now() + milliseconds(config_->limits.drain_timeout_ms);
  for (int64_t v : versions) {
    while (in_flight_ && in_flight_(model.HostKey(), v) > 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(2));
    }
    if (in_flight_ && in_flight_(model.HostKey(), v) > 0) {
      spdlog::warn("{}: requests still in flight after drain_timeout_ms; unloading anyway", Describe(model.name, v));
    }
  }
  for (const std::string& host : hosts) {
    auto it = hosts_.find(host);
    if (it == hosts_.end()) continue;
    for (int64_t v : versions) {
      Status s = it->second->Control(ipc::RequestKind::kUnload, {model.HostKey(), v, ""}, control_timeout_);
      if (!s.ok() && it->second->ready())
        spdlog::warn("host '{}': unloading {}: {}", host, Describe(model.name, v), s.message());
    }
  }
  if (hosts_only) return;  // the versions still serve elsewhere
  MutexLock lock(&mu_);
  generation_.fetch_add(1);  // what hosts must hold changes
  ModelState& state = models_[model.name];
  for (int64_t v : versions) {
    auto it = state.versions.find(v);
    if (it != state.versions.end() && it->second.state == State::kUnloading) state.versions.erase(it);
  }
  for (int64_t v : versions) spdlog::info("{} unloaded", Describe(model.name, v));
}

Status ModelRepository::Unload(const std::string& name, bool unload_dependents) {
  MutexLock control(&control_mu_);
  return UnloadLocked(name, unload_dependents);
}

Status ModelRepository::UnloadLocked(const std::string& name, bool unload_dependents) {
  const ModelConfig* model = Find(name);
  if (model == nullptr) {
    if (!IsModelFolder(name)) return Status::NotFound("unknown model '" + name + "'");
    return Status::Ok();  // not loaded: nothing to do (Triton's answer too)
  }
  if (!model->is_ensemble()) {
    std::vector<int64_t> versions;
    {
      MutexLock lock(&mu_);
      for (const auto& [v, state] : models_[name].versions) versions.push_back(v);
    }
    Retire(*model, versions, model->hosts);
  }
  {
    MutexLock lock(&mu_);
    generation_.fetch_add(1);  // what hosts must hold changes
    ModelState& state = models_[name];
    state.config = nullptr;
    state.versions.clear();
    state.reason = "unloaded";
  }
  ServeFrom(name, "");
  spdlog::info("model '{}' unloaded", name);
  // Triton's unload_dependents: an ensemble's members go too, unless another
  // loaded ensemble uses them. (Unloading a member leaves its ensembles
  // loaded, not ready.)
  if (!unload_dependents || !model->is_ensemble()) return Status::Ok();
  for (const EnsembleMember& member : model->ensemble.members) {
    bool used = false;
    {
      MutexLock lock(&mu_);
      for (const auto& [other, state] : models_) {
        if (state.config == nullptr || !state.config->is_ensemble()) continue;
        for (const EnsembleMember& m : state.config->ensemble.members) used = used || m.model == member.model;
      }
    }
    if (!used) ES_RETURN_IF_ERROR(UnloadLocked(member.model, false));
  }
  return Status::Ok();
}

void ModelRepository::Poll() {
  MutexLock control(&control_mu_);
  polling_ = true;
  PollLocked();
  polling_ = false;
}

void ModelRepository::PollLocked() {
  StatusOr<std::vector<std::string>> folders = RepositoryModelNames(config_->repository);
  if (!folders.ok()) {
    spdlog::error("repository poll: {}", folders.status().message());
    return;
  }
  // Torchscript models first: an ensemble is checked against its members as served.
  std::vector<std::string> order;
  std::vector<std::string> ensembles;
  for (const std::string& name : *folders) {
    StatusOr<std::vector<std::string>> members = RepositoryEnsembleMembers(*config_, name);
    (members.ok() && !members->empty() ? ensembles : order).push_back(name);
  }
  order.insert(order.end(), ensembles.begin(), ensembles.end());
  for (const std::string& name : order) (void)LoadLocked(name, 0);
  // Models whose folder is gone are unloaded. Not an ensemble's members:
  // they have folders of their own, which this poll keeps (unloading them
  // here would only have the next poll load them again). The ensembles of a
  // gone member stay loaded, not ready, until it comes back.
  std::vector<std::string> gone;
  {
    MutexLock lock(&mu_);
    for (const auto& [name, state] : models_) {
      if (state.config != nullptr && std::find(folders->begin(), folders->end(), name) == folders->end()) {
        gone.push_back(name);
      }
    }
  }
  for (const std::string& name : gone) (void)UnloadLocked(name, /*unload_dependents=*/false);
}

void ModelRepository::LoadAsync(const std::string& name, Done done) {
  Submit([this, name, done = std::move(done)](bool stopping) {
    done(stopping ? Status::Unavailable("the server is shutting down") : Load(name));
  });
}

void ModelRepository::UnloadAsync(const std::string& name, bool unload_dependents, Done done) {
  Submit([this, name, unload_dependents, done = std::move(done)](bool stopping) {
    done(stopping ? Status::Unavailable("the server is shutting down") : Unload(name, unload_dependents));
  });
}

void ModelRepository::LoadUploadAsync(const std::string& name, Upload upload, Done done) {
  // shared_ptr: std::function needs a copyable job, and the files may be large.
  auto held = std::make_shared<Upload>(std::move(upload));
  Submit([this, name, held, done = std::move(done)](bool stopping) {
    done(stopping ? Status::Unavailable("the server is shutting down") : LoadUpload(name, *held));
  });
}

void ModelRepository::Submit(std::function<void(bool stopping)> job) {
  {
    MutexLock lock(&worker_mu_);
    if (!stopping_) {
      jobs_.push_back(std::move(job));
      worker_cv_.NotifyAll();
      return;
    }
  }
  job(true);
}

void ModelRepository::StartWorker() {
  worker_ = std::thread([this] { WorkerLoop(); });
}

void ModelRepository::WorkerLoop() {
  const bool polling = config_->model_control_mode == ModelControlMode::kPoll;
  const auto period = std::chrono::seconds(config_->repository_poll_secs);
  auto next_poll = Clock::now() + period;
  for (;;) {
    std::function<void(bool)> job;
    {
      MutexLock lock(&worker_mu_);
      while (!stopping_ && jobs_.empty() && !(polling && Clock::now() >= next_poll)) {
        if (polling) {
          worker_cv_.WaitUntil(&worker_mu_, next_poll);
        } else {
          worker_cv_.Wait(&worker_mu_);
        }
      }
      if (stopping_) break;
      if (!jobs_.empty()) {
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
    }
    if (job) {
      job(false);
      continue;
    }
    Poll();
    next_poll = Clock::now() + period;
  }
  // Whatever was still asked for is answered.
  std::deque<std::function<void(bool)>> left;
  {
    MutexLock lock(&worker_mu_);
    left.swap(jobs_);
  }
  for (auto& job : left) job(true);
}

void ModelRepository::RequestStop() {
  {
    MutexLock lock(&worker_mu_);
    stopping_ = true;
  }
  worker_cv_.NotifyAll();
}

void ModelRepository::Stop() {
  RequestStop();
  if (worker_.joinable()) worker_.join();
}

}  // namespace es
