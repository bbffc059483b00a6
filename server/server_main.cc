// ensemble-server: the router. Spawns and supervises the model hosts named in
// the config and serves KServe v2 gRPC (and HTTP/REST) until SIGTERM/SIGINT,
// then drains and exits 0.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <optional>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "common/allocator.h"
#include "common/command_line.h"
#include "common/grpc_process.h"
#include "common/log_setup.h"
#include "server/core/request_trace.h"
#include "server/router.h"

namespace {

// Blocks the termination signals in every thread (threads inherit the mask),
// so that main alone receives them through sigwait().
sigset_t BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return set;
}

// One --trace-config value (Triton's flag) into `flags`; "" or what is wrong.
std::string ApplyTraceConfig(const std::string& value, es::RouterOptions::TraceFlags* flags) {
  auto parsed = es::ParseTraceConfigFlag(value);
  if (!parsed.ok()) return parsed.status().message();
  const std::string& name = parsed->first;  // not a structured binding: the lambdas below capture them
  const std::string& text = parsed->second;
  // A whole number from `low` to 2^40, else nullopt.
  auto number = [&](int64_t low) -> std::optional<int64_t> {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0 || end == text.c_str() || *end != '\0' || v < low || v > (int64_t{1} << 40)) return std::nullopt;
    return v;
  };
  auto not_number = [&](int64_t low) {
    return "'" + value + "': " + name + " must be a number from " + std::to_string(low) + " to 2^40";
  };
  if (name == "level") {
    if (text != "OFF" && text != "TIMESTAMPS") return "'" + value + "': level is OFF or TIMESTAMPS";
    flags->level = text;
  } else if (name == "mode") {
    if (text != "triton" && text != "opentelemetry") {
      return "'" + value + "': mode is triton or opentelemetry";
    }
    flags->mode = text;
  } else if (name == "file") {
    flags->file = text;
  } else if (name == "url") {
    flags->url = text;
  } else if (name == "rate") {
    const std::optional<int64_t> rate = number(1);
    if (!rate) return not_number(1);
    flags->rate = static_cast<uint64_t>(*rate);
  } else if (name == "count") {
    const std::optional<int64_t> count = number(-1);
    if (!count) return not_number(-1);
    flags->count = *count;
  } else if (name == "log_frequency") {
    const std::optional<int64_t> frequency = number(0);
    if (!frequency) return not_number(0);
    flags->log_frequency = static_cast<uint64_t>(*frequency);
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  es::ConfigureAllocator();  // before this program starts threads of its own
  es::TuneGrpcProcess();
  CLI::App app{"ensemble-server: KServe v2 gRPC and HTTP/REST inference router for TorchScript ensembles"};
  es::RouterOptions options;
  int grpc_port = -1;
  int metrics_port = -1;
  bool no_metrics = false;
  int http_port = -1;
  std::string log_level;
  app.add_option("--config", options.config_path, "server config (YAML), e.g. config/demo.yaml")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--grpc-port", grpc_port, "gRPC port (0 picks a free one; default: config, else 8001)")
      ->check(CLI::Range(0, 65535));
  auto* metrics_port_option =
      app.add_option("--metrics-port", metrics_port,
                     "Prometheus /metrics port (0 picks a free one and prints it; default: config, else 8002)")
          ->check(CLI::Range(0, 65535));
  app.add_flag("--no-metrics", no_metrics, "serve no /metrics endpoint and record no metrics")
      ->excludes(metrics_port_option);
  auto* http_port_option =
      app.add_option("--http-port", http_port,
                     "HTTP/REST (KServe v2) port (0 picks a free one and prints it; default: config, else 8000)")
          ->check(CLI::Range(0, 65535));
  bool no_http = false;
  app.add_flag("--no-http", no_http, "serve no HTTP/REST front end")->excludes(http_port_option);
  int http_timeout_secs = 0;
  app.add_option("--http-request-timeout-secs", http_timeout_secs,
                 "HTTP: seconds a client has to send a whole request (and to take its answer) before it is cut "
                 "off (default: limits.http_request_timeout_ms, else 30)")
      ->check(CLI::Range(1, 3600));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off (default: config, else info)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  std::string log_format;
  app.add_option("--log-format", log_format,
                 "default, ISO8601 (the same line here) or json (one JSON object a line); default: config, else "
                 "default")
      ->check(CLI::IsMember({"default", "ISO8601", "json"}));
  std::string log_file;
  app.add_option("--log-file", log_file,
                 "append the log (everything written on standard error, the hosts' lines and start-up errors "
                 "included) to this file; default: config, else standard error");
  std::string trace_mode, trace_url, trace_file, trace_level;
  uint64_t trace_rate = 0, log_frequency = 0;
  int64_t trace_count = 0;
  auto* trace_mode_option =
      app.add_option("--trace-mode", trace_mode,
                     "triton (a trace file) or opentelemetry (spans to an OTLP/HTTP collector, --trace-url; "
                     "docs/tracing.md) (default: config trace.mode, else triton)")
          ->check(CLI::IsMember({"triton", "opentelemetry"}));
  auto* trace_url_option = app.add_option(
      "--trace-url", trace_url,
      "opentelemetry mode: the collector's OTLP/HTTP traces URL, e.g. http://localhost:4318/v1/traces (default: "
      "config trace.url)");
  auto* trace_file_option = app.add_option(
      "--trace-file", trace_file,
      "Triton's trace mode: write request traces (JSON, Triton's format) to this file (docs/tracing.md; default: "
      "config trace.file)");
  auto* trace_level_option =
      app.add_option("--trace-level", trace_level, "OFF or TIMESTAMPS (default: config trace.level, else OFF)")
          ->check(CLI::IsMember({"OFF", "TIMESTAMPS"}));
  auto* trace_rate_option =
      app.add_option("--trace-rate", trace_rate, "trace one request in N (default: config, else 1000)")
          ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  auto* trace_count_option =
      app.add_option("--trace-count", trace_count, "traces to take, then stop; -1: no limit (default: config, else -1)")
          ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40));
  auto* log_frequency_option =
      app.add_option("--log-frequency", log_frequency,
                     "traces: write every N to FILE.0, FILE.1, ...; 0: all to FILE, closed at shutdown (default: "
                     "config, else 0)");
  std::vector<std::string> trace_configs;
  app.add_option("--trace-config", trace_configs,
                 "Triton's form of the trace settings (repeatable): level=, rate=, count=, mode=, triton,file=, "
                 "triton,log-frequency=, opentelemetry,url=; the --trace-* flags win over it")
      ->check([](const std::string& value) {
        es::RouterOptions::TraceFlags scratch;
        return ApplyTraceConfig(value, &scratch);
      });
  app.add_option("--host-binary", options.host_binary,
                 "the model-host program for hosts without their own `binary:` (default: ensemble-model-host "
                 "beside this binary)")
      ->check(CLI::ExistingFile);
  std::string control_mode;
  app.add_option("--model-control-mode", control_mode,
                 "none (every model, fixed), explicit (--load-model and the load/unload RPCs) or poll (rescan "
                 "the repository); default: config, else none")
      ->check(CLI::IsMember({"none", "explicit", "poll"}));
  app.add_option("--load-model", options.load_models, "explicit mode: a model to load at start (repeatable)")
      ->take_all();
  int64_t poll_secs = 0;
  app.add_option("--repository-poll-secs", poll_secs,
                 "poll mode: seconds between repository rescans (default: config, else 15)")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "ensemble-server")) return *exit_code;
  if (control_mode == "none") options.model_control_mode = es::ModelControlMode::kNone;
  if (control_mode == "explicit") options.model_control_mode = es::ModelControlMode::kExplicit;
  if (control_mode == "poll") options.model_control_mode = es::ModelControlMode::kPoll;
  if (poll_secs > 0) options.repository_poll_secs = poll_secs;
  if (grpc_port >= 0) options.grpc_port = grpc_port;
  if (metrics_port >= 0) options.metrics_port = metrics_port;
  if (http_port >= 0) options.http_port = http_port;
  options.http = !no_http;
  if (http_timeout_secs > 0) options.http_request_timeout = std::chrono::seconds(http_timeout_secs);
  options.metrics = !no_metrics;
  if (!log_level.empty()) options.log_level = log_level;
  if (!log_format.empty()) options.log_format = log_format;
  if (!log_file.empty()) options.log_file = log_file;
  for (const std::string& value : trace_configs) (void)ApplyTraceConfig(value, &options.trace);  // checked above
  if (trace_mode_option->count() > 0) options.trace.mode = trace_mode;
  if (trace_url_option->count() > 0) options.trace.url = trace_url;
  if (trace_file_option->count() > 0) options.trace.file = trace_file;
  if (trace_level_option->count() > 0) options.trace.level = trace_level;
  if (trace_rate_option->count() > 0) options.trace.rate = trace_rate;
  if (trace_count_option->count() > 0) options.trace.count = trace_count;
  if (log_frequency_option->count() > 0) options.trace.log_frequency = log_frequency;

  es::InstallProcessLogger("ensemble-server", "");

  const sigset_t signals = BlockTerminationSignals();
  auto router = es::Router::Start(options);
  if (!router.ok()) {
    std::fprintf(stderr, "ensemble-server: %s\n", router.status().message().c_str());
    return 1;
  }
  // The line tests and scripts wait for: the server answers from now on. It
  // stays the first line of stdout; the http line (unless --no-http) and the
  // metrics line follow it.
  std::cout << "grpc listening on " << (*router)->grpc_address() << std::endl;
  if (!(*router)->http_address().empty()) std::cout << "http listening on " << (*router)->http_address() << std::endl;
  if (options.metrics) std::cout << "metrics listening on " << (*router)->metrics_address() << std::endl;
  spdlog::info("serving {} model(s) from {}; malloc: {}", (*router)->served_model_count(),
               (*router)->config().repository, es::AllocatorInUse());

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("received {}, shutting down", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  (*router)->Shutdown();
  return 0;
}
