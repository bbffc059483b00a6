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

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "config/server_config.h"
#include "server/grpc_service.h"
#include "server/host_metrics.h"
#include "server/host_supervisor.h"
#include "server/inference_core.h"
#include "server/metrics_endpoint.h"
#include "server/model_repository.h"
#include "server/model_statistics.h"
#include "server/request_metrics.h"

namespace es {

struct RouterOptions {
  std::string config_path;
  std::optional<int> grpc_port;       // overrides the config
  std::optional<std::string> listen;  // overrides the config's listen_address
  std::string host_binary;            // ensemble-model-host; default: beside this binary
  std::optional<int> metrics_port;    // overrides the config; 0 picks a free port
  bool metrics = true;                // false: no /metrics endpoint, nothing recorded
  std::optional<std::string> log_level;  // overrides the config; set before the hosts start
  std::optional<ModelControlMode> model_control_mode;  // overrides the config
  std::vector<std::string> load_models;                // explicit mode: loaded at start
  std::optional<int64_t> repository_poll_secs;         // overrides the config
};

class Router {
 public:
  static StatusOr<std::unique_ptr<Router>> Start(const RouterOptions& options);
  ~Router();

  const ServerConfig& config() const { return config_; }
  size_t served_model_count() const { return repository_->Loaded().size(); }
  std::string grpc_address() const;
  // "HOST:PORT" of /metrics, or "" when metrics are off.
  std::string metrics_address() const;
  void Shutdown();

 private:
  Router() = default;
  Status LoadConfig(const RouterOptions& options);
  // The models served at start (explicit mode: the --load-model ones).
  std::map<std::string, ModelConfig> StartupModels() const;
  Status StartHosts(const RouterOptions& options);
  Status StartMetrics(const RouterOptions& options);
  Status StartGrpc(const RouterOptions& options);
  // Stops every host (idempotent): their in-flight calls fail.
  void StopHosts();

  ServerConfig config_;
  std::vector<std::unique_ptr<HostSupervisor>> hosts_;
  std::unique_ptr<ModelRepository> repository_;
  std::unique_ptr<InferenceCore> core_;
  std::unique_ptr<es::ModelStatistics> stats_;
  std::shared_ptr<RequestMetrics> request_metrics_;  // null when metrics are off
  std::shared_ptr<HostMetrics> host_metrics_;
  std::unique_ptr<MetricsEndpoint> metrics_;
  std::unique_ptr<KServeService> kserve_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  std::string listen_address_;
  int grpc_port_ = 0;
  bool shut_down_ = false;
  bool hosts_stopped_ = false;
};

}  // namespace es
