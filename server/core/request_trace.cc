#include "server/core/request_trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>

#include <spdlog/spdlog.h>

#include "common/errno_text.h"
#include "common/steady_clock.h"

namespace es {
namespace {

constexpr size_t kMaxQueued = 10000;  // traces waiting for the writer; more are dropped
// Opentelemetry mode: an export carries up to kTracesPerExport traces, and
// the writer waits up to kExportDelay for that many (as OpenTelemetry's
// batch span processors do): one request per trace would cost the
// collector, and this machine, a connection each.
constexpr size_t kTracesPerExport = 256;
constexpr auto kExportDelay = std::chrono::milliseconds(200);

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", u);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

template <typename T>
std::optional<T> Number(const std::string& text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

uint64_t RequestTrace::NowNs() { return SteadyNs(SteadyClock::now()); }

void RequestTrace::Mark(const char* name, uint64_t ns) {
  MutexLock lock(&mu_);
  marks_.emplace_back(name, ns);
}

void RequestTrace::AddSpan(const char* name, uint64_t start_ns, uint64_t end_ns) {
  MutexLock lock(&mu_);
  spans_.push_back({name, start_ns, end_ns});
}

void RequestTrace::SetHost(HostTimes times) {
  MutexLock lock(&mu_);
  host_ = std::move(times);
}

void RequestTrace::SetError(std::string message) {
  MutexLock lock(&mu_);
  error_ = std::move(message);
}

void RequestTrace::Continue(const RemoteParent& parent, std::string trace_state) {
  MutexLock lock(&mu_);
  context_.trace_id = parent.trace_id;
  context_.parent_span_id = parent.span_id;
  context_.trace_state = std::move(trace_state);
}

TraceContext RequestTrace::context() const {
  MutexLock lock(&mu_);
  return context_;
}

RequestTrace::Snapshot RequestTrace::Take() const {
  MutexLock lock(&mu_);
  return Snapshot{id_, parent_id_, model_, request_id_, version_, context_, marks_, spans_, host_, error_};
}

void RequestTrace::set_version(int64_t version) {
  MutexLock lock(&mu_);
  version_ = version;
}

std::string RequestTrace::Json() const {
  MutexLock lock(&mu_);
  std::string out = "{\"id\":" + std::to_string(id_) + ",\"model_name\":" + JsonString(model_) +
                    ",\"model_version\":" + std::to_string(version_) + ",\"request_id\":" + JsonString(request_id_);
  if (parent_id_ != 0) out += ",\"parent_id\":" + std::to_string(parent_id_);
  out += "},\n{\"id\":" + std::to_string(id_) + ",\"timestamps\":[";
  for (size_t i = 0; i < marks_.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.append("{\"name\":\"").append(marks_[i].first).append("\",\"ns\":");
    out.append(std::to_string(marks_[i].second)).push_back('}');
  }
  return out + "]}";
}

Tracer::Tracer(TraceSettings settings, TraceExporter* exporter)
    : server_(std::move(settings)), exporter_(exporter) {
  {
    MutexLock lock(&mu_);
    UpdateActiveLocked();
  }
  writer_ = std::thread([this] { WriterLoop(); });
}

void Tracer::UpdateActiveLocked() {
  bool active = server_.timestamps && server_.count != 0;
  for (const auto& [model, o] : models_) {
    const Sampling s = SamplingLocked(model);
    active = active || (s.timestamps && s.count != 0);
  }
  const bool has_output = server_.mode == "opentelemetry" ? exporter_ != nullptr : !server_.file.empty();
  active_.store(active && has_output && !stopping_);
}

Tracer::~Tracer() { Stop(); }

Tracer::Sampling Tracer::SamplingLocked(const std::string& model) const {
  Sampling s{server_.timestamps, server_.rate, server_.count};
  auto it = models_.find(model);
  if (it == models_.end()) return s;
  const TraceOverride& o = it->second;
  if (o.timestamps) s.timestamps = *o.timestamps;
  if (o.rate) s.rate = *o.rate;
  if (o.count) s.count = *o.count;
  return s;
}

TraceSettings Tracer::EffectiveLocked(const std::string& model) const {
  TraceSettings s = server_;
  const Sampling sampling = SamplingLocked(model);
  s.timestamps = sampling.timestamps;
  s.rate = sampling.rate;
  s.count = sampling.count;
  auto it = models_.find(model);
  if (it != models_.end() && it->second.log_frequency) s.log_frequency = *it->second.log_frequency;
  return s;
}

std::shared_ptr<RequestTrace> Tracer::Sample(const std::string& model, int64_t version,
                                             const std::string& request_id) {
  if (!active_.load(std::memory_order_relaxed)) return nullptr;
  MutexLock lock(&mu_);
  const Sampling s = SamplingLocked(model);
  if (!s.timestamps || s.count == 0 || stopping_) return nullptr;
  const uint64_t n = seen_[model]++;
  if (s.rate == 0 || n % s.rate != 0) return nullptr;
  if (s.count > 0) {
    // The count left is the model's own when it overrides it, else the server's.
    auto it = models_.find(model);
    if (it != models_.end() && it->second.count) {
      --*it->second.count;
    } else {
      --server_.count;
    }
    UpdateActiveLocked();
  }
  TraceContext context;
  context.trace_id = NewTraceId();
  context.span_id = NewSpanId();
  return std::make_shared<RequestTrace>(next_id_++, 0, model, version, request_id, std::move(context));
}

std::shared_ptr<RequestTrace> Tracer::Child(const RequestTrace& parent, const std::string& model) {
  TraceContext context = parent.context();
  context.parent_span_id = context.span_id;
  context.span_id = NewSpanId();
  return std::make_shared<RequestTrace>(next_id_++, parent.id(), model, 0, "", std::move(context));
}

void Tracer::Finish(std::shared_ptr<RequestTrace> trace) {
  if (trace == nullptr) return;
  MutexLock lock(&mu_);
  if (stopping_ || queue_.size() >= kMaxQueued) {
    dropped_.fetch_add(1);
    return;
  }
  queue_.push_back(std::move(trace));
  // The writer sleeps only on an empty queue, or (exporting) until a batch
  // is full: a wake-up per trace would be a futex call per traced request.
  if (queue_.size() == 1 || queue_.size() == kTracesPerExport) cv_.NotifyOne();
}

TraceSettings Tracer::Settings(const std::string& model) const {
  MutexLock lock(&mu_);
  return EffectiveLocked(model);
}

void Tracer::SetServer(const TraceSettings& settings) {
  MutexLock lock(&mu_);
  const TraceSettings kept = server_;  // file, mode and url are set at start only
  server_ = settings;
  server_.file = kept.file;
  server_.mode = kept.mode;
  server_.url = kept.url;
  UpdateActiveLocked();
}

void Tracer::SetModel(const std::string& model, const TraceOverride& override) {
  MutexLock lock(&mu_);
  if (override.empty()) {
    models_.erase(model);
  } else {
    models_[model] = override;
  }
  UpdateActiveLocked();
}

TraceOverride Tracer::Override(const std::string& model) const {
  MutexLock lock(&mu_);
  auto it = models_.find(model);
  return it == models_.end() ? TraceOverride{} : it->second;
}

void Tracer::WriterLoop() {
  for (;;) {
    std::deque<std::shared_ptr<RequestTrace>> batch;
    std::string file;
    uint64_t frequency = 0;
    bool stopping = false;
    bool exporting = false;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !stopping_) cv_.Wait(&mu_);
      if (server_.mode == "opentelemetry") {
        const auto until = std::chrono::steady_clock::now() + kExportDelay;
        while (queue_.size() < kTracesPerExport && !stopping_ && cv_.WaitUntil(&mu_, until)) {
        }
      }
      batch.swap(queue_);
      file = server_.file;
      frequency = server_.log_frequency;
      stopping = stopping_;
      exporting = server_.mode == "opentelemetry";
    }
    if (exporting) {
      ExportBatch(batch);
      if (stopping) return;
      continue;
    }
    MutexLock lock(&file_mu_);
    for (const std::shared_ptr<RequestTrace>& trace : batch) {
      if (fd_ < 0) {
        const std::string path = frequency > 0 ? file + "." + std::to_string(file_index_++) : file;
        fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
        if (fd_ < 0) {
          spdlog::warn("trace file {}: {}; traces dropped", path, ErrnoText(errno));
          dropped_.fetch_add(batch.size());
          break;
        }
        in_file_ = 0;
        (void)Write("[\n");
      }
      if (!Write((in_file_ > 0 ? ",\n" : "") + trace->Json()).ok()) {
        dropped_.fetch_add(1);
        continue;
      }
      ++in_file_;
      written_.fetch_add(1);
      if (frequency > 0 && in_file_ >= frequency) CloseFileLocked();
    }
    if (stopping) {
      CloseFileLocked();
      return;
    }
  }
}

void Tracer::ExportBatch(const std::deque<std::shared_ptr<RequestTrace>>& batch) {
  if (exporter_ == nullptr) {
    dropped_.fetch_add(batch.size());
    return;
  }
  // In pieces, so one export request stays a few hundred kilobytes.
  for (size_t i = 0; i < batch.size(); i += kTracesPerExport) {
    const std::vector<std::shared_ptr<RequestTrace>> piece(
        batch.begin() + static_cast<std::ptrdiff_t>(i),
        batch.begin() + static_cast<std::ptrdiff_t>(std::min(batch.size(), i + kTracesPerExport)));
    const size_t delivered = std::min(exporter_->Export(piece), piece.size());
    written_.fetch_add(delivered);
    if (delivered < piece.size()) {
      // The collector failed this one: the rest of the batch is dropped
      // rather than waited for, piece by piece (at shutdown too).
      dropped_.fetch_add(batch.size() - i - delivered);
      return;
    }
  }
}

Status Tracer::Write(const std::string& json) {
  size_t done = 0;
  while (done < json.size()) {
    const ssize_t n = write(fd_, json.data() + done, json.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Internal("trace file: " + ErrnoText(errno));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

void Tracer::CloseFileLocked() {
  if (fd_ < 0) return;
  (void)Write("\n]\n");
  close(fd_);
  fd_ = -1;
}

void Tracer::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    UpdateActiveLocked();
    cv_.NotifyAll();
  }
  if (writer_.joinable()) writer_.join();
}

Status ApplyTraceSetting(const std::string& name, const std::vector<std::string>& values, TraceOverride* o,
                         bool server_level) {
  const TraceSettings defaults;
  if (name == "trace_file" || name == "trace_mode") {
    return Status::InvalidArgument("trace setting '" + name +
                                   "' is set when the server starts (--trace-file, --trace-mode)");
  }
  if (values.size() > 1 && name != "trace_level") {
    return Status::InvalidArgument("trace setting '" + name + "' takes one value");
  }
  if (name == "trace_level") {
    if (values.empty()) {
      o->timestamps = server_level ? std::optional<bool>(defaults.timestamps) : std::nullopt;
      return Status::Ok();
    }
    bool timestamps = false;
    for (const std::string& v : values) {
      if (v == "TIMESTAMPS") {
        timestamps = true;
      } else if (v != "OFF") {
        return Status::InvalidArgument("trace setting 'trace_level': '" + v +
                                       "' is not OFF or TIMESTAMPS (TENSORS is not traced here)");
      }
    }
    o->timestamps = timestamps;
    return Status::Ok();
  }
  if (name == "trace_rate" || name == "log_frequency") {
    std::optional<uint64_t>& field = name == "trace_rate" ? o->rate : o->log_frequency;
    if (values.empty()) {
      field = server_level ? std::optional<uint64_t>(name == "trace_rate" ? defaults.rate : defaults.log_frequency)
                           : std::nullopt;
      return Status::Ok();
    }
    const std::optional<uint64_t> v = Number<uint64_t>(values[0]);
    if (!v || (name == "trace_rate" && *v == 0)) {
      return Status::InvalidArgument("trace setting '" + name + "': '" + values[0] + "' is not a whole number" +
                                     (name == "trace_rate" ? " of 1 or more" : " of 0 or more"));
    }
    field = *v;
    return Status::Ok();
  }
  if (name == "trace_count") {
    if (values.empty()) {
      o->count = server_level ? std::optional<int64_t>(defaults.count) : std::nullopt;
      return Status::Ok();
    }
    const std::optional<int64_t> v = Number<int64_t>(values[0]);
    if (!v || *v < -1) {
      return Status::InvalidArgument("trace setting 'trace_count': '" + values[0] +
                                     "' is not -1 (no limit) or a whole number of 0 or more");
    }
    o->count = *v;
    return Status::Ok();
  }
  return Status::InvalidArgument("unknown trace setting '" + name +
                                 "' (trace_level, trace_rate, trace_count, log_frequency, trace_file, trace_mode)");
}

StatusOr<std::pair<std::string, std::string>> ParseTraceConfigFlag(const std::string& flag) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("'" + flag + "': " + why +
                                   " (taken: level=, rate=, count=, mode=, triton,file=, triton,log-frequency=, "
                                   "opentelemetry,url=)");
  };
  std::string scope;  // "", "triton" or "opentelemetry"
  std::string setting = flag;
  const size_t comma = flag.find(',');
  if (comma != std::string::npos) {
    scope = flag.substr(0, comma);
    setting = flag.substr(comma + 1);
    if (scope != "triton" && scope != "opentelemetry") return bad("unknown trace mode '" + scope + "'");
  }
  const size_t equals = setting.find('=');
  if (equals == std::string::npos || equals == 0) return bad("expected NAME=VALUE");
  std::string name = setting.substr(0, equals);
  const std::string value = setting.substr(equals + 1);
  if (value.empty()) return bad("no value for '" + name + "'");
  if (name == "log-frequency") name = "log_frequency";
  const bool global = name == "level" || name == "rate" || name == "count" || name == "mode";
  const bool triton = name == "file" || name == "log_frequency";
  if (scope.empty() && (global || triton)) return std::make_pair(name, value);
  if (scope == "triton" && triton) return std::make_pair(name, value);
  if (scope == "opentelemetry" && name == "url") return std::make_pair(name, value);
  if (scope == "opentelemetry") {
    return bad("opentelemetry setting '" + name + "' is not supported (only url: the collector's OTLP/HTTP URL)");
  }
  return bad("unknown setting '" + name + "'" + (scope.empty() ? "" : " of mode " + scope));
}

}  // namespace es
