#include "clients/loadgen/options.h"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <sstream>

#include "clients/loadgen/process_cpu.h"
#include "clients/loadgen/report.h"
#include "clients/security_flags.h"
#include "common/command_line.h"

namespace es::loadgen {
namespace {

bool ParseNumber(const std::string& text, double* value) {
  if (text.empty()) return false;
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(*value);
}

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

constexpr const char* kDescription =
    "ensemble-loadgen: load generator for any KServe v2 gRPC server.\n"
    "Closed loop (--concurrency N or a sweep LO:HI:xF / LO:HI:+D / A,B,C) keeps N calls in flight;\n"
    "open loop (--rate R, same sweep syntax, --poisson for Poisson arrivals) sends R requests/s\n"
    "whatever the answers. Each step: warm-up, then windows of --duration-s until 3 in a row agree\n"
    "within 10% on throughput (at most --max-windows). Reports throughput, latency percentiles,\n"
    "errors by gRPC code and the server's per-stage times (ModelStatistics); with --server-pid, the\n"
    "server's CPU per request (the server on this machine only).\n"
    "Exit codes: 0 ok, 1 runtime failure (server unreachable, model error), 2 usage error,\n"
    "130 interrupted (the steps finished are still printed and written). See docs/loadgen.md.";

}  // namespace

es::StatusOr<std::vector<double>> ParseSweep(const std::string& spec) {
  std::vector<double> values;
  auto bad = [&](const std::string& why) { return es::Status::InvalidArgument("'" + spec + "': " + why); };
  if (spec.find(':') != std::string::npos) {
    auto parts = Split(spec, ':');
    if (parts.size() != 3 || parts[2].size() < 2) return bad("expected LO:HI:xFACTOR or LO:HI:+STEP");
    double lo = 0, hi = 0, step = 0;
    if (!ParseNumber(parts[0], &lo) || !ParseNumber(parts[1], &hi) || !ParseNumber(parts[2].substr(1), &step)) {
      return bad("not a number");
    }
    if (lo <= 0 || hi < lo) return bad("need 0 < LO <= HI");
    const char op = parts[2][0];
    if (op == 'x' || op == '*') {
      if (step <= 1) return bad("the factor must be > 1");
      for (double v = lo; v <= hi * (1 + 1e-9); v *= step) values.push_back(v);
    } else if (op == '+') {
      if (step <= 0) return bad("the step must be > 0");
      for (double v = lo; v <= hi * (1 + 1e-9); v += step) values.push_back(v);
    } else {
      return bad("the third field starts with x or +");
    }
    if (values.size() > 1000) return bad("more than 1000 steps");
    return values;
  }
  for (const auto& part : Split(spec, ',')) {
    double v = 0;
    if (!ParseNumber(part, &v)) return bad("not a number");
    if (v <= 0) return bad("values must be > 0");
    values.push_back(v);
  }
  if (values.empty()) return bad("empty");
  return values;
}

es::StatusOr<std::pair<std::string, std::vector<int64_t>>> ParseShape(const std::string& spec) {
  const auto colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size()) {
    return es::Status::InvalidArgument("'" + spec + "': expected NAME:D1,D2,...");
  }
  std::vector<int64_t> dims;
  for (const auto& part : Split(spec.substr(colon + 1), ',')) {
    double v = 0;
    if (!ParseNumber(part, &v) || v < 0 || v != std::floor(v)) {
      return es::Status::InvalidArgument("'" + spec + "': dims are integers >= 0");
    }
    dims.push_back(static_cast<int64_t>(v));
  }
  return std::make_pair(spec.substr(0, colon), dims);
}

