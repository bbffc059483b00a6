// One step of a sweep: warm-up, then measurement windows until the last
// `stable_windows` agree on throughput (max <= min * (1 + stability)), or
// `max_windows` were measured. The step's figures are those of its last
// `stable_windows` windows (fewer if fewer were measured), merged.
// A soak step (StepSettings::run_s > 0) instead measures windows for run_s
// seconds whatever they show, and its figures are every window merged; a
// counted one (StepSettings::requests > 0) likewise, until that many calls
// were sent after the warm-up and every one of them ended.
// Either way every window is kept in the step's timeline (wall-clock start,
// counts, percentiles and a latency histogram), so that a run can be cut by
// time afterwards (benchmarks/run_chaos.sh: p99 outside fault windows).
// A step whose engine lost the server ends early with what it has, the
// window in progress included.
//
// The server's own figures come from ModelStatistics, read at every window
// boundary: the step's stage times are the counters' deltas over the same
// windows, averaged per count (Triton's semantics: success and queue per
// request, compute_* per model execution).
//
// With --server-pid (StepSettings::server_pid), the server process's CPU
// and its children's (the model hosts) are read from /proc at the same
// boundaries as the tool's own CPU (process_cpu.h), and reported per
// successful request over the same windows.
//
// Contract: RunStep is called from one thread; it drives the engine
// (Start ... Stop) and returns when the step is over, or early (with what it
// has) when *interrupted becomes true.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "clients/api.h"  // gRPC or HTTP (--http)
#include "clients/loadgen/engine_common.h"

namespace es::loadgen {

// Cumulative counters of one model, as ModelStatistics returns them.
struct ServerCounters {
  uint64_t success_count = 0, success_ns = 0, fail_count = 0, fail_ns = 0;
  uint64_t queue_count = 0, queue_ns = 0;
  uint64_t compute_input_count = 0, compute_input_ns = 0;
  uint64_t compute_infer_count = 0, compute_infer_ns = 0;
  uint64_t compute_output_count = 0, compute_output_ns = 0;
  uint64_t inference_count = 0, execution_count = 0;
};

// Reads the counters of `model`; nullopt if the RPC fails or the model is
// not in the answer.
std::optional<ServerCounters> ReadServerCounters(const es::client::Api& client, const std::string& model,
                                                 const std::string& version);

// The server's figures over an interval (b - a). Averages in µs; -1 where
// the server reported no count for that stage.
struct ServerStages {
  bool available = false;
  uint64_t success = 0, fail = 0, executions = 0, inferences = 0;
  double success_us = -1, queue_us = -1, compute_input_us = -1, compute_infer_us = -1, compute_output_us = -1;
  double avg_batch = -1;  // rows per model execution
};
ServerStages StagesBetween(const std::optional<ServerCounters>& a, const std::optional<ServerCounters>& b);

struct LatencySummary {
  uint64_t count = 0;
  double mean_us = 0, min_us = 0, max_us = 0;
  double p50_us = 0, p90_us = 0, p95_us = 0, p99_us = 0, p999_us = 0;
};
// Nearest-rank percentiles; sorts `ns` in place.
LatencySummary Summarize(std::vector<int64_t>& ns);

// Latency histogram buckets: bucket b holds latencies in
// [2^(b/16), 2^((b+1)/16)) microseconds (about 4.4% wide), so histograms of
// windows can be merged and a percentile read back within one bucket.
int LatencyBucket(int64_t ns);
double BucketUpperUs(int bucket);

// One measurement window.
struct WindowStats {
  double start_unix_s = 0;  // wall clock (system_clock), seconds since the epoch
  double seconds = 0;
  uint64_t sent = 0, ok = 0, failed = 0, hung = 0, unanswered = 0;
  std::map<std::string, uint64_t> errors;  // gRPC code name -> count
  double p50_us = 0, p99_us = 0, max_us = 0;  // of the successful calls (0 if none)
  std::map<int, uint64_t> histogram;          // LatencyBucket -> successful calls
};
WindowStats MakeWindow(const Sample& sample, std::vector<int64_t> latencies_ns);

struct StepResult {
  std::string model;
  bool open_loop = false;
  int concurrency = 0;  // closed loop
  double rate = 0;      // open loop: target requests/s
  int windows = 0;      // measured
  int merged_windows = 0;
  bool stable = false;
  std::vector<double> window_rps;  // every measured window's throughput
  double seconds = 0;              // of the merged windows
  uint64_t sent = 0, ok = 0, failed = 0, skipped = 0;
  uint64_t hung = 0, unanswered = 0;
  std::map<std::string, uint64_t> errors;  // gRPC code name -> count
  bool soak = false;              // run_s step: every window merged
  std::string lost_server;        // why the engine stopped sending, if it did
  std::vector<WindowStats> timeline;  // every measured window
  double throughput_rps = 0;  // successful requests/s
  double rows_per_s = 0;
  double send_rate = 0;       // requests sent/s (open loop: should equal the rate)
  double mean_late_us = 0;    // open loop: mean send lag behind the schedule
  double client_cpu = 0;      // this process's CPU use over the windows, in cores (user + system)
  // --server-pid: CPU time (user + system, core-µs) per successful request
  // over the windows, of the server process alone and of its child
  // processes (the model hosts) together. -1 without --server-pid, when the
  // process was gone at either end, or when no request succeeded.
  double server_cpu_us_per_request = -1;
  double hosts_cpu_us_per_request = -1;
  // --labels: the successful answers of the merged windows checked against
  // their labels, in all and by the answer's `served_by` parameter.
  bool checked = false;
  LabelCounts labelled;
  std::map<std::string, LabelCounts> labelled_by_served_by;
  std::vector<LabelCounts> labelled_by_request;  // Sample::checked_by_request
  uint64_t unreadable = 0;  // successful answers whose output could not be read
  LatencySummary latency;
  ServerStages server;
};

struct StepSettings {
  std::string model, version;
  int64_t batch = 1;
  double warmup_s = 1, duration_s = 2;
  int max_windows = 6, stable_windows = 3;
  double stability = 0.10;
  double run_s = 0;  // > 0: a soak step of this many seconds (max_windows and stability unused)
  // > 0: a soak step that measures exactly this many calls (Engine::RestartRequests's
  // limit) and ends once they ended, however many windows that takes.
  uint64_t requests = 0;
  int server_pid = 0;  // > 0 (--server-pid): read this process's CPU, and its children's, at every boundary
};

// Progress: called after the warm-up and after every window.
using ProgressFn = std::function<void(const std::string& line)>;

StepResult RunStep(Engine& engine, const es::client::Api& stats_client, const LoadPlan& plan,
                   const RequestSet& requests, const StepSettings& settings, const ProgressFn& progress,
                   const std::atomic<bool>* interrupted);

// True when the last `n` values agree: max <= min * (1 + tolerance), min > 0.
bool LastAgree(const std::vector<double>& values, int n, double tolerance);

}  // namespace es::loadgen
