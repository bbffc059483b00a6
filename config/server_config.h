// ServerConfig: the router's YAML config (e.g. config/demo.yaml) and the model
// repository it names, loaded and validated as one unit.
//
// Every error names the file, the line and the field, e.g.
//   "config/demo.yaml:12: hosts[1].device: unknown device 'gpu0' (expected cpu or cuda:N)"
// and the server refuses to start on any error: nothing is guessed.
//
// Thread safety: LoadServerConfig() is a pure function; the result is a value
// shared read-only by all threads afterwards.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "common/status.h"

namespace es {

struct HostConfig {
  std::string name;               // unique; models name it in their `hosts:`
  std::string device = "cpu";     // "cpu" or "cuda:N"
  std::vector<int> cpu_affinity;  // CPUs the host process is pinned to; empty = no pinning
  int threads = 1;                // LibTorch intra-op threads
  int executors = 1;              // executor threads taking requests from the channel
  // The host program; empty = ensemble-model-host beside ensemble-server (or
  // the server's --host-binary). For custom builds and fault-injection tests.
  std::string binary;
};

struct Limits {
  int64_t max_request_bytes = 64 << 20;     // larger requests get RESOURCE_EXHAUSTED
  int64_t arena_bytes = 256 << 20;          // tensor arena per host channel
  int64_t max_output_bytes = 16 << 20;      // reservation for outputs with variable dims
  int64_t host_startup_timeout_ms = 60000;  // spawn -> ready
  int64_t heartbeat_timeout_ms = 5000;      // a host silent this long is hung
  int64_t drain_timeout_ms = 10000;         // SIGTERM: finish in-flight calls within this
  // Polls (CPU pauses) a waiting side of a host channel makes before it
  // sleeps on its futex; see ipc::WaitPolicy for why the default is small.
  int64_t channel_spin_polls = 100;
  // Per-request execution limit on a host, for models that set no
  // max_compute_ms of their own: a forward running longer marks its host
  // hung; the host is killed and restarted (see HostSupervisor).
  int64_t max_compute_ms = 60000;
  // Calls the gRPC front end holds at once (decoded, queued, computing or
  // waiting for the client to read the answer); more get RESOURCE_EXHAUSTED
  // at once. With max_request_bytes this bounds what clients can make the
  // router hold, including clients that never read their responses.
  int64_t max_inflight_calls = 4096;
  // gRPC server options (see docs/configuration.md for why these defaults):
  int64_t grpc_memory_quota_bytes = int64_t{2} << 30;  // gRPC's ResourceQuota for buffers
  int64_t grpc_max_concurrent_streams = 256;           // per connection
  int64_t grpc_keepalive_time_ms = 60000;              // ping an idle connection this often
  int64_t grpc_keepalive_timeout_ms = 20000;           // close it if the ping is not acked
  int64_t grpc_max_connection_age_ms = 0;              // 0 = connections live as long as clients want
  int64_t grpc_max_connection_age_grace_ms = 30000;    // in-flight calls finish after GOAWAY
  // HTTP/REST front end (see server/http/http_server.h for what each bounds):
  int64_t http_max_header_bytes = 16 << 10;   // larger request headers: 431, closed
  int64_t http_request_timeout_ms = 30000;    // a whole request must arrive, and its answer be taken, within this
  int64_t http_idle_timeout_ms = 60000;       // a keep-alive connection idle this long is closed
  int64_t http_max_connections = 512;         // more are closed at once
};

// How the model set may change while the server runs (Triton's modes):
//   none      every model of the repository is loaded at start; the set is
//             fixed (RepositoryModelLoad/Unload are refused).
//   explicit  only the models named at start (--load-model) are loaded;
//             RepositoryModelLoad/Unload change the set.
//   poll      as none at start, then the repository is rescanned every
//             repository_poll_secs: new models and version folders are
//             loaded, removed ones unloaded, changed config.yaml applied.
enum class ModelControlMode { kNone, kExplicit, kPoll };
const char* ModelControlModeName(ModelControlMode mode);

// TLS for the gRPC and HTTP front ends (`tls:` in the server config).
// Paths are absolute after loading (relative ones are taken from the config
// file's folder). Empty cert = no TLS.
struct TlsConfig {
  std::string cert;       // PEM certificate chain the server presents
  std::string key;        // PEM private key of `cert`
  std::string client_ca;  // PEM CA bundle; set = clients must present a certificate it signed (mTLS)
  bool enabled() const { return !cert.empty(); }
};

// Bearer-token authentication (`auth:` in the server config); see
// server/security/auth_policy.h for the roles and what each may call.
struct AuthConfig {
  std::string tokens_file;    // empty = no authentication
  bool open_health = true;    // health (live/ready) answers without a token, for probes
  bool enabled() const { return !tokens_file.empty(); }
};

struct ServerConfig {
  std::string path;            // the config file itself
  std::string repository;      // absolute path of the model repository
  ModelControlMode model_control_mode = ModelControlMode::kNone;
  int64_t repository_poll_secs = 15;  // poll mode: seconds between rescans
  // Where models uploaded through the load API (Triton's `config` and
  // `file:<path>` load parameters, explicit mode) are written: absolute,
  // never inside `repository`. "" = a private temporary folder the server
  // makes at the first upload and removes at exit.
  std::string model_upload_dir;
  std::string listen_address = "127.0.0.1";
  int grpc_port = 8001;
  int metrics_port = 8002;
  int http_port = 8000;
  bool http_enabled = true;     // false: no HTTP/REST front end (--no-http)
  // /metrics listens here when set (e.g. "0.0.0.0" while inference stays on
  // listen_address); empty = listen_address.
  std::string metrics_address;
  TlsConfig tls;
  AuthConfig auth;
  std::string log_level = "info";
  std::string log_format = "default";  // default, ISO8601 or json (common/log_setup.h)
  std::string log_file;                // "": standard error; else appended to (absolute)
  // `trace: {mode, file, url, level, rate, count, log_frequency}`: Triton's
  // trace settings at start (docs/tracing.md; the --trace-* flags override).
  struct Trace {
    std::string mode = "triton";  // or "opentelemetry"
    std::string file;  // mode triton: absolute ("" = no trace file)
    std::string url;   // mode opentelemetry: the collector's OTLP/HTTP URL
    std::string level = "OFF";
    int64_t rate = 1000;
    int64_t count = -1;
    int64_t log_frequency = 0;
  } trace;
  // `response_cache: {size_bytes: N}`: the response cache's bound (0 = no
  // cache; a model enabling it is then an error).
  int64_t response_cache_bytes = 0;
  std::vector<HostConfig> hosts;
  Limits limits;
  std::map<std::string, ModelConfig> models;  // by name: the loaded repository

