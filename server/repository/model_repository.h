// ModelRepository: the router's live model set, and the one place that
// decides which model versions each host holds.
//
// What is served changes while the server runs (model_control_mode, see
// config/server_config.h): RepositoryModelLoad/Unload in explicit mode, a
// rescan every repository_poll_secs in poll mode. Each model is read from
// its folder (config.yaml, version folders) by the router alone; the hosts
// get the versions the policy selects through load requests on their
// channels (HostSupervisor::Control), and a restarted host gets
// AssignmentOf(its name): exactly what it held.
//
// Rollout without downtime: a new version (or, when config.yaml changed,
// every version, under a new host key beside the old: ModelConfig::host_key)
// is loaded on every live host of the model and only then takes requests
// (READY); a version leaving the policy is first taken out of
// request routing (UNLOADING), then waits until the requests already given
// to it have been answered (bounded by limits.drain_timeout_ms), and only
// then is unloaded from the hosts. A load that fails (broken model.pt, bad
// config.yaml) changes nothing that serves: the old versions keep serving,
// and the error is logged, counted (load_failures()) and shown as the
// model's reason in Index().
//
// Configs: every ModelConfig it ever served is kept for its life (a few
// KiB each, one per change), so the plain pointers that requests in flight
// and the dispatchers hold never dangle.
//
// Ensembles: loading one loads its members first; an ensemble is ready
// while it is loaded and each member has a ready version (requests use each
// member's highest ready version). Unloading an ensemble with
// unload_dependents (Triton's) unloads its members too, unless another
// loaded ensemble uses them; unloading a member leaves its ensembles
// loaded but not ready.
//
// Uploads (explicit mode, Triton's load parameters): LoadUpload writes the
// model into a folder of its own (ModelUploads) and loads it from there as
// Load loads a repository folder, with the same rollout; the folder of the
// upload it replaces goes once the new one serves, a failed upload's at
// once, and an unload, or a load of the repository's folder by name,
// removes the upload's.
//
// Thread safety: the ModelCatalog queries, AssignmentOf() and Index() from
// any thread (`mu_`); Load/Unload/Poll are serialised by `control_mu_` and
// may block for as long as hosts take to load and requests take to drain.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "config/server_config.h"
#include "server/core/model_catalog.h"
#include "server/hosts/host_supervisor.h"
#include "server/repository/model_uploads.h"

namespace es {

class ModelRepository : public ModelCatalog {
 public:
  enum class State { kLoading, kReady, kUnloading, kUnavailable };
  static const char* StateName(State state);  // Triton's: LOADING, READY, UNLOADING, UNAVAILABLE

  struct IndexEntry {
    std::string name;
    std::string version;  // "" for a model with no version listed (not loaded)
    std::string state;
    std::string reason;
  };

  // How many requests given to (host key, version) are not answered yet:
  // the unload of a version waits for 0.
  using InFlightCount = std::function<int64_t(const std::string& model, int64_t version)>;

  // `config` outlives the repository; its `models` is the start-up set.
  explicit ModelRepository(const ServerConfig* config);
  ~ModelRepository() override;

  // Called (on the loading thread) with each model's config once it is
  // served: for the figures kept per model. Set before Begin.
  void SetOnServed(std::function<void(const ModelConfig&)> on_served) { on_served_ = std::move(on_served); }

  // Before the hosts start: the start-up set, as LOADING (its hosts load
  // it as they start). none and poll modes: every model of config->models;
  // explicit: `explicit_models` (and their members), read from disk now.
  Status Begin(const std::vector<std::string>& explicit_models);
  // Once the supervisors exist and every host has started: the start-up set
  // becomes READY, and loads and unloads may reach the hosts.
  void Attach(std::map<std::string, HostSupervisor*> hosts, InFlightCount in_flight);

  // ModelCatalog.
  const ModelConfig* Find(const std::string& name) const override;
  std::vector<int64_t> ReadyVersions(const ModelConfig& model) const override;
  std::optional<int64_t> HighestReady(const ModelConfig& model) const override;
  bool Serves(const ModelConfig& model, int64_t version) const override;  // one lookup, no allocation

  // The configs of the models served now (loaded), by name.
  std::vector<const ModelConfig*> Loaded() const;
  // The versions host `host` must hold (loaded or being loaded).
  std::vector<HostModelLoad> AssignmentOf(const std::string& host) const;
  // Changes (before the hosts are told) whenever what any host must hold
  // changes: a starting host publishes itself only if it did not change
  // since it read its assignment (HostSupervisor), so no rollout misses it.
  uint64_t generation() const { return generation_.load(); }
  // Every model folder of the repository and every model known, each
  // version with its state; sorted by name then version.
  std::vector<IndexEntry> Index() const;

  // (Re)loads `name` from its folder; see the contract above.
  Status Load(const std::string& name);
  Status Unload(const std::string& name, bool unload_dependents);
  // Poll mode: one rescan of the repository (what the worker runs).
  void Poll();

