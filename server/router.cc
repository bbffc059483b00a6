#include "server/router.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <thread>

#include <grpcpp/resource_quota.h>
#include <spdlog/spdlog.h>

#include "common/launcher.h"
#include "server/port_check.h"
#include "server/core/cache_metrics.h"
#include "server/experiment/experiment_metrics.h"
#include "server/core/trace_metrics.h"
#include "server/repository/repository_metrics.h"
#include "server/security/tls_files.h"
#include "server/tracing/otlp_exporter.h"

namespace es {
namespace {

constexpr std::chrono::milliseconds kShutdownGrace{100};
// After the drain, new calls are still refused by the handler this long
// before gRPC closes: a closed-loop client whose call was drained sends its
// next at once, and gets the handler's UNAVAILABLE ("shutting down", which
// clients retry elsewhere) instead of meeting gRPC's close, which cancels a
// call it has not yet handed to a handler (CANCELLED).
constexpr std::chrono::milliseconds kRefuseBeforeClose{50};
constexpr std::chrono::milliseconds kHttpWriteGrace{1000};

}  // namespace

StatusOr<std::unique_ptr<Router>> Router::Start(const RouterOptions& options) {
  std::unique_ptr<Router> router(new Router());
  ES_RETURN_IF_ERROR(router->LoadConfig(options));
  // Before the hosts start: they inherit the router's settings and its
  // standard error.
  ES_RETURN_IF_ERROR(router->SetUpLogging(options));
  // TLS files are checked before any host starts: a bad one fails at once.
  if (router->config_.tls.enabled()) {
    ES_ASSIGN_OR_RETURN(TlsFiles tls, LoadTlsFiles(router->config_.tls));
    router->tls_ = std::move(tls);
  }
  // Ports too: a port in use is said in one line before the hosts spend
  // their start-up, not after it as a raw gRPC or civetweb log line.
  ES_RETURN_IF_ERROR(router->CheckPorts(options));
  ES_RETURN_IF_ERROR(router->StartTracer(options));
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
  if (Status s = router->StartHttp(options); !s.ok()) {
    router->Shutdown();
    return s;
  }
  return router;
}

Router::~Router() { Shutdown(); }

Status Router::SetUpLogging(const RouterOptions& options) {
  ES_ASSIGN_OR_RETURN(LogSettings settings, SettingsForLevel(options.log_level.value_or(config_.log_level)));
  ES_ASSIGN_OR_RETURN(settings.format, ParseLogFormat(options.log_format.value_or(config_.log_format)));
  const std::string file = options.log_file.value_or(config_.log_file);
  if (!file.empty()) ES_RETURN_IF_ERROR(RedirectStandardError(file));
  ApplyLogSettings(settings);
  return Status::Ok();
}

StatusOr<TraceSettings> Router::StartTraceSettings(const RouterOptions& options) const {
  const ServerConfig::Trace& config = config_.trace;
  TraceSettings s;
  s.mode = options.trace.mode.value_or(config.mode);
  s.url = options.trace.url.value_or(config.url);
  s.file = options.trace.file.value_or(config.file);
  s.timestamps = options.trace.level.value_or(config.level) == "TIMESTAMPS";
  s.rate = options.trace.rate.value_or(static_cast<uint64_t>(config.rate));
  s.count = options.trace.count.value_or(config.count);
  s.log_frequency = options.trace.log_frequency.value_or(static_cast<uint64_t>(config.log_frequency));
  if (s.mode != "triton" && s.mode != "opentelemetry") {
    return Status::InvalidArgument("unknown trace mode '" + s.mode + "' (triton or opentelemetry)");
  }
  if (s.timestamps && s.mode == "triton" && s.file.empty()) {
    return Status::InvalidArgument("trace level TIMESTAMPS needs a trace file (--trace-file, or trace.file in " +
                                   config_.path + ")");
  }
  if (s.timestamps && s.mode == "opentelemetry" && s.url.empty()) {
    return Status::InvalidArgument(
        "trace level TIMESTAMPS in mode opentelemetry needs the collector's URL (--trace-url, or trace.url in " +
        config_.path + ")");
  }
  return s;
}

Status Router::StartTracer(const RouterOptions& options) {
  ES_ASSIGN_OR_RETURN(TraceSettings settings, StartTraceSettings(options));
  // Said, not refused: a config may carry both, and switch modes by a flag.
  if (settings.mode == "triton" && !settings.url.empty()) {
    spdlog::warn("trace url {} is not used: trace mode is triton (the trace file); --trace-mode opentelemetry "
                 "sends spans to it",
                 settings.url);
  }
  if (settings.mode == "opentelemetry" && !settings.file.empty()) {
    spdlog::warn("trace file {} is not written: trace mode is opentelemetry (spans to the trace url)", settings.file);
  }
  if (settings.mode == "opentelemetry" && !settings.url.empty()) {
    StatusOr<OtlpEndpoint> endpoint = ParseOtlpUrl(settings.url);
    if (!endpoint.ok()) return endpoint.status();
    SpanResources resources;
    char machine[256] = {};
    if (gethostname(machine, sizeof machine - 1) == 0) resources.machine = machine;
    resources.router_pid = getpid();
    for (const HostConfig& host : config_.hosts) resources.devices[host.name] = host.device;
    otlp_ = std::make_unique<OtlpExporter>(std::move(endpoint).value(), std::move(resources));
    spdlog::info("traces go to {} (OTLP/HTTP)", otlp_->endpoint().url());
  }
  tracer_ = std::make_unique<Tracer>(std::move(settings), otlp_.get());
  return Status::Ok();
}

void Router::ApplyLogSettingsEverywhere(const LogSettings& settings) {
  ApplyLogSettings(settings);
  for (const std::unique_ptr<HostSupervisor>& host : hosts_) host->SendLogSettings(settings);
  spdlog::info("log settings: {}", EncodeLogSettings(settings));
}

// The server config, the flags over it, and (except in explicit mode,
// which loads model by model) the whole repository, checked.
Status Router::LoadConfig(const RouterOptions& options) {
  ES_ASSIGN_OR_RETURN(config_, LoadServerConfig(options.config_path, /*with_repository=*/false));
  const ModelControlMode mode = options.model_control_mode.value_or(config_.model_control_mode);
  if (mode != ModelControlMode::kExplicit) {
    ES_ASSIGN_OR_RETURN(config_, LoadServerConfig(options.config_path));
  }
  config_.model_control_mode = mode;
  ES_ASSIGN_OR_RETURN(auth_, AuthPolicy::Load(config_.auth));
  if (options.repository_poll_secs) config_.repository_poll_secs = *options.repository_poll_secs;
  repository_ = std::make_unique<ModelRepository>(&config_);
  // Models loaded while the server runs get their statistics and metrics
  // (the start-up set has them from the start: StartHosts, StartMetrics).
  repository_->SetOnServed([this](const ModelConfig& model) {
    if (stats_) stats_->Track(model);
    // A reload may replace a version's model.pt in place (same key): its
    // kept answers go.
    if (cache_) cache_->EraseModel(model.name);
    if (request_metrics_) request_metrics_->Track(model);
  });
  return repository_->Begin(options.load_models);
}

std::map<std::string, ModelConfig> Router::StartupModels() const {
  std::map<std::string, ModelConfig> models;
  for (const ModelConfig* model : repository_->Loaded()) models.emplace(model->name, *model);
  return models;
}

Status Router::StartHosts(const RouterOptions& options) {
  const std::string default_binary =
      options.host_binary.empty() ? ExecutableDir() + "/ensemble-model-host" : options.host_binary;
  for (const HostConfig& host : config_.hosts) {
    const std::string& binary = host.binary.empty() ? default_binary : host.binary;
    if (!std::filesystem::exists(binary)) {
      return Status::FailedPrecondition("host '" + host.name + "': model host binary not found: " + binary);
    }
  }
  std::map<std::string, HostSupervisor*> by_name;
  for (const HostConfig& host : config_.hosts) {
    // What the host holds is the router's decision, asked at each start of
    // the host: the served versions of the models placed on it.
    HostAssignment assignment{[this, name = host.name] { return repository_->AssignmentOf(name); },
                              [this] { return repository_->generation(); }};
    hosts_.push_back(std::make_unique<HostSupervisor>(host, config_.limits, std::move(assignment),
                                                      host.binary.empty() ? default_binary : host.binary));
    by_name[host.name] = hosts_.back().get();
  }
  for (auto& h : hosts_) h->Start();  // all hosts load their models in parallel
  for (auto& h : hosts_) {
    if (!h->WaitFirstStart()) return Status::Unavailable(h->last_error());
  }
  stats_ = std::make_unique<es::ModelStatistics>(StartupModels());
  if (config_.response_cache_bytes > 0) {
    cache_ = std::make_unique<ResponseCache>(static_cast<uint64_t>(config_.response_cache_bytes));
  }
  core_ = std::make_unique<InferenceCore>(&config_, repository_.get(), by_name, stats_.get(), cache_.get());
  core_->SetTracer(tracer_.get());
  experiments_ = std::make_unique<Experiments>(
      repository_.get(), [core = core_.get()](std::shared_ptr<const InferRequest> request, InferDone done) {
        core->Infer(std::move(request), std::move(done));
      });
  ensembles_ = std::make_unique<EnsembleRunner>(core_.get(), repository_.get());
  core_->SetCompositeRunner(ensembles_.get());
  repository_->Attach(by_name, [core = core_.get()](const std::string& model, int64_t version) {
    return core->InFlight(model, version);
  });
  repository_->StartWorker();
  if (config_.model_control_mode == ModelControlMode::kPoll) {
    spdlog::info("model control mode poll (rescanning every {} s)", config_.repository_poll_secs);
  } else {
    spdlog::info("model control mode {}", ModelControlModeName(config_.model_control_mode));
  }
  if (config_.model_control_mode == ModelControlMode::kExplicit && (auth_ == nullptr || !auth_->enabled())) {
    // A model is code (docs/security.md): said once, at start, where it matters.
    spdlog::warn("model control mode explicit without a tokens file: whoever reaches the server can load and "
                 "upload models, and a model runs in its host with this server's rights");
  }
  return Status::Ok();
}

std::string Router::MetricsHost(const RouterOptions& options) const {
  // metrics_address (config) puts /metrics on an address of its own, e.g.
  // scraped from outside while inference listens on loopback only.
  return !config_.metrics_address.empty() ? config_.metrics_address : options.listen.value_or(config_.listen_address);
}

Status Router::CheckPorts(const RouterOptions& options) const {
  const std::string listen = options.listen.value_or(config_.listen_address);
  ES_RETURN_IF_ERROR(CheckCanListen(listen, options.grpc_port.value_or(config_.grpc_port), "gRPC"));
  if (options.http && config_.http_enabled) {
    ES_RETURN_IF_ERROR(CheckCanListen(listen, options.http_port.value_or(config_.http_port), "HTTP"));
  }
  if (options.metrics) {
    ES_RETURN_IF_ERROR(
        CheckCanListen(MetricsHost(options), options.metrics_port.value_or(config_.metrics_port), "metrics"));
  }
  return Status::Ok();
}

Status Router::StartMetrics(const RouterOptions& options) {
  if (!options.metrics) return Status::Ok();
  request_metrics_ = std::make_shared<RequestMetrics>(StartupModels());
  std::vector<const HostSupervisor*> hosts;
  for (const auto& h : hosts_) hosts.push_back(h.get());
  host_metrics_ = std::make_shared<HostMetrics>(std::move(hosts));
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables = {
      request_metrics_, host_metrics_, std::make_shared<RepositoryMetrics>(repository_.get())};
  if (cache_) collectables.push_back(std::make_shared<CacheMetrics>(cache_.get()));
  if (tracer_) collectables.push_back(std::make_shared<TraceMetrics>(tracer_.get()));
  if (experiments_) collectables.push_back(std::make_shared<ExperimentMetrics>(experiments_.get()));
  ES_ASSIGN_OR_RETURN(metrics_, MetricsEndpoint::Start(MetricsHost(options),
                                                       options.metrics_port.value_or(config_.metrics_port),
                                                       collectables));
  return Status::Ok();
}

std::string Router::metrics_address() const { return metrics_ ? metrics_->address() : ""; }

Status Router::StartGrpc(const RouterOptions& options) {
  shm_ = std::make_unique<SharedMemoryRegistry>();
  calls_ = std::make_unique<InferCalls>(&config_, repository_.get(), core_.get(), stats_.get(),
                                        request_metrics_.get(), shm_.get());
  calls_->SetTracer(tracer_.get());
  calls_->SetExperiments(experiments_.get());
  answers_ = std::make_unique<KServeAnswers>(&config_, repository_.get(), core_.get(), stats_.get(), calls_.get(),
                                             shm_.get());
  log_settings_ =
      std::make_unique<LogSettingsReply>([this](const LogSettings& settings) { ApplyLogSettingsEverywhere(settings); });
  trace_settings_ = std::make_unique<TraceSettingsReply>(tracer_.get(), repository_.get());
  kserve_ = std::make_unique<KServeService>(answers_.get(), calls_.get(), auth_.get(), shm_.get(), log_settings_.get(),
                                            trace_settings_.get());
  health_ = std::make_unique<HealthService>(answers_.get(), auth_.get());
  experiment_service_ = std::make_unique<ExperimentGrpcService>(experiments_.get(), repository_.get(), auth_.get());
  listen_address_ = options.listen.value_or(config_.listen_address);
  const int port = options.grpc_port.value_or(config_.grpc_port);
  grpc::ServerBuilder builder;
  // TLS (and mTLS with client_ca) when configured, from the PEM files Start()
  // read and checked (server/security/tls_files.h).
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (tls_) {
    const TlsFiles* tls = &*tls_;
    grpc::SslServerCredentialsOptions ssl(tls->client_ca.empty()
                                              ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = tls->client_ca;
    ssl.pem_key_cert_pairs.push_back({tls->private_key, tls->cert_chain});
    credentials = grpc::SslServerCredentials(ssl);
    spdlog::info("gRPC serves TLS ({}; certificate {})",
                 tls->client_ca.empty() ? "no client certificates" : "clients need a certificate of tls.client_ca",
                 config_.tls.cert);
  }
  builder.AddListeningPort(listen_address_ + ":" + std::to_string(port), credentials, &grpc_port_);
  // Let slightly oversized requests through so the router can answer them
  // with its own RESOURCE_EXHAUSTED that names the model and the limit.
  const int64_t max_message = std::min<int64_t>(INT_MAX, config_.limits.max_request_bytes * 2 + (1 << 20));
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_message));
  builder.SetMaxSendMessageSize(INT_MAX);
  // What clients can make gRPC itself hold (the defaults and why they are
  // what they are: config/server_config.h, docs/configuration.md). The
  // router's own holdings are bounded by limits.max_inflight_calls (see
  // KServeService).
  const Limits& limits = config_.limits;
  const auto clamp_int = [](int64_t v) { return static_cast<int>(std::min<int64_t>(v, INT_MAX)); };
  // gRPC's buffers (reads, writes, per-connection and per-call state) across
  // all connections: under pressure gRPC shrinks its read buffers and stops
  // taking new work instead of growing without bound. Default 2 GiB: room
  // for a few dozen max_request_bytes (64 MiB) requests being read at once,
  // well under the memory of a machine that serves models.
  grpc::ResourceQuota quota("ensemble-serve");
  quota.Resize(static_cast<size_t>(limits.grpc_memory_quota_bytes));
  builder.SetResourceQuota(quota);
  // Calls one connection may have open at once; more wait in the client.
  // Default 256: more than one client's useful concurrency (gRPC's own
  // default is unbounded), and a 16th of max_inflight_calls (4096), so one
  // connection cannot take every place for itself.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, clamp_int(limits.grpc_max_concurrent_streams));
  // Keepalive: the server pings a connection idle this long and closes it if
  // the ping is not answered in the timeout, so a vanished peer (host gone,
  // cable pulled, half-open TCP) does not keep its calls and buffers forever.
  // Defaults 60 s and 20 s: a dead peer is found within 80 s for one small
  // ping a minute per idle connection (gRPC's default is 2 hours).
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, clamp_int(limits.grpc_keepalive_time_ms));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, clamp_int(limits.grpc_keepalive_timeout_ms));
  // The server's keepalive pings also go to connections without calls (the
  // ones most likely to be dead), and without a cap on pings between data.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Clients' own keepalive pings are welcome every 10 s or slower, with or
  // without calls (10 s is the smallest keepalive gRPC's clients allow;
  // gRPC's default of 5 minutes makes a client pinging every 30 s get a
  // GOAWAY "too_many_pings"); faster pings are strikes, and the default two
  // strikes close the connection, so pings cannot be used to keep it busy.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  // Off by default (0): clients keep their connections. When set, each
  // connection gets a GOAWAY at that age (gRPC adds +-10% jitter) and its
  // calls get the grace to finish; useful behind load balancers.
  if (limits.grpc_max_connection_age_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, clamp_int(limits.grpc_max_connection_age_ms));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               clamp_int(limits.grpc_max_connection_age_grace_ms));
  }
  builder.RegisterService(kserve_.get());
  builder.RegisterService(health_.get());
  builder.RegisterService(experiment_service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || grpc_port_ == 0) {
    // gRPC only logs why; ask the socket (taken since CheckPorts, most likely).
    ES_RETURN_IF_ERROR(CheckCanListen(listen_address_, port, "gRPC"));
    return Status::Unavailable("cannot listen for gRPC on " + listen_address_ + ":" + std::to_string(port));
  }
  return Status::Ok();
}

