// Request traces: which requests are traced (TraceSettings: level, rate,
// count, per model over the server's), the named timestamps of each
// (RequestTrace), and where they go (Tracer): in Triton's "triton" trace
// mode a trace file, in "opentelemetry" mode a TraceExporter (OTLP spans,
// server/tracing/otlp_exporter.h).
//
// A traced request carries its RequestTrace (InferRequest::trace); the
// front end marks its transport's and REQUEST_START/END, the dispatcher
// QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END (the inputs are in the
// host's arena), COMPUTE_OUTPUT_START (the host's completion arrived) and
// COMPUTE_END (the outputs copied out). Each member call of an ensemble is a
// trace of its own, its parent_id the ensemble's trace id, as Triton links
// an ensemble's steps. Timestamps are steady-clock nanoseconds, as Triton's.
// For OpenTelemetry a trace also carries its W3C trace context (a member
// call's span is a child of its ensemble's), the host's own timestamps of
// the call (SetHost, from the completion) and the spans no Triton timestamp
// names (AddSpan: an ensemble's combine, the answer's encoding).
//
// The file: a JSON array of objects, two per trace, as Triton writes it:
//   {"id": 7, "model_name": "mlp", "model_version": 1, "request_id": "...", "parent_id": 6}
//   {"id": 7, "timestamps": [{"name": "REQUEST_START", "ns": 1234}, ...]}
// With log_frequency N > 0, every N traces go to `<trace_file>.<k>` (k = 0,
// 1, ...), each a whole array; with 0, all go to `<trace_file>`, whose array
// is closed when the tracer stops (the server's shutdown). Traces are
// written by a background thread from a bounded queue: a slow disk never
// holds up a request; traces the queue cannot take are dropped and counted.
// In opentelemetry mode the same thread hands them to the exporter, so a
// slow or absent collector holds up nothing but that thread.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "server/core/trace_context.h"

namespace es {

// Triton's trace settings. Each field of a per-model override may be
// unset (the server's value applies).
struct TraceSettings {
  bool timestamps = false;   // trace_level: OFF (false) or TIMESTAMPS
  uint64_t rate = 1000;      // trace_rate: one request in `rate` is traced
  int64_t count = -1;        // trace_count: traces left to take; -1 = no limit
  uint64_t log_frequency = 0;
  std::string file;          // trace_file; set at start only
  std::string mode = "triton";  // or "opentelemetry"; set at start only
  std::string url;              // opentelemetry: the collector's OTLP/HTTP traces URL
};
struct TraceOverride {
  std::optional<bool> timestamps;
  std::optional<uint64_t> rate;
  std::optional<int64_t> count;
  std::optional<uint64_t> log_frequency;
  bool empty() const { return !timestamps && !rate && !count && !log_frequency; }
};

// What a host reported of one call (ipc::CompletionDesc), on its own
// steady clock: when it took the request off the ring, when the model's
// forward began and ended.
struct HostTimes {
  std::string host;  // the host's name (config hosts[].name)
  uint64_t received_ns = 0, compute_start_ns = 0, compute_end_ns = 0;
};

class RequestTrace {
 public:
  RequestTrace(uint64_t id, uint64_t parent_id, std::string model, int64_t version, std::string request_id,
               TraceContext context)
      : id_(id), parent_id_(parent_id), model_(std::move(model)), version_(version),
        request_id_(std::move(request_id)), context_(std::move(context)) {}

  // Records `name` (one of Triton's timestamp names) at `ns` (steady clock),
  // by default now.
  void Mark(const char* name, uint64_t ns = NowNs());
  static uint64_t NowNs();

  // A span no Triton timestamp names ("combine", "encode"), [start, end].
  void AddSpan(const char* name, uint64_t start_ns, uint64_t end_ns) ABSL_LOCKS_EXCLUDED(mu_);
  // The host's times of this call (the last call's, when retried).
  void SetHost(HostTimes times) ABSL_LOCKS_EXCLUDED(mu_);
  // The request (or member call) failed: why (a span's ERROR status).
  void SetError(std::string message) ABSL_LOCKS_EXCLUDED(mu_);
  // Continues the client's trace: its trace id, its span as this one's
  // parent, its tracestate. Called before any member call's trace is made.
  void Continue(const RemoteParent& parent, std::string trace_state) ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t id() const { return id_; }
  TraceContext context() const ABSL_LOCKS_EXCLUDED(mu_);
  void set_version(int64_t version) ABSL_LOCKS_EXCLUDED(mu_);
  // The two JSON objects of the file (see above), comma-separated.
  std::string Json() const ABSL_LOCKS_EXCLUDED(mu_);