namespace {

// What CLI11 fills but the tool reads further (sweeps, shapes, the security
// flags), and what only the parser knows (whether --threads was given).
struct RawFlags {
  std::string concurrency;
  std::string rate;
  std::vector<std::string> shapes;
  es::client::SecurityFlags security;
  bool threads_given = false;
};

es::Status Refused(const std::string& what) { return es::Status::InvalidArgument(what); }

// Declares every flag of the tool on `app`, bound to `o` or `raw`.
void AddFlags(CLI::App* app, Options* o, RawFlags* raw) {
  app->add_option("--server", o->server, "HOST:PORT of the KServe v2 gRPC endpoint (with --http: the HTTP one)")
      ->required();
  app->add_option("--model", o->model, "model to load")->required();
  app->add_option("--model-version", o->model_version, "model version (default: the server's choice)");
  app->add_option("--batch", o->batch, "rows per request (the -1 batch dim of the model's inputs; default 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  auto* c = app->add_option("--concurrency", raw->concurrency,
                           "closed loop: calls in flight, N or a sweep 1:64:x2, 8:64:+8, 1,2,4 (default 1:16:x2)");
  auto* r = app->add_option("--rate", raw->rate, "open loop: requests/s, R or a sweep like --concurrency");
  c->excludes(r);
  app->add_flag("--poisson", o->poisson, "open loop: Poisson arrivals (default: constant intervals)");
  app->add_option("--duration-s", o->duration_s, "length of one measurement window (default 2)")
      ->check(CLI::Range(0.05, 3600.0));
  app->add_option("--warmup-s", o->warmup_s, "warm-up per step, not measured (default 1)")
      ->check(CLI::Range(0.0, 3600.0));
  app->add_option("--max-windows", o->max_windows,
                 "windows per step at most, stable or not (default 6; below 3 nothing is checked)")
      ->check(CLI::Range(1, 1000));
  app->add_option("--csv", o->csv, "write one row per step to this CSV file");
  app->add_option("--json", o->json, "write the whole report to this JSON file");
  app->add_option("--svg", o->svg, "draw the latency-throughput curve (p50, p99) into this SVG file");
  app->add_option("--channels", o->channels,
                 "gRPC channels, each its own TCP connection (default min(4, largest concurrency))")
      ->check(CLI::Range(1, 1024));
  app->add_option("--threads", o->threads, "client workers, each a completion queue and its thread (open loop: plus a pacer thread; default 2)")->check(CLI::Range(1, 256));
  app->add_option("--timeout-ms", o->timeout_ms, "deadline of every request (default 10000)")
      ->check(CLI::Range(1, 3600000));
  app->add_option("--max-inflight", o->max_inflight,
                 "open loop: calls in flight at most; arrivals beyond are counted as skipped (default 4096)")
      ->check(CLI::Range(1, 1000000));
  app->add_option("--shape", raw->shapes, "NAME:D1,D2 non-batch dims of an input whose dims are variable (repeatable)");
  app->add_option("--ceiling-model", o->ceiling_model,
                 "after the sweep, one step on this trivial (echo) model of the same server: the tool's ceiling "
                 "(default auto: the model 'echo' if the server has it; none: never)");
  app->add_option("--ceiling-concurrency", o->ceiling_concurrency,
                 "concurrency of the ceiling run (default: the sweep's largest, open loop 32)")
      ->check(CLI::Range(1, 100000));
  app->add_option("--hung-ms", o->hung_ms,
                 "a call that takes longer than this is counted as hung; one still outstanding this long after the "
                 "step ended is cancelled and counted as unanswered (default 30000)")
      ->check(CLI::Range(1, 3600000));
  app->add_option("--max-connection-failures", o->max_connection_failures,
                 "connection failures in a row (UNAVAILABLE with the connection down) after which the server is "
                 "taken as gone: the step ends and the run reports what succeeded (default 100)")
      ->check(CLI::Range(1, 100000000));
  auto* soak = app->add_option("--soak-s", o->soak_s,
                               "soak: each step runs this many seconds in windows of --duration-s, every window "
                               "kept and merged (no stability check; the JSON's timeline has each window)")
                   ->check(CLI::Range(0.0, 7.0 * 24 * 3600));
  auto* requests =
      app->add_option("--requests", o->requests,
                      "each step sends exactly this many calls after the warm-up, from the first request (with "
                      "--inputs: the first rows; a multiple of the file's requests, rows / --batch, checks every row "
                      "alike when every call succeeds), and ends when they are answered; windows of --duration-s as "
                      "a soak's, every one kept (calls of the warm-up still out count in latencies and sends, not in "
                      "the accuracy); the ceiling step, if any, runs by time")
          ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40))
          ->excludes(soak);
  app->add_option("--seed", o->seed, "seed of the random input data and Poisson arrivals (default 1)");
  app->add_flag("--quiet", o->quiet, "print nothing but errors (write the files only)");
  // ModelStreamInfer.
  auto* streaming = app->add_flag("--streaming", o->streaming,
                                 "send over ModelStreamInfer streams instead of one ModelInfer call per request "
                                 "(closed loop only; answers matched by request id)");
  app->add_option("--streams", o->streams,
                 "--streaming: streams the slots share, slot k on stream k % N (default: one stream per slot)")
      ->check(CLI::Range(1, 100000))
      ->needs(streaming);
  requests->excludes(streaming);  // a stream's slots send the first request only: no turn to count
  // System shared memory.
  app->add_flag("--shm", o->shm,
               "send the inputs through a shared-memory region (created and registered once, unregistered and "
               "unlinked at exit; the server must be on this machine)");
  // The server's CPU, from /proc.
  app->add_option("--server-pid", o->server_pid,
                 "PID of the server process, when it runs on this machine: each step also reports its CPU (user + "
                 "system) per successful request, the server process's own (srv_cpu_us) and its child processes' "
                 "(the model hosts, hosts_cpu_us), in core-us; meaningless for a server on another machine")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  es::client::AddSecurityFlags(app, &raw->security);  // --ssl, --ssl-ca, --ssl-cert, --ssl-key, --token
  // Labelled data.
  app->add_option("--inputs", o->labelled.inputs,
                 "NumPy .npy file of rows for the model's one input ([N, ...], its non-batch dims): requests of "
                 "--batch rows each, sent in turn, instead of random data (not with --http, --streaming or --shm)");
  app->add_option("--labels", o->labelled.labels,
                 "NumPy .npy file of one class index per row of --inputs: every answer's rows are checked (the "
                 "largest element of --label-output is the class) and each step reports the accuracy, in all and "
                 "by the answer's served_by parameter");
  app->add_option("--label-output", o->labelled.output,
                 "the output --labels checks (default: the model's first output)");
  // KServe v2 HTTP/REST.
  app->add_flag("--http", o->http,
               "talk KServe v2 HTTP/REST to --server (the HTTP address): a keep-alive connection and thread per slot "
               "(open loop: min(--max-inflight, 64) of them); not with --streaming, --channels or --threads");
}