std::string Router::grpc_address() const { return listen_address_ + ":" + std::to_string(grpc_port_); }

Status Router::StartHttp(const RouterOptions& options) {
  if (!options.http || !config_.http_enabled) return Status::Ok();
  http_routes_ = std::make_unique<HttpRoutes>(answers_.get(), calls_.get(), auth_.get(), shm_.get(),
                                              log_settings_.get(), trace_settings_.get());
  http_routes_->SetExperiments(experiments_.get(), repository_.get());
  HttpServerOptions http;
  http.address = listen_address_;
  http.port = options.http_port.value_or(config_.http_port);
  // The tensors' bytes plus room for the JSON around them (binary tensors
  // cost nothing extra; JSON numbers take several times their binary size,
  // so large tensors should travel binary).
  const Limits& limits = config_.limits;
  http.max_body_bytes = static_cast<uint64_t>(limits.max_request_bytes) + (1u << 20);
  http.max_header_bytes = static_cast<uint32_t>(limits.http_max_header_bytes);
  http.request_timeout = std::chrono::milliseconds(limits.http_request_timeout_ms);
  if (options.http_request_timeout) http.request_timeout = *options.http_request_timeout;  // the flag wins
  http.idle_timeout = std::chrono::milliseconds(limits.http_idle_timeout_ms);
  http.max_connections = static_cast<size_t>(limits.http_max_connections);
  // Bodies being read or held, across connections: the same budget as gRPC's
  // buffers (limits.grpc_memory_quota_bytes).
  http.memory_budget_bytes = static_cast<uint64_t>(std::max<int64_t>(limits.grpc_memory_quota_bytes, 0));
  http.tls = tls_ ? &*tls_ : nullptr;
  ES_ASSIGN_OR_RETURN(http_, HttpServer::Start(http, [routes = http_routes_.get()](std::shared_ptr<HttpRequest> request,
                                                                                  HttpRoutes::Reply reply) {
                        routes->Handle(std::move(request), std::move(reply));
                      }));
  if (tls_) spdlog::info("HTTP serves TLS (certificate {})", config_.tls.cert);
  return Status::Ok();
}