  // Everything recorded, copied (for the exporter's thread).
  struct Span {
    const char* name;
    uint64_t start_ns, end_ns;
  };
  struct Snapshot {
    uint64_t id = 0, parent_id = 0;
    std::string model, request_id;
    int64_t version = 0;
    TraceContext context;
    std::vector<std::pair<const char*, uint64_t>> marks;
    std::vector<Span> spans;
    std::optional<HostTimes> host;
    std::string error;  // empty: no error recorded
  };
  Snapshot Take() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const uint64_t id_, parent_id_;
  const std::string model_;
  mutable Mutex mu_;
  int64_t version_ ABSL_GUARDED_BY(mu_);
  const std::string request_id_;
  std::vector<std::pair<const char*, uint64_t>> marks_ ABSL_GUARDED_BY(mu_);
  std::vector<Span> spans_ ABSL_GUARDED_BY(mu_);
  std::optional<HostTimes> host_ ABSL_GUARDED_BY(mu_);
  std::string error_ ABSL_GUARDED_BY(mu_);
  TraceContext context_ ABSL_GUARDED_BY(mu_);
};

// Where finished traces go in opentelemetry mode. Export runs on the
// tracer's writer thread, one batch at a time, and returns how many of the
// traces it delivered (the rest count as dropped).
class TraceExporter {
 public:
  virtual ~TraceExporter() = default;
  virtual size_t Export(const std::vector<std::shared_ptr<RequestTrace>>& traces) = 0;
};

class Tracer {
 public:
  // `settings`: the server's, from the flags. Traces are taken only when
  // they have somewhere to go: a file (mode triton), or `exporter` (mode
  // opentelemetry; it outlives the tracer).
  explicit Tracer(TraceSettings settings, TraceExporter* exporter = nullptr);
  ~Tracer();  // Stop()
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // A new trace for a request of `model` when the settings say so (level
  // TIMESTAMPS, the rate's turn, count left), else nullptr.
  std::shared_ptr<RequestTrace> Sample(const std::string& model, int64_t version, const std::string& request_id);
  // A member call's trace under `parent` (always taken: the ensemble's was).
  std::shared_ptr<RequestTrace> Child(const RequestTrace& parent, const std::string& model);
  // The trace is complete: queued for the file.
  void Finish(std::shared_ptr<RequestTrace> trace);

  // The server's settings, or `model`'s ("" = the server's) with its
  // override applied.
  TraceSettings Settings(const std::string& model) const;
  // Replaces the server's settings (file, mode and url excepted) or sets `model`'s
  // override (an empty override removes it).
  void SetServer(const TraceSettings& settings);
  void SetModel(const std::string& model, const TraceOverride& override);
  TraceOverride Override(const std::string& model) const;

  uint64_t dropped() const { return dropped_.load(); }
  uint64_t written() const { return written_.load(); }
  // Writes what is queued and closes the file's array. Idempotent.
  void Stop();

 private:
  void WriterLoop();
  void ExportBatch(const std::deque<std::shared_ptr<RequestTrace>>& batch);
  Status Write(const std::string& json) ABSL_EXCLUSIVE_LOCKS_REQUIRED(file_mu_);
  void CloseFileLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(file_mu_);
  TraceSettings EffectiveLocked(const std::string& model) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The sampling fields alone of `model`'s settings: Sample runs for every
  // request while tracing is on, and EffectiveLocked copies three strings.
  struct Sampling {
    bool timestamps;
    uint64_t rate;
    int64_t count;
  };
  Sampling SamplingLocked(const std::string& model) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  TraceSettings server_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, TraceOverride> models_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> seen_ ABSL_GUARDED_BY(mu_);  // requests per model, for the rate
  std::deque<std::shared_ptr<RequestTrace>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  CondVar cv_;
  // Whether any request may be traced (a level TIMESTAMPS with a file):
  // read without the lock first, so tracing off costs one atomic load.
  std::atomic<bool> active_{false};
  void UpdateActiveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> dropped_{0}, written_{0};

  Mutex file_mu_;  // the writer thread's, and Stop's
  int fd_ ABSL_GUARDED_BY(file_mu_) = -1;
  uint64_t in_file_ ABSL_GUARDED_BY(file_mu_) = 0;  // traces in the open file
  uint64_t file_index_ ABSL_GUARDED_BY(file_mu_) = 0;
  std::thread writer_;
  TraceExporter* const exporter_;
};

// Parses a trace setting's value as the API gives it (Triton: a list of
// strings) into `settings` / `override`: trace_level, trace_rate,
// trace_count, log_frequency (trace_file and trace_mode are read only).
// An empty list clears a model's override of that setting (the server's
// applies) and restores a server setting's default. Errors name the setting.
Status ApplyTraceSetting(const std::string& name, const std::vector<std::string>& values, TraceOverride* override,
                         bool server_level);

// One value of Triton's --trace-config flag, as a setting name and its
// value: "level=TIMESTAMPS", "rate=N", "count=N", "mode=triton|opentelemetry"
// (global), "triton,file=PATH", "triton,log-frequency=N" (also without the
// "triton," prefix) and "opentelemetry,url=URL". The name comes back as one
// of mode, level, rate, count, file, log_frequency, url; the value as given
// (the caller checks it as it checks the --trace-* flags). Anything else is
// an error naming it and what is taken.
StatusOr<std::pair<std::string, std::string>> ParseTraceConfigFlag(const std::string& flag);

}  // namespace es
