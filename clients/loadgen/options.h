// ensemble-loadgen's command line: the options, and the parsers of its sweep
// and shape syntaxes (kept apart from main so they can be unit-tested).
//
// Contract: ParseArgs never exits the process. It returns kHelp after
// printing --help to stdout, kUsageError after printing one line
// "ensemble-loadgen: ..." to stderr, kOk otherwise (every value checked,
// and every output file's folder found writable: a bad --csv fails before
// the run, not after it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "clients/client.h"
#include "clients/loadgen/labelled_data.h"
#include "common/status.h"

namespace es::loadgen {

struct Options {
  std::string server;
  std::string model;
  std::string model_version;
  int64_t batch = 1;
  // Exactly one of the two is non-empty after parsing: closed-loop
  // concurrency steps, or open-loop request rates (requests/s).
  std::vector<int> concurrency;
  std::vector<double> rates;
  bool poisson = false;
  double duration_s = 2.0;   // one measurement window
  double warmup_s = 1.0;     // per step, before its first window
  int max_windows = 6;       // per step
  int stable_windows = 3;    // consecutive windows that must agree...
  double stability = 0.10;   // ...within this fraction (max <= min * (1 + x))
  std::string csv, json, svg;
  int channels = 0;          // 0 = min(4, largest concurrency), at least 1
  int threads = 2;
  int timeout_ms = 10000;    // deadline of every request
  int hung_ms = 30000;       // a call slower than this is "hung"; one outstanding this long at the end "unanswered"
  int max_connection_failures = 100;  // in a row: the server is gone, the run ends
  double soak_s = 0;         // > 0: each step runs this long, every window kept (no stability check)
  uint64_t requests = 0;     // > 0: each step measures exactly this many calls, every window kept
  int max_inflight = 4096;   // open loop: calls past this are skipped, not sent
  // Non-batch dims of inputs whose metadata shape is variable: name -> dims.
  std::map<std::string, std::vector<int64_t>> shapes;
  // The tool's ceiling is measured on this model too: "auto" = the server's
  // model "echo" if it has a ready one, "none" = never.
  std::string ceiling_model = "auto";
  int ceiling_concurrency = 0;  // 0 = the sweep's largest concurrency (open loop: 32)
  uint32_t seed = 1;
  bool quiet = false;         // no progress line, no table (files only)
  // ModelStreamInfer instead of ModelInfer (closed loop only): the slots
  // share `streams` streams (0 = one stream per slot).
  bool streaming = false;
  int streams = 0;
  // --shm: the inputs travel through a system shared-memory region the tool
  // creates and registers once (unregistered and unlinked at exit).
  bool shm = false;
  // TLS and token (--ssl, --ssl-ca, --ssl-cert, --ssl-key, --token or env
  // ENSEMBLE_TOKEN; clients/security_flags.h): files read and checked by
  // ParseArgs; main adds the timeout.
  es::client::ClientOptions client;
  // --http: KServe v2 HTTP/REST on --server (the HTTP address), one
  // keep-alive connection and thread per call in flight (clients/loadgen/http_engine.h).
  bool http = false;
  // --server-pid: the server's process on this machine, whose CPU (and its
  // model hosts', its child processes) the steps report per request
  // (process_cpu.h); 0 = not given. ParseArgs checks that it exists.
  int server_pid = 0;
  // --inputs, --labels, --label-output: real rows sent in turn and every
  // answer checked against its labels (clients/loadgen/labelled_data.h).
  LabelledFiles labelled;
};

// Copies the measurement-window options (warm-up, window length, how many
// windows must agree and within what, at most how many) into `to`: a
// StepSettings, which runs them, or a Report, which records them; both name
// them as Options does.
template <typename WindowSettings>
void CopyWindowOptions(const Options& o, WindowSettings* to) {
  to->warmup_s = o.warmup_s;
  to->duration_s = o.duration_s;
  to->max_windows = o.max_windows;
  to->stable_windows = o.stable_windows;
  to->stability = o.stability;
}

enum class ParseOutcome { kOk, kHelp, kUsageError };

ParseOutcome ParseArgs(int argc, char** argv, Options* options);

// "8" -> {8}; "1:64:x2" -> 1,2,4,...,64; "10:50:+10" -> 10,20,...,50;
// "1,2,8" -> as listed. Values must be > 0 and the range increasing; an
// INVALID_ARGUMENT naming the spec and what is wrong otherwise.
es::StatusOr<std::vector<double>> ParseSweep(const std::string& spec);

// "input:1,28,28" -> {"input", {1, 28, 28}}; INVALID_ARGUMENT otherwise.
es::StatusOr<std::pair<std::string, std::vector<int64_t>>> ParseShape(const std::string& spec);

}  // namespace es::loadgen
