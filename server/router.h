// Router: the whole ensemble-server process, assembled: the loaded config,
// one HostSupervisor per configured host, the InferenceCore, and the gRPC
// server with the KServe v2 and health services.
//
// Start() refuses to return a router unless every host became ready, so a
// server that prints its port is a server that can answer. Shutdown() drains:
// readiness goes false, new calls are refused, in-flight calls finish (bounded
// by the drain timeout), then the hosts are stopped and reaped. If the drain
// timed out (a forward that never returns), the hosts are stopped first, so
// the calls they held are answered and gRPC's shutdown can complete: the
// whole takes at most the drain timeout plus each host's stop grace. Memfd
// channels leave nothing behind in /dev/shm.
//
// HTTP/REST: unless turned off, an HttpServer serves the KServe v2 REST API
// (http_routes.h) on the same handlers, InferCalls and AuthPolicy as gRPC;
// it starts after gRPC and drains with it (new inference calls refused,
// in-flight ones answered, then closed).
//
// Metrics: unless turned off, a MetricsEndpoint serves /metrics (request
// figures from RequestMetrics, per-host figures from HostMetrics) on the
// metrics port; it starts before gRPC and stops after the hosts.
//
// Models: the ModelRepository decides what is served and what each host
// holds (model_control_mode none, explicit or poll); the hosts load it as
// they start and as it changes.
//
// Thread safety: Start/Shutdown from one thread (main).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "config/server_config.h"
#include "server/security/auth_policy.h"
#include "server/grpc/experiment_service.h"
#include "server/grpc/grpc_service.h"
#include "server/hosts/host_metrics.h"
#include "server/hosts/host_supervisor.h"
#include "server/http/http_routes.h"
#include "server/http/http_server.h"
#include "server/experiment/experiments.h"
#include "server/kserve/infer_calls.h"
#include "server/core/inference_core.h"
#include "server/ensemble/ensemble_runner.h"
#include "server/metrics/metrics_endpoint.h"
#include "server/repository/model_repository.h"
#include "server/core/model_statistics.h"
#include "server/kserve/request_metrics.h"
#include "server/shm/shm_registry.h"
#include "server/security/tls_files.h"

namespace es {

class OtlpExporter;  // server/tracing/otlp_exporter.h

struct RouterOptions {
  std::string config_path;
  std::optional<int> grpc_port;       // overrides the config
  std::optional<std::string> listen;  // overrides the config's listen_address
  std::string host_binary;            // ensemble-model-host; default: beside this binary
  std::optional<int> metrics_port;    // overrides the config; 0 picks a free port
  bool metrics = true;                // false: no /metrics endpoint, nothing recorded
  std::optional<std::string> log_level;   // overrides the config; set before the hosts start
  std::optional<std::string> log_format;  // likewise: default, ISO8601 or json
  std::optional<std::string> log_file;    // likewise: standard error is appended to it
  // --trace-*: Triton's trace settings at start, each over the config's
  // `trace:` (server/core/request_trace.h).
  struct TraceFlags {
    std::optional<std::string> mode, file, url, level;
    std::optional<uint64_t> rate, log_frequency;
    std::optional<int64_t> count;
  } trace;
  std::optional<ModelControlMode> model_control_mode;  // overrides the config
  std::vector<std::string> load_models;                // explicit mode: loaded at start
  std::optional<int64_t> repository_poll_secs;         // overrides the config
  // HTTP/REST front end (server/http/http_server.h): the port overrides the
  // config's http_port (0 picks a free one); `http` false (--no-http) or the
  // config's http_enabled false serves none.
  std::optional<int> http_port;
  bool http = true;
  std::optional<std::chrono::milliseconds> http_request_timeout;  // overrides limits.http_request_timeout_ms
};

class Router {
 public:
  static StatusOr<std::unique_ptr<Router>> Start(const RouterOptions& options);
  ~Router();