  // A model uploaded through the load API: `config_yaml` (the model's
  // config.yaml, translated from the request's config) and `files` (paths
  // relative to the model's folder, e.g. "1/model.pt"); no files = the
  // config over the repository's version folders of `name`.
  struct Upload {
    std::string config_yaml;
    std::vector<ModelUploads::File> files;
  };
  Status LoadUpload(const std::string& name, const Upload& upload);

  // The same on the repository's worker thread, `done` called there when
  // finished (for the gRPC handlers, which must not block).
  using Done = std::function<void(const Status&)>;
  void LoadAsync(const std::string& name, Done done);
  void UnloadAsync(const std::string& name, bool unload_dependents, Done done);
  void LoadUploadAsync(const std::string& name, Upload upload, Done done);
  // Starts the worker (after Attach): it runs the async requests in order
  // and, in poll mode, a rescan every repository_poll_secs.
  void StartWorker();
  // No job or poll starts from now on (shutdown begins); does not wait.
  void RequestStop();
  // Ends the worker; jobs not started are answered UNAVAILABLE.
  void Stop();

  uint64_t load_failures() const { return load_failures_.load(std::memory_order_relaxed); }

 private:
  struct VersionState {
    State state = State::kLoading;
    std::string reason;
  };
  struct ModelState {
    const ModelConfig* config = nullptr;   // served; nullptr while not loaded
    const ModelConfig* loading = nullptr;  // being loaded (hosts that start now get it)
    std::map<int64_t, VersionState> versions;
    std::string reason;  // why the last load or unload left it as it is
  };

  Status LoadLocked(const std::string& name, int depth) ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // `name` is served from `folder` (an upload's) from now on, or from the
  // repository when "": the upload folder it was served from before goes.
  void ServeFrom(const std::string& name, const std::string& folder) ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // Loads `names` (what ensemble `name` names: its members, or its overload
  // rungs, per `what`) that are not served yet; an error names `name`.
  Status LoadFirst(const std::string& name, int depth, const StatusOr<std::vector<std::string>>& names,
                   const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  Status LoadTorchScript(const std::string& name, std::unique_ptr<ModelConfig> fresh)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // A load of `fresh` that failed with `failed` is undone: the versions it
  // added leave the state (those `ready` before stay), what it `loaded` on
  // the hosts is unloaded, and the failure is recorded.
  void AbandonLoad(const std::string& name, const ModelConfig& fresh, const std::vector<int64_t>& ready,
                   const std::vector<int64_t>& loaded, const Status& failed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  Status UnloadLocked(const std::string& name, bool unload_dependents) ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // Takes `versions` of `model` out of routing, waits for their requests,
  // unloads them from `hosts`. With `hosts_only` (the model left those
  // hosts, the versions serve on) routing is left alone.
  void Retire(const ModelConfig& model, const std::vector<int64_t>& versions, const std::vector<std::string>& hosts,
              bool hosts_only = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // Loads version `version` of `model` on each of its live hosts; on an
  // error unloads it from those that took it.
  Status LoadOnHosts(const ModelConfig& model, int64_t version) ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  void RecordFailure(const std::string& name, const Status& error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  const ModelConfig* Keep(std::unique_ptr<ModelConfig> config) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, ModelConfig> ServedConfigs() const;
  bool IsModelFolder(const std::string& name) const;
  void PollLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  void WorkerLoop();
  void Submit(std::function<void(bool stopping)> job);

  const ServerConfig* config_;
  std::chrono::milliseconds control_timeout_;
  std::function<void(const ModelConfig&)> on_served_;  // set before any load
  std::atomic<uint64_t> load_failures_{0};
  std::atomic<uint64_t> generation_{0};

  Mutex control_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::map<std::string, HostSupervisor*> hosts_ ABSL_GUARDED_BY(control_mu_);
  InFlightCount in_flight_ ABSL_GUARDED_BY(control_mu_);
  bool polling_ ABSL_GUARDED_BY(control_mu_) = false;
  std::map<std::string, std::string> failed_attempt_ ABSL_GUARDED_BY(control_mu_);  // by model: LoadAttempt
  std::map<std::string, int64_t> key_generations_ ABSL_GUARDED_BY(control_mu_);     // by model: host keys made
  ModelUploads uploads_ ABSL_GUARDED_BY(control_mu_);
  std::map<std::string, std::string> upload_folders_ ABSL_GUARDED_BY(control_mu_);  // by model: served from

  mutable Mutex mu_;
  std::map<std::string, ModelState> models_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<ModelConfig>> kept_ ABSL_GUARDED_BY(mu_);  // every config ever served

  Mutex worker_mu_;
  CondVar worker_cv_;
  bool stopping_ ABSL_GUARDED_BY(worker_mu_) = false;
  std::deque<std::function<void(bool stopping)>> jobs_ ABSL_GUARDED_BY(worker_mu_);
  std::thread worker_;
};

}  // namespace es
