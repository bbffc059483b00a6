// ensemble-loadgen's outputs: the table printed on stdout, the CSV and JSON
// files, and the latency-throughput curve as an SVG file.
//
// Contract: pure formatting of a finished (or interrupted) run; the Write*
// functions return false and set *error ("FILE: reason") when the file cannot
// be written, and leave no partial file behind (temp file + rename).
// Units everywhere: latencies and stage times in microseconds, throughput in
// successful requests per second (rows/s = requests/s x batch).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "clients/loadgen/measure.h"
#include "common/status.h"

namespace es::loadgen {

struct InputInfo {
  std::string name, datatype;
  std::vector<int64_t> shape;
  size_t bytes = 0;
};

struct Report {
  // The run.
  std::string date;  // ISO 8601, UTC
  std::string command;
  std::string server, server_name, server_version;
  std::string model, model_version, platform;
  int64_t batch = 1;
  std::vector<InputInfo> inputs;
  size_t request_bytes = 0;  // serialized ModelInferRequest
  // --inputs (and --labels): what is sent and checked, in words; "" = one random request.
  std::string data;
  bool open_loop = false;
  bool poisson = false;
  int channels = 1, threads = 1, timeout_ms = 0;
  double warmup_s = 0, duration_s = 0, stability = 0;
  int max_windows = 0, stable_windows = 0;
  // Results.
  std::vector<StepResult> steps;
  std::optional<StepResult> ceiling;  // the --ceiling-model run
  size_t ceiling_request_bytes = 0;
  bool ceiling_is_this_run = false;  // the model measured is the ceiling model itself
  std::string ceiling_not_measured;  // why there is no ceiling, when there is none
  bool interrupted = false;
  uint64_t client_ok = 0, client_failed = 0;  // every call of the run (warm-ups too)
  uint64_t client_sent = 0, client_hung = 0, client_unanswered = 0;
  std::map<std::string, uint64_t> client_errors;  // gRPC code name -> failed calls, whole run
  std::map<std::string, std::string> client_error_messages;  // gRPC code name -> its first failure's message
  std::string lost_server;  // why the run ended early (the server went away), if it did
  int hung_ms = 0;
  double soak_s = 0;
  uint64_t requests = 0;                                            // --requests: calls measured per step (0: by time)
  std::optional<uint64_t> server_success_delta, server_fail_delta;  // the model's, over the run
};

// The highest throughput of the steps (0 if none).
double PeakThroughput(const std::vector<StepResult>& steps);

// `server_cpu` (--server-pid): two more columns, the server's CPU per
// request (srv_cpu_us) and its model hosts' (hosts_cpu_us); `labelled`
// (--labels): the accuracy of the answers (acc%, as TableRow adds it to a
// step that checked its answers).
std::string TableHeader(bool open_loop, bool server_cpu = false, bool labelled = false);
std::string TableRow(const StepResult& step, bool server_cpu = false);
// Lines after the table: errors by code, ceiling, totals.
std::string Summary(const Report& report);

std::string CsvText(const Report& report);
std::string JsonText(const Report& report);
std::string SvgText(const Report& report);

// Writes `text` to `path` through a temp file renamed over it; an error
// "FILE: reason" (code INTERNAL) when it cannot.
es::Status WriteFile(const std::string& path, const std::string& text);
// Whether WriteFile(path) can succeed: creates and removes the temp file it
// would use. An error "FILE: reason" (code INTERNAL) otherwise.
es::Status CheckWritable(const std::string& path);

}  // namespace es::loadgen
