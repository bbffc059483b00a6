// ensemble-loadgen: closed-loop concurrency sweeps and open-loop request
// rates against any KServe v2 gRPC server; see docs/loadgen.md.
//
// Exit codes: 0 ok; 1 runtime failure (server unreachable, the model rejects
// the request, a step where nothing succeeded, the server lost during the run
// (what succeeded before is still reported), a file not written);
// 2 usage error; 130 interrupted (SIGINT/SIGTERM; the files hold the steps
// finished before it).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "common/grpc_process.h"
#include "clients/client.h"
#include "clients/http_client.h"
#include "clients/loadgen/engine.h"
#include "clients/loadgen/http_engine.h"
#include "clients/loadgen/measure.h"
#include "clients/loadgen/options.h"
#include "clients/loadgen/report.h"
#include "clients/loadgen/request_builder.h"
#include "clients/shm_region.h"

namespace {

using es::loadgen::Options;

std::atomic<bool> g_interrupted{false};

void OnSignal(int) { g_interrupted.store(true); }

constexpr const char* kInferMethod = "/inference.GRPCInferenceService/ModelInfer";
constexpr const char* kStreamInferMethod = "/inference.GRPCInferenceService/ModelStreamInfer";
// The ceiling model looked for by --ceiling-model auto (clients/make_echo_model.py's default name).
constexpr const char* kEchoModel = "echo";

int Fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "ensemble-loadgen: %s\n", message.c_str());
  return code;
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// The progress line: stderr, only on an interactive terminal.
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled) {}
  void Show(const std::string& line) {
    if (!enabled_) return;
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    shown_ = true;
  }
  void Clear() {
    if (!enabled_ || !shown_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  bool enabled_;
  bool shown_ = false;
};

int Run(const Options& o, const std::string& command) {
  es::client::ClientOptions client_options = o.client;  // TLS and token
  client_options.timeout = std::chrono::milliseconds(o.timeout_ms);
  auto made = es::client::MakeApi(o.server, client_options, o.http);  // gRPC, or HTTP with --http
  if (!made.ok()) return Fail(made.status().message(), 2);
  const std::unique_ptr<es::client::Api> client = std::move(made).value();
  const es::client::CallOptions probe{std::chrono::milliseconds(5000)};
  auto live = client->ServerLive(probe);
  if (!live.ok()) return Fail("cannot reach server " + o.server + ": " + live.status().ToString());
  if (!*live) return Fail("server " + o.server + " answers but is not live");

  es::loadgen::Report report;
  report.date = UtcNow();
  report.command = command;
  report.server = o.server;
  if (auto meta = client->ServerMetadata(probe); meta.ok()) {
    report.server_name = meta->name();
    report.server_version = meta->version();
  }

  es::loadgen::PreparedRequest main_request;
  es::loadgen::BuildError build_error;
  if (!es::loadgen::BuildRequest(*client, o.model, o.model_version, o.batch, o.shapes, o.seed, &main_request,
                                 &build_error)) {
    return Fail(build_error.message, build_error.usage_error ? 2 : 1);
  }
  // The ceiling model: named, or "echo" when the server has it (auto).
  std::string ceiling_model = o.ceiling_model;
  if (ceiling_model == "none") ceiling_model.clear();
  if (ceiling_model == "auto") {
    auto echo = client->ModelReady(kEchoModel, "", probe);
    ceiling_model = echo.ok() && *echo ? kEchoModel : "";
  }
  const bool ceiling_is_this_run = ceiling_model == o.model;
  es::loadgen::PreparedRequest ceiling_request;
  if (!ceiling_model.empty() && !ceiling_is_this_run &&
      !es::loadgen::BuildRequest(*client, ceiling_model, "", o.batch, o.shapes, o.seed, &ceiling_request,
                                 &build_error)) {
    return Fail("--ceiling-model: " + build_error.message, build_error.usage_error ? 2 : 1);
  }
  // --shm (issue 15): each request's inputs move into a region of its own
  // ("ensemble_loadgen_<pid>_main" / "_ceiling"), registered once and read by
  // every call; unregistered and unlinked when Run returns.
  std::vector<std::unique_ptr<es::client::ShmInputs>> shm_inputs;
  if (o.shm) {
    for (auto [prepared, suffix] : {std::pair{&main_request, "_main"}, {&ceiling_request, "_ceiling"}}) {
      if (prepared->bytes.empty()) continue;
      std::string region = "ensemble_loadgen_";
      region += std::to_string(::getpid());
      region += suffix;
      auto moved = es::client::ShmInputs::Move(*client, region, &prepared->request);
      if (!moved.ok()) return Fail("--shm: " + moved.status().ToString());
      shm_inputs.push_back(std::move(moved).value());
      prepared->bytes = prepared->request.SerializeAsString();
    }
  }
  // One call first: a request the model rejects is a clear error, not a
  // sweep full of failures.
  for (const auto* prepared : {&main_request, &ceiling_request}) {
    if (prepared->bytes.empty()) continue;
    auto answer = client->Infer(prepared->request);
    if (!answer.ok()) {
      return Fail("model '" + prepared->request.model_name() + "' rejects the request: " + answer.status().ToString());
    }
  }

  report.model = o.model;
  report.model_version = main_request.version;
  report.platform = main_request.platform;
  report.batch = main_request.rows;
  report.inputs = main_request.inputs;
  report.request_bytes = main_request.bytes.size();
  report.ceiling_request_bytes = ceiling_request.bytes.size();
  report.ceiling_is_this_run = ceiling_is_this_run;
  if (ceiling_model.empty()) {
    report.ceiling_not_measured = o.ceiling_model == "none" ? "--ceiling-model none"
                                                            : "no model 'echo' on the server: see docs/loadgen.md";
  }
  report.open_loop = !o.rates.empty();
  report.poisson = o.poisson;
  report.channels = o.channels;
  report.threads = o.threads;
  report.timeout_ms = o.timeout_ms;
  report.warmup_s = o.warmup_s;
  report.duration_s = o.duration_s;
  report.max_windows = o.max_windows;
  report.stable_windows = o.stable_windows;
  report.stability = o.stability;
  report.hung_ms = o.hung_ms;
  report.soak_s = o.soak_s;

  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < (o.http ? 0 : o.channels); ++i) {  // --http: the HTTP engine's own connections
    channels.push_back(es::client::MakeChannel(o.server, client_options));
    if (!channels.back()->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
      return Fail("cannot open connection " + std::to_string(i + 1) + " of " + std::to_string(o.channels) + " to " +
                  o.server);
    }
  }
  es::loadgen::EngineSettings engine_settings;
  engine_settings.timeout = std::chrono::milliseconds(o.timeout_ms);
  engine_settings.hung = std::chrono::milliseconds(o.hung_ms);
  engine_settings.max_connection_failures = o.max_connection_failures;
  if (!o.client.token.empty()) engine_settings.authorization.append("Bearer ").append(o.client.token);
  if (o.streaming) engine_settings.streams = o.streams > 0 ? o.streams : 1 << 30;  // 1 << 30: one per slot
  std::unique_ptr<es::loadgen::Engine> engine_holder;
  if (o.http) {
    engine_holder = std::make_unique<es::loadgen::HttpLoadEngine>(o.server, client_options, engine_settings);
  } else {
    engine_holder = std::make_unique<es::loadgen::LoadEngine>(
        channels, o.threads, o.streaming ? kStreamInferMethod : kInferMethod, engine_settings);
  }
  es::loadgen::Engine& engine = *engine_holder;

  const bool interactive = !o.quiet && ::isatty(STDERR_FILENO);
  Progress progress(interactive);
  auto say = [&](const std::string& text) {
    if (o.quiet) return;
    progress.Clear();
    std::cout << text << std::endl;
  };
  {
    std::string inputs;
    for (const auto& in : report.inputs) {
      if (!inputs.empty()) inputs += ", ";
      inputs += in.name + " " + in.datatype + " " + ShapeText(in.shape) + " (" +
                std::to_string(in.bytes) + " B)";
    }
    std::string steps;
    if (report.open_loop) {
      for (double r : o.rates) steps += " " + std::to_string(static_cast<long long>(r));
    } else {
      for (int c : o.concurrency) steps += " " + std::to_string(c);
    }
    char line[512];
    say("ensemble-loadgen " + report.date + ": server " + o.server +
        (report.server_name.empty() ? "" : " (" + report.server_name + " " + report.server_version + ")") +
        ", model " + o.model + (report.model_version.empty() ? "" : " v" + report.model_version) +
        (report.platform.empty() ? "" : " (" + report.platform + ")") + ", batch " + std::to_string(report.batch));
    say("  inputs: " + inputs + "; request " + std::to_string(report.request_bytes) + " B; " +
        (o.http ? std::string(o.rates.empty() ? "HTTP/1.1, one keep-alive connection and thread per slot"
                                              : "HTTP/1.1, " + std::to_string(std::min(o.max_inflight, 64)) +
                                                    " keep-alive connections, each with its thread")
                : std::to_string(o.channels) + " channel(s), " + std::to_string(o.threads) + " thread(s)") +
        ", deadline " +
        std::to_string(o.timeout_ms) + " ms" +
        (!o.streaming ? ""
         : o.streams > 0 ? "; ModelStreamInfer, the slots on " + std::to_string(o.streams) + " stream(s)"
                         : "; ModelStreamInfer, one stream per slot"));
    std::snprintf(line, sizeof line,
                  "  %s:%s; warm-up %.3g s, windows of %.3g s until %d agree within %.0f%% (at most %d)",
                  report.open_loop ? (o.poisson ? "open loop, Poisson arrivals, requests/s"
                                                : "open loop, constant rate, requests/s")
                                   : "closed loop, concurrency",
                  steps.c_str(), o.warmup_s, o.duration_s, o.stable_windows, o.stability * 100, o.max_windows);
    say(line);
    say("  latencies and server stage times (srv_us = server success time, queue, c_in/c_infer/c_out = compute "
        "input/infer/output) in us");
    say(es::loadgen::TableHeader(report.open_loop));
  }

  es::loadgen::StepSettings settings;
  settings.model = o.model;
  settings.version = o.model_version;
  settings.batch = report.batch;
  settings.warmup_s = o.warmup_s;
  settings.duration_s = o.duration_s;
  settings.max_windows = o.max_windows;
  settings.stable_windows = o.stable_windows;
  settings.stability = o.stability;
  settings.run_s = o.soak_s;
  const auto on_progress = [&](const std::string& line) { progress.Show(line); };

  const auto counters_before = es::loadgen::ReadServerCounters(*client, o.model, o.model_version);
  const uint64_t sent_before = engine.total_sent(), ok_before = engine.total_ok();
  const uint64_t failed_before = engine.total_failed();
  std::string nothing_succeeded;
  const size_t steps = report.open_loop ? o.rates.size() : o.concurrency.size();
  for (size_t i = 0; i < steps && !g_interrupted.load(); ++i) {
    es::loadgen::LoadPlan plan;
    if (report.open_loop) {
      plan.rate = o.rates[i];
    } else {
      plan.concurrency = o.concurrency[i];
    }
    plan.poisson = o.poisson;
    plan.max_inflight = o.max_inflight;
    plan.seed = o.seed + static_cast<uint32_t>(i);
    auto step = es::loadgen::RunStep(engine, *client, plan, main_request.bytes, settings, on_progress, &g_interrupted);
    // An interrupted step is not reported, except a soak's: its windows are
    // what the run is for.
    if (step.windows == 0 || (g_interrupted.load() && !step.soak)) break;
    say(es::loadgen::TableRow(step));
    const std::string lost = step.lost_server;
    if (step.ok == 0 && nothing_succeeded.empty()) {
      nothing_succeeded = "no request succeeded at " + (step.open_loop ? "rate " + std::to_string(static_cast<long long>(step.rate)) + "/s"
                                                                        : "concurrency " + std::to_string(step.concurrency));
    }
    report.steps.push_back(std::move(step));
    if (!lost.empty()) {  // the server is gone: no further step, report what succeeded
      const std::string at = report.open_loop ? "rate " + std::to_string(static_cast<long long>(o.rates[i])) + "/s"
                                              : "concurrency " + std::to_string(o.concurrency[i]);
      report.lost_server = lost + " (at " + at + ")";
      break;
    }
  }
  report.client_sent = engine.total_sent() - sent_before;
  report.client_ok = engine.total_ok() - ok_before;
  report.client_failed = engine.total_failed() - failed_before;
  report.client_hung = engine.total_hung();
  report.client_unanswered = engine.total_unanswered();
  for (const auto& [code, count] : engine.total_errors()) report.client_errors[es::client::CodeName(code)] += count;
  const auto counters_after = es::loadgen::ReadServerCounters(*client, o.model, o.model_version);
  if (counters_before && counters_after) {
    report.server_success_delta = counters_after->success_count - counters_before->success_count;
    report.server_fail_delta = counters_after->fail_count - counters_before->fail_count;
  }

  if (!ceiling_model.empty() && !ceiling_is_this_run && !g_interrupted.load() && report.lost_server.empty()) {
    es::loadgen::LoadPlan plan;
    plan.concurrency = o.ceiling_concurrency;
    plan.seed = o.seed;
    auto ceiling_settings = settings;
    ceiling_settings.model = ceiling_model;
    ceiling_settings.version = "";
    ceiling_settings.batch = ceiling_request.rows;
    auto step = es::loadgen::RunStep(engine, *client, plan, ceiling_request.bytes, ceiling_settings, on_progress,
                                     &g_interrupted);
    if (step.windows > 0 && !g_interrupted.load()) report.ceiling = std::move(step);
  }
  report.interrupted = g_interrupted.load();
  progress.Clear();
  if (!o.quiet) std::cout << es::loadgen::Summary(report) << std::flush;

  int exit_code = 0;
  std::string error;
  const std::pair<const std::string*, std::string (*)(const es::loadgen::Report&)> files[] = {
      {&o.csv, es::loadgen::CsvText}, {&o.json, es::loadgen::JsonText}, {&o.svg, es::loadgen::SvgText}};
  for (const auto& [path, render] : files) {
    if (path->empty()) continue;
    if (!es::loadgen::WriteFile(*path, render(report), &error)) {
      exit_code = Fail("cannot write " + error);
    } else if (!o.quiet) {
      std::cout << "wrote " << *path << "\n";
    }
  }
  if (report.interrupted) return 130;
  if (!report.lost_server.empty()) {
    return Fail("lost the server " + o.server + ": " + report.lost_server + "; " + std::to_string(report.client_ok) +
                " requests had succeeded before");
  }
  if (!nothing_succeeded.empty()) return Fail(nothing_succeeded);
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  es::TuneGrpcProcess();
  ::signal(SIGPIPE, SIG_IGN);
  Options options;
  switch (es::loadgen::ParseArgs(argc, argv, &options)) {
    case es::loadgen::ParseOutcome::kHelp: return 0;
    case es::loadgen::ParseOutcome::kUsageError: return 2;
    case es::loadgen::ParseOutcome::kOk: break;
  }
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  std::string command;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) command += " ";
    command += argv[i];
  }
  return Run(options, command);
}