std::string Router::http_address() const { return http_ ? http_->address() : ""; }

void Router::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (calls_) calls_->SetAccepting(false);
  if (repository_) repository_->RequestStop();  // no load, unload or poll starts from now on
  bool drained = true;
  if (server_) {
    // New calls are refused from here on; wait for the ones in flight, then
    // close. gRPC's own Shutdown(deadline) would also wait for idle client
    // connections to go away, which can take the whole drain timeout.
    const auto drain = std::chrono::milliseconds(config_.limits.drain_timeout_ms);
    spdlog::info("draining: finishing in-flight calls (at most {} ms)", drain.count());
    drained = calls_->WaitForInFlight(std::chrono::steady_clock::now() + drain);
    if (drained) std::this_thread::sleep_for(kRefuseBeforeClose);
  }
  if (!drained) {
    // gRPC's Shutdown waits for every call's handler to finish, and a call
    // whose forward hangs finishes only when its host is gone: stop the
    // hosts first (each gets its grace, then SIGKILL), which answers every
    // call still in flight with UNAVAILABLE.
    spdlog::warn("drain timeout: stopping the hosts and failing the calls still in flight");
    StopHosts();
  }
  if (server_) {
    // A short grace, not the drain timeout: calls gRPC accepted just now
    // still reach the handler and get its UNAVAILABLE ("shutting down")
    // instead of a bare CANCELLED; the grace bounds the wait for idle
    // connections.
    server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
    server_->Wait();
  }
  // The answers of the calls drained above are being written: a moment for
  // them, then every HTTP connection closes.
  if (http_) http_->Shutdown(kHttpWriteGrace);
  StopHosts();
  // After a drain timeout, requests can still sit in a batch queue (a long
  // max_queue_delay_us): answered now, while the front ends that wait for
  // them (and the call places they hold) still exist, not dropped unanswered
  // when the dispatchers go.
  if (core_) {
    if (const size_t failed = core_->FailQueued(Status::Unavailable("server is shutting down")); failed > 0) {
      spdlog::warn("shutdown: {} request(s) still queued answered UNAVAILABLE", failed);
    }
  }
  if (repository_) repository_->Stop();  // a load in progress ended with its hosts
  if (tracer_) tracer_->Stop();  // every answered request's trace written, the file's array closed
  metrics_.reset();  // scrapes were answered through the drain; now the endpoint goes
}

void Router::StopHosts() {
  if (hosts_stopped_) return;
  hosts_stopped_ = true;
  for (auto& h : hosts_) h->RequestStop();  // all at once: each grace runs in parallel
  for (auto& h : hosts_) h->Stop();
  if (!hosts_.empty()) spdlog::info("all hosts stopped");
}

}  // namespace es
