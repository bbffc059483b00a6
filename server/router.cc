#include "server/router.h"

#include <climits>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "model_host/launcher.h"

namespace es {
namespace {

constexpr std::chrono::milliseconds kShutdownGrace{100};

}  // namespace

StatusOr<std::unique_ptr<Router>> Router::Start(const RouterOptions& options) {
  std::unique_ptr<Router> router(new Router());
  auto config = LoadServerConfig(options.config_path);
  if (!config.ok()) return config.status();
  router->config_ = std::move(config).value();
  // Before the hosts start: they inherit the router's level.
  spdlog::set_level(spdlog::level::from_str(options.log_level.value_or(router->config_.log_level)));
  if (Status s = router->StartHosts(options); !s.ok()) {
    router->Shutdown();
    return s;
  }
  if (Status s = router->StartMetrics(options); !s.ok()) {
    router->Shutdown();
    return s;
  }
  if (Status s = router->StartGrpc(options); !s.ok()) {
    router->Shutdown();
    return s;
  }
  return router;
}

Router::~Router() { Shutdown(); }

Status Router::StartHosts(const RouterOptions& options) {
  std::string binary = options.host_binary.empty() ? ExecutableDir() + "/ensemble-model-host" : options.host_binary;
  if (!std::filesystem::exists(binary)) {
    return Status::FailedPrecondition("model host binary not found: " + binary);
  }
  // Hosts re-read the config; give them a path that works from any cwd.
  const std::string config_path = std::filesystem::absolute(options.config_path).string();
  std::map<std::string, HostSupervisor*> by_name;
  for (const HostConfig& host : config_.hosts) {
    hosts_.push_back(std::make_unique<HostSupervisor>(host, config_.limits, config_path, binary));
    by_name[host.name] = hosts_.back().get();
  }
  for (auto& h : hosts_) h->Start();  // all hosts load their models in parallel
  for (auto& h : hosts_) {
    if (!h->WaitFirstStart()) return Status::Unavailable(h->last_error());
  }
  stats_ = std::make_unique<es::ModelStatistics>(config_.models);
  core_ = std::make_unique<InferenceCore>(&config_, by_name, stats_.get());
  return Status::Ok();
}

Status Router::StartMetrics(const RouterOptions& options) {
  if (!options.metrics) return Status::Ok();
  request_metrics_ = std::make_shared<RequestMetrics>(config_.models);
  std::vector<const HostSupervisor*> hosts;
  for (const auto& h : hosts_) hosts.push_back(h.get());
  host_metrics_ = std::make_shared<HostMetrics>(std::move(hosts));
  auto endpoint = MetricsEndpoint::Start(options.listen.value_or(config_.listen_address),
                                         options.metrics_port.value_or(config_.metrics_port),
                                         {request_metrics_, host_metrics_});
  if (!endpoint.ok()) return endpoint.status();
  metrics_ = std::move(endpoint).value();
  return Status::Ok();
}

std::string Router::metrics_address() const { return metrics_ ? metrics_->address() : ""; }

Status Router::StartGrpc(const RouterOptions& options) {
  kserve_ = std::make_unique<KServeService>(&config_, core_.get(), stats_.get(), request_metrics_.get());
  health_ = std::make_unique<HealthService>(kserve_.get());
  listen_address_ = options.listen.value_or(config_.listen_address);
  const int port = options.grpc_port.value_or(config_.grpc_port);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen_address_ + ":" + std::to_string(port), grpc::InsecureServerCredentials(),
                           &grpc_port_);
  // Let slightly oversized requests through so the router can answer them
  // with its own RESOURCE_EXHAUSTED that names the model and the limit.
  const int64_t max_message = std::min<int64_t>(INT_MAX, config_.limits.max_request_bytes * 2 + (1 << 20));
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_message));
  builder.SetMaxSendMessageSize(INT_MAX);
  builder.RegisterService(kserve_.get());
  builder.RegisterService(health_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || grpc_port_ == 0) {
    return Status::Unavailable("cannot listen for gRPC on " + listen_address_ + ":" + std::to_string(port));
  }
  return Status::Ok();
}

std::string Router::grpc_address() const { return listen_address_ + ":" + std::to_string(grpc_port_); }

void Router::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (kserve_) kserve_->SetAcceptingRequests(false);
  if (server_) {
    // New calls are refused from here on; wait for the ones in flight, then
    // close. gRPC's own Shutdown(deadline) would also wait for idle client
    // connections to go away, which can take the whole drain timeout.
    const auto drain = std::chrono::milliseconds(config_.limits.drain_timeout_ms);
    spdlog::info("draining: finishing in-flight calls (at most {} ms)", drain.count());
    if (!kserve_->WaitForInFlight(std::chrono::steady_clock::now() + drain)) {
      spdlog::warn("drain timeout: cancelling the calls still in flight");
    }
    // A short grace, not the drain timeout: calls gRPC accepted just now
    // still reach the handler and get its UNAVAILABLE ("shutting down")
    // instead of a bare CANCELLED; the grace bounds the wait for idle
    // connections.
    server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
    server_->Wait();
  }
  for (auto& h : hosts_) h->Stop();
  if (!hosts_.empty()) spdlog::info("all hosts stopped");
  metrics_.reset();  // scrapes were answered through the drain; now the endpoint goes
}

}  // namespace es