  const ServerConfig& config() const { return config_; }
  size_t served_model_count() const { return repository_->Loaded().size(); }
  std::string grpc_address() const;
  // "HOST:PORT" of the HTTP/REST front end, or "" when it is off.
  std::string http_address() const;
  // "HOST:PORT" of /metrics, or "" when metrics are off.
  std::string metrics_address() const;
  void Shutdown();

 private:
  Router() = default;
  Status LoadConfig(const RouterOptions& options);
  // The config's trace settings with the flags over them; an error when
  // the level is TIMESTAMPS with nowhere to go (no file, or no url).
  StatusOr<TraceSettings> StartTraceSettings(const RouterOptions& options) const;
  // The tracer, and in mode opentelemetry its exporter (a bad URL is an
  // error here, before the hosts start).
  Status StartTracer(const RouterOptions& options);
  // The flags and config's log level, format and file, before the hosts start.
  Status SetUpLogging(const RouterOptions& options);
  // A log settings call's: the router's logger, then every host's.
  void ApplyLogSettingsEverywhere(const LogSettings& settings);
  // The models served at start (explicit mode: the --load-model ones).
  std::map<std::string, ModelConfig> StartupModels() const;
  Status StartHosts(const RouterOptions& options);
  // Where /metrics listens: the config's metrics_address, else the listen address.
  std::string MetricsHost(const RouterOptions& options) const;
  // Every listener's address and port can be bound (before the hosts start).
  Status CheckPorts(const RouterOptions& options) const;
  Status StartMetrics(const RouterOptions& options);
  Status StartGrpc(const RouterOptions& options);
  Status StartHttp(const RouterOptions& options);  // after StartGrpc: uses its services
  // Stops every host (idempotent): their in-flight calls fail.
  void StopHosts();

  ServerConfig config_;
  std::vector<std::unique_ptr<HostSupervisor>> hosts_;
  std::unique_ptr<ModelRepository> repository_;
  // Before core_, so destroyed after it: the core's member calls in flight
  // hold the runner's admission counts until the core is gone.
  std::unique_ptr<EnsembleRunner> ensembles_;
  // Declared before the core and the calls, which use them: destroyed after.
  std::unique_ptr<OtlpExporter> otlp_;  // mode opentelemetry; outlives the tracer that calls it
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<ResponseCache> cache_;  // null when response_cache.size_bytes is 0
  std::unique_ptr<InferenceCore> core_;
  // Shadow and canary runs of models with an experiment (they run on the core).
  std::unique_ptr<Experiments> experiments_;
  std::unique_ptr<es::ModelStatistics> stats_;
  std::shared_ptr<RequestMetrics> request_metrics_;  // null when metrics are off
  std::shared_ptr<HostMetrics> host_metrics_;
  std::unique_ptr<MetricsEndpoint> metrics_;
  std::unique_ptr<AuthPolicy> auth_;  // every front end's token check (allows all when auth is off)
  // tls: PEM files read and checked once, before any host starts; gRPC and
  // HTTP serve TLS with them. Empty when TLS is off.
  std::optional<TlsFiles> tls_;
  // System shared-memory regions, every front end's (declared before the
  // users so it outlives them).
  std::unique_ptr<SharedMemoryRegistry> shm_;
  std::unique_ptr<InferCalls> calls_;  // every front end's inference calls
  std::unique_ptr<KServeAnswers> answers_;  // both front ends' non-inference answers
  std::unique_ptr<LogSettingsReply> log_settings_;  // both front ends' logging extension
  std::unique_ptr<TraceSettingsReply> trace_settings_;  // both front ends' trace extension
  std::unique_ptr<KServeService> kserve_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<ExperimentGrpcService> experiment_service_;  // our extension (proto/experiments.proto)
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpRoutes> http_routes_;
  std::unique_ptr<HttpServer> http_;  // null when HTTP is off
  std::string listen_address_;
  int grpc_port_ = 0;
  bool shut_down_ = false;
  bool hosts_stopped_ = false;
};

}  // namespace es