// Turns the parsed flags into `o` (sweeps, shapes, TLS files, the defaults
// that depend on other flags) and checks them together; INVALID_ARGUMENT
// saying what is wrong otherwise.
es::Status CompleteOptions(const RawFlags& raw, Options* o) {
  if (!raw.rate.empty()) {
    auto values = ParseSweep(raw.rate);
    if (!values.ok()) return Refused("--rate " + values.status().message());
    o->rates = *values;
  } else {
    auto values = ParseSweep(raw.concurrency.empty() ? "1:16:x2" : raw.concurrency);
    if (!values.ok()) return Refused("--concurrency " + values.status().message());
    for (double v : *values) {
      if (v != std::floor(v) || v > 100000) return Refused("--concurrency: whole numbers up to 100000");
      o->concurrency.push_back(static_cast<int>(v));
    }
  }
  for (const auto& s : raw.shapes) {
    auto shape = ParseShape(s);
    if (!shape.ok()) return Refused("--shape " + shape.status().message());
    o->shapes[shape->first] = shape->second;
  }
  if (es::client::Status s = es::client::ApplySecurityFlags(raw.security, &o->client); !s.ok()) return Refused(s.message());
  if (o->poisson && o->rates.empty()) return Refused("--poisson needs --rate (it sets open-loop arrivals)");
  if (o->streaming && !o->rates.empty()) return Refused("--streaming is closed loop only: use --concurrency, not --rate");
  if (o->http) {  // what the HTTP engine cannot honour
    for (const auto& [flag, given] : {std::pair<const char*, bool>{"--streaming", o->streaming},
                                      {"--channels", o->channels != 0},
                                      {"--threads", raw.threads_given}}) {
      if (given) {
        return Refused(std::string("--http: ") + flag + " is not supported over HTTP (one connection per call in flight)");
      }
    }
  }
  if (!o->labelled.labels.empty() && o->labelled.inputs.empty()) return Refused("--labels needs --inputs");
  if (!o->labelled.output.empty() && o->labelled.labels.empty()) return Refused("--label-output needs --labels");
  if (!o->labelled.inputs.empty()) {
    for (const auto& [flag, given] : {std::pair<const char*, bool>{"--http", o->http},
                                      {"--streaming", o->streaming},
                                      {"--shm", o->shm}}) {
      if (given) return Refused(std::string("--inputs: not supported with ") + flag + " (it sends one request)");
    }
  }
  // Refused now rather than reported as "-" at every step: a typo, or a
  // server that has already exited.
  if (o->server_pid > 0 && !ReadCpuSeconds(static_cast<pid_t>(o->server_pid))) {
    const std::string pid = std::to_string(o->server_pid);
    return Refused("--server-pid " + pid + ": no such process on this machine (/proc/" + pid + "/stat unreadable)");
  }
  if (o->server.find(':') == std::string::npos) return Refused("--server: expected HOST:PORT, got '" + o->server + "'");
  for (const auto& [flag, path] : {std::pair<const char*, const std::string*>{"--csv", &o->csv},
                                   {"--json", &o->json},
                                   {"--svg", &o->svg}}) {
    if (path->empty()) continue;
    if (es::Status writable = CheckWritable(*path); !writable.ok()) {
      return Refused(std::string(flag) + " " + writable.message());
    }
  }
  if (o->channels == 0) {
    int largest = o->concurrency.empty() ? 4 : 1;
    for (int v : o->concurrency) largest = std::max(largest, v);
    o->channels = std::min(4, largest);
  }
  if (o->ceiling_concurrency == 0) {
    o->ceiling_concurrency = 32;
    if (!o->concurrency.empty()) o->ceiling_concurrency = *std::max_element(o->concurrency.begin(), o->concurrency.end());
  }
  return es::Status::Ok();
}

}  // namespace

ParseOutcome ParseArgs(int argc, char** argv, Options* o) {
  CLI::App app{kDescription, "ensemble-loadgen"};
  RawFlags raw;
  AddFlags(&app, o, &raw);
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "ensemble-loadgen")) {
    return *exit_code == 0 ? ParseOutcome::kHelp : ParseOutcome::kUsageError;
  }
  raw.threads_given = app.count("--threads") > 0;
  if (es::Status s = CompleteOptions(raw, o); !s.ok()) {
    std::fprintf(stderr, "ensemble-loadgen: %s (see --help)\n", s.message().c_str());
    return ParseOutcome::kUsageError;
  }
  return ParseOutcome::kOk;
}

}  // namespace es::loadgen
