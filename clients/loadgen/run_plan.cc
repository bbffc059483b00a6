#include "clients/loadgen/run_plan.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <utility>

#include "clients/client.h"
#include "clients/http_client.h"
#include "clients/loadgen/engine.h"
#include "clients/loadgen/http_engine.h"
#include "clients/loadgen/labelled_data.h"
#include "clients/security_flags.h"
#include "clients/timestamp.h"

namespace es::loadgen {
namespace {

constexpr const char* kInferMethod = "/inference.GRPCInferenceService/ModelInfer";
constexpr const char* kStreamInferMethod = "/inference.GRPCInferenceService/ModelStreamInfer";
// The ceiling model looked for by --ceiling-model auto (clients/make_echo_model.py's default name).
constexpr const char* kEchoModel = "echo";

// The deadline of the calls that look at the server before the run.
es::client::CallOptions Probe() { return es::client::CallOptions{std::chrono::milliseconds(5000)}; }

es::client::ClientOptions ClientOptionsOf(const Options& o) {
  es::client::ClientOptions options = o.client;  // TLS and token
  options.timeout = std::chrono::milliseconds(o.timeout_ms);
  return options;
}

// The client, once the server answers that it is live.
es::StatusOr<std::unique_ptr<es::client::Api>> Connect(const Options& o) {
  auto made = es::client::MakeApi(o.server, ClientOptionsOf(o), o.http);  // gRPC, or HTTP with --http
  if (!made.ok()) return es::Status::InvalidArgument(made.status().message());
  std::unique_ptr<es::client::Api> client = std::move(made).value();
  auto live = client->ServerLive(Probe());
  if (!live.ok()) {
    es::client::SecurityFlags tls;  // ConnectionHint asks only whether TLS was on
    tls.ssl = o.client.ssl;
    const std::string hint = es::client::ConnectionHint(live.status(), tls);
    return es::Status::Unavailable("cannot reach server " + o.server + ": " + live.status().ToString() +
                                   (hint.empty() ? "" : " " + hint));
  }
  if (!*live) return es::Status::Unavailable("server " + o.server + " answers but is not live");
  return client;
}

void DescribeServer(const Options& o, const std::string& command, const es::client::Api& client, Report* report) {
  report->date = es::client::UtcTimestamp(std::time(nullptr));
  report->command = command;
  report->server = o.server;
  if (auto meta = client.ServerMetadata(Probe()); meta.ok()) {
    report->server_name = meta->name();
    report->server_version = meta->version();
  }
}

es::Status BuildFailed(const BuildError& error, const std::string& context) {
  // A usage error is the user's flags (exit 2); otherwise the server or its model is at fault (exit 1).
  return error.usage_error ? es::Status::InvalidArgument(context + error.message)
                           : es::Status::FailedPrecondition(context + error.message);
}

// The request of the model measured and, unless that model is the ceiling
// model itself, of the ceiling model: named, or "echo" when the server has it (auto).
es::Status PrepareRequests(const Options& o, RunPlan* plan) {
  BuildError error;
  if (!BuildRequest(*plan->client, o.model, o.model_version, o.batch, o.shapes, o.seed, &plan->main_request, &error)) {
    return BuildFailed(error, "");
  }
  std::string ceiling = o.ceiling_model == "none" ? "" : o.ceiling_model;
  if (ceiling == "auto") {
    auto echo = plan->client->ModelReady(kEchoModel, "", Probe());
    ceiling = echo.ok() && *echo ? kEchoModel : "";
  }
  plan->ceiling_model = ceiling;
  plan->report.ceiling_is_this_run = ceiling == o.model;
  if (!ceiling.empty() && !plan->report.ceiling_is_this_run &&
      !BuildRequest(*plan->client, ceiling, "", o.batch, o.shapes, o.seed, &plan->ceiling_request, &error)) {
    return BuildFailed(error, "--ceiling-model: ");
  }
  return es::Status::Ok();
}

// --shm: each request's inputs move into a region of its own
// ("ensemble_loadgen_<pid>_main" / "_ceiling"), registered once and read by
// every call.
es::Status MoveInputsToShm(RunPlan* plan) {
  for (auto [prepared, suffix] : {std::pair{&plan->main_request, "_main"}, {&plan->ceiling_request, "_ceiling"}}) {
    if (prepared->bytes.empty()) continue;
    std::string region = "ensemble_loadgen_";
    region += std::to_string(::getpid());
    region += suffix;
    auto moved = es::client::ShmInputs::Move(*plan->client, region, &prepared->request);
    if (!moved.ok()) return es::Status::Unavailable("--shm: " + moved.status().ToString());
    plan->shm_inputs.push_back(std::move(moved).value());
    prepared->bytes = prepared->request.SerializeAsString();
  }
  return es::Status::Ok();
}

// One call of each request before the run: a request the model rejects is
// a clear error, not a sweep full of failures.
es::Status CheckRequests(const RunPlan& plan) {
  for (const auto* prepared : {&plan.main_request, &plan.ceiling_request}) {
    if (prepared->bytes.empty()) continue;
    auto answer = plan.client->Infer(prepared->request);
    if (!answer.ok()) {
      return es::Status::FailedPrecondition("model '" + prepared->request.model_name() +
                                            "' rejects the request: " + answer.status().ToString());
    }
  }
  return es::Status::Ok();
}

// What the engine sends: the one request of each model, or (--inputs) the
// labelled data's requests for the model measured, the first of them
// checked by one call as the built request was.
es::Status SetRequests(const Options& o, RunPlan* plan) {
  plan->ceiling_requests.requests = {plan->ceiling_request.bytes};
  if (o.labelled.inputs.empty()) {
    plan->main_requests.requests = {plan->main_request.bytes};
    return es::Status::Ok();
  }
  ES_ASSIGN_OR_RETURN(plan->main_requests, LoadLabelledRequests(o.labelled, plan->main_request));
  inference::ModelInferRequest first;
  first.ParseFromString(plan->main_requests.requests.front());
  auto answer = plan->client->Infer(first);
  if (!answer.ok()) {
    return es::Status::FailedPrecondition("model '" + o.model + "' rejects the first request of --inputs " +
                                          o.labelled.inputs + ": " + answer.status().ToString());
  }
  if (plan->main_requests.checked() &&
      !CheckAnswer(*answer, plan->main_requests.output, plan->main_requests.labels.front()).readable) {
    return es::Status::InvalidArgument("--label-output " + plan->main_requests.output + ": the answer of model '" +
                                       o.model + "' has no such output of one row per label (" +
                                       std::to_string(plan->main_request.rows) + " rows, a fixed-size datatype)");
  }
  return es::Status::Ok();
}

// The report's description of the model, its request and the settings.
void DescribeRun(const Options& o, RunPlan* plan) {
  Report& report = plan->report;
  report.model = o.model;
  report.model_version = plan->main_request.version;
  report.platform = plan->main_request.platform;
  report.batch = plan->main_request.rows;
  report.inputs = plan->main_request.inputs;
  report.request_bytes = plan->main_request.bytes.size();
  if (!o.labelled.inputs.empty()) {
    const RequestSet& set = plan->main_requests;
    report.data = "--inputs " + o.labelled.inputs + ": " + std::to_string(set.requests.size()) + " requests of " +
                  std::to_string(plan->main_request.rows) + " row(s), sent in turn" +
                  (set.checked() ? "; every answer's '" + set.output + "' checked against --labels " + o.labelled.labels
                                 : "");
  }
  report.ceiling_request_bytes = plan->ceiling_request.bytes.size();
  if (plan->ceiling_model.empty()) {
    report.ceiling_not_measured =
        o.ceiling_model == "none" ? "--ceiling-model none" : "no model 'echo' on the server: see docs/loadgen.md";
  }
  report.open_loop = !o.rates.empty();
  report.poisson = o.poisson;
  report.channels = o.channels;
  report.threads = o.threads;
  report.timeout_ms = o.timeout_ms;
  CopyWindowOptions(o, &report);
  report.hung_ms = o.hung_ms;
  report.soak_s = o.soak_s;
  report.requests = o.requests;
}

// The engine: HTTP (--http, on connections of its own), or gRPC over
// --channels connections, each opened (and waited for) now.
es::StatusOr<std::unique_ptr<Engine>> MakeEngine(const Options& o) {
  EngineSettings settings;
  settings.timeout = std::chrono::milliseconds(o.timeout_ms);
  settings.hung = std::chrono::milliseconds(o.hung_ms);
  settings.max_connection_failures = o.max_connection_failures;
  if (!o.client.token.empty()) settings.authorization.append("Bearer ").append(o.client.token);
  if (o.streaming) settings.streams = o.streams > 0 ? o.streams : 1 << 30;  // 1 << 30: one per slot
  const es::client::ClientOptions client_options = ClientOptionsOf(o);
  if (o.http) return std::unique_ptr<Engine>(std::make_unique<HttpLoadEngine>(o.server, client_options, settings));
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < o.channels; ++i) {
    channels.push_back(es::client::MakeChannel(o.server, client_options));
    if (!channels.back()->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
      return es::Status::Unavailable("cannot open connection " + std::to_string(i + 1) + " of " +
                                     std::to_string(o.channels) + " to " + o.server);
    }
  }
  return std::unique_ptr<Engine>(
      std::make_unique<LoadEngine>(channels, o.threads, o.streaming ? kStreamInferMethod : kInferMethod, settings));
}

}  // namespace

es::StatusOr<RunPlan> PlanRun(const Options& options, const std::string& command) {
  RunPlan plan;
  ES_ASSIGN_OR_RETURN(plan.client, Connect(options));
  DescribeServer(options, command, *plan.client, &plan.report);
  ES_RETURN_IF_ERROR(PrepareRequests(options, &plan));
  if (options.shm) ES_RETURN_IF_ERROR(MoveInputsToShm(&plan));
  ES_RETURN_IF_ERROR(CheckRequests(plan));
  ES_RETURN_IF_ERROR(SetRequests(options, &plan));
  DescribeRun(options, &plan);
  ES_ASSIGN_OR_RETURN(plan.engine, MakeEngine(options));
  return plan;
}

}  // namespace es::loadgen