  const HostConfig* FindHost(const std::string& name) const;
  const ModelConfig* FindModel(const std::string& name) const;
};

// Loads the server config at `path`, then the repository it names (relative
// paths are relative to the config file's folder), and cross-checks them:
// every model's hosts exist, every ensemble member exists, is not an ensemble,
// and has inputs/outputs compatible with the ensemble's.
// With `with_repository` false only the server config is read (models
// stays empty): explicit mode loads its models one by one.
StatusOr<ServerConfig> LoadServerConfig(const std::string& path, bool with_repository = true);

// Loads one model folder `<config.repository>/<name>` as LoadServerConfig
// would at start: parsed, its version folders scanned, placed on the
// config's hosts, and, for an ensemble, checked against `members` (the
// models it may name, by name: its members and overload rungs). For loading and reloading while serving.
StatusOr<ModelConfig> LoadRepositoryModel(const ServerConfig& config, const std::string& name,
                                          const std::map<std::string, ModelConfig>& members);

// A model uploaded through the load API, loaded as LoadRepositoryModel
// loads one of the repository: its config.yaml in `folder` (whose name is
// the model's), its version folders in `files_folder`: `folder` itself when
// the files came with the upload, or the repository's folder of the model
// when only a config did (Triton's config override). `root` is the upload
// folder every file must resolve inside. Torchscript models only: an
// ensemble's members are named in its config, which an upload cannot carry.
StatusOr<ModelConfig> LoadUploadedModel(const ServerConfig& config, const std::string& folder,
                                        const std::string& files_folder, const std::string& root);

// The members a model folder's config.yaml names when it is an ensemble
// (empty for a torchscript model), read without checking them.
StatusOr<std::vector<std::string>> RepositoryEnsembleMembers(const ServerConfig& config, const std::string& name);
// The other models an ensemble's overload ladder names (its rungs after
// itself; empty without a ladder), read without checking them: they are
// loaded before it, as its members are.
StatusOr<std::vector<std::string>> RepositoryLadderRungs(const ServerConfig& config, const std::string& name);

// The model folders of a repository: its sub-folders, sorted (hidden ones
// left out), whether or not they hold a valid model.
StatusOr<std::vector<std::string>> RepositoryModelNames(const std::string& repo_dir);

// Loads just a model repository (every sub-folder with a config.yaml).
StatusOr<std::map<std::string, ModelConfig>> LoadRepository(const std::string& repo_dir);

}  // namespace es
