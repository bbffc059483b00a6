#include "common/log_setup.h"

#include <fcntl.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <utility>
#include <vector>

#include "common/errno_text.h"
#include "common/mutex.h"

namespace es {
namespace {

// The request a thread logs for (LogRequestScope); empty: none.
thread_local std::string_view t_request_id, t_trace_id;

// One bit per spdlog level (trace .. critical): the severities written.
uint32_t Bit(spdlog::level::level_enum level) { return 1u << static_cast<uint32_t>(level); }

uint32_t MaskOf(const LogSettings& s) {
  uint32_t mask = 0;
  if (s.verbose_level >= 2) mask |= Bit(spdlog::level::trace);
  if (s.verbose_level >= 1) mask |= Bit(spdlog::level::debug);
  if (s.info) mask |= Bit(spdlog::level::info);
  if (s.warning) mask |= Bit(spdlog::level::warn);
  if (s.error) mask |= Bit(spdlog::level::err) | Bit(spdlog::level::critical);
  return mask;
}

// The logger's own threshold: the least severe level written (so a
// disabled debug line is not even formatted); the sink drops the levels
// above it that are off (Triton's severities are switched one by one).
spdlog::level::level_enum Threshold(uint32_t mask) {
  for (int level = spdlog::level::trace; level < spdlog::level::off; ++level) {
    if ((mask & Bit(static_cast<spdlog::level::level_enum>(level))) != 0) {
      return static_cast<spdlog::level::level_enum>(level);
    }
  }
  return spdlog::level::off;
}

// Passes to `inner` the lines whose level is in the mask.
class SeverityFilterSink final : public spdlog::sinks::sink {
 public:
  explicit SeverityFilterSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}
  void log(const spdlog::details::log_msg& msg) override {
    if ((mask_.load(std::memory_order_relaxed) & Bit(msg.level)) != 0) inner_->log(msg);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }
  void set_mask(uint32_t mask) { mask_.store(mask, std::memory_order_relaxed); }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
  std::atomic<uint32_t> mask_{0};
};

void AppendJsonString(std::string_view text, spdlog::memory_buf_t* out) {
  out->push_back('"');
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (c == '\n') {
      out->append(std::string_view("\\n"));
    } else if (c == '\t') {
      out->append(std::string_view("\\t"));
    } else if (u < 0x20 || u == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", u);
      out->append(std::string_view(escaped));
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

// {"time":"2026-12-04T17:48:53.123456Z","level":"info","source":"router","pid":7,"message":"..."}, with
// ,"request_id":"...","trace_id":"..." before the brace inside a LogRequestScope.
class JsonFormatter final : public spdlog::formatter {
 public:
  explicit JsonFormatter(std::string source) : source_(std::move(source)) {}
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto since_epoch = msg.time.time_since_epoch();
    const std::time_t seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count() % 1000000;
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char time[48];
    std::snprintf(time, sizeof time, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", utc.tm_year + 1900, utc.tm_mon + 1,
                  utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<long long>(micros));
    const auto level = spdlog::level::to_string_view(msg.level);
    dest.append(std::string_view("{\"time\":\""));
    dest.append(std::string_view(time));
    dest.append(std::string_view("\",\"level\":\""));
    dest.append(std::string_view(level.data(), level.size()));
    dest.append(std::string_view("\",\"source\":"));
    AppendJsonString(source_, &dest);
    dest.append(std::string_view(",\"pid\":" + std::to_string(getpid()) + ",\"message\":"));
    AppendJsonString(std::string_view(msg.payload.data(), msg.payload.size()), &dest);
    if (!t_request_id.empty()) {
      dest.append(std::string_view(",\"request_id\":"));
      AppendJsonString(t_request_id, &dest);
    }
    if (!t_trace_id.empty()) {
      dest.append(std::string_view(",\"trace_id\":"));
      AppendJsonString(t_trace_id, &dest);
    }
    dest.append(std::string_view("}\n"));
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(source_); }

 private:
  const std::string source_;
};

// The process's logger state.
struct ProcessLog {
  Mutex mu;
  std::shared_ptr<SeverityFilterSink> sink ABSL_GUARDED_BY(mu);
  std::string source ABSL_GUARDED_BY(mu);
  LogSettings settings ABSL_GUARDED_BY(mu);
};

ProcessLog& Log() {
  static ProcessLog* log = new ProcessLog();  // never destroyed: threads may log during exit
  return *log;
}

void ApplyLocked(ProcessLog& log, const LogSettings& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(log.mu) {
  const std::string file = log.settings.file;
  log.settings = s;
  log.settings.file = file;
  if (log.sink == nullptr) return;
  const uint32_t mask = MaskOf(s);
  log.sink->set_mask(mask);
  if (s.format == LogFormat::kJson) {
    log.sink->set_formatter(std::make_unique<JsonFormatter>(log.source.empty() ? "router" : log.source));
  } else {
    const std::string tag = log.source.empty() ? "" : "[" + log.source + "] ";
    log.sink->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ " + tag + "%v");
  }
  spdlog::set_level(Threshold(mask));
}

}  // namespace

const char* LogFormatName(LogFormat format) {
  switch (format) {
    case LogFormat::kDefault:
      return "default";
    case LogFormat::kIso8601:
      return "ISO8601";
    case LogFormat::kJson:
      return "json";
  }
  return "default";
}

StatusOr<LogFormat> ParseLogFormat(std::string_view name) {
  for (LogFormat f : {LogFormat::kDefault, LogFormat::kIso8601, LogFormat::kJson}) {
    if (name == LogFormatName(f)) return f;
  }
  return Status::InvalidArgument("unknown log format '" + std::string(name) + "' (default, ISO8601 or json)");
}

StatusOr<LogSettings> SettingsForLevel(std::string_view level) {
  LogSettings s;
  if (level == "trace") {
    s.verbose_level = 2;
  } else if (level == "debug") {
    s.verbose_level = 1;
  } else if (level == "info") {
  } else if (level == "warn") {
    s.info = false;
  } else if (level == "error") {
    s.info = s.warning = false;
  } else if (level == "off") {
    s.info = s.warning = s.error = false;
  } else {
    return Status::InvalidArgument("unknown log level '" + std::string(level) +
                                   "' (trace, debug, info, warn, error or off)");
  }
  return s;
}

std::string EncodeLogSettings(const LogSettings& s) {
  return std::string("info=") + (s.info ? "1" : "0") + " warning=" + (s.warning ? "1" : "0") +
         " error=" + (s.error ? "1" : "0") + " verbose=" + std::to_string(s.verbose_level) +
         " format=" + LogFormatName(s.format);
}

StatusOr<LogSettings> DecodeLogSettings(std::string_view text) {
  LogSettings s;
  if (text.size() > 256) return Status::InvalidArgument("log settings: longer than 256 bytes");
  std::vector<std::string_view> seen;
  while (!text.empty()) {
    const size_t end = std::min(text.find(' '), text.size());
    const std::string_view field = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    const size_t eq = field.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidArgument("log settings: '" + std::string(field) + "' is not key=value");
    }
    const std::string_view key = field.substr(0, eq);
    const std::string_view value = field.substr(eq + 1);
    seen.push_back(key);
    auto flag = [&](bool* out) -> Status {
      if (value != "0" && value != "1") {
        return Status::InvalidArgument("log settings: " + std::string(key) + " must be 0 or 1");
      }
      *out = value == "1";
      return Status::Ok();
    };
    if (key == "info") {
      ES_RETURN_IF_ERROR(flag(&s.info));
    } else if (key == "warning") {
      ES_RETURN_IF_ERROR(flag(&s.warning));
    } else if (key == "error") {
      ES_RETURN_IF_ERROR(flag(&s.error));
    } else if (key == "verbose") {
      if (value.empty() || value.size() > 9 || value.find_first_not_of("0123456789") != std::string_view::npos) {
        return Status::InvalidArgument("log settings: verbose must be a number from 0 to 999999999");
      }
      s.verbose_level = static_cast<uint32_t>(std::stoul(std::string(value)));
    } else if (key == "format") {
      ES_ASSIGN_OR_RETURN(s.format, ParseLogFormat(value));
    } else {
      return Status::InvalidArgument("log settings: unknown field '" + std::string(key) + "'");
    }
  }
  for (const char* key : {"info", "warning", "error", "verbose", "format"}) {
    if (std::count(seen.begin(), seen.end(), key) != 1) {
      return Status::InvalidArgument(std::string("log settings: field '") + key + "' missing or repeated");
    }
  }
  return s;
}

void InstallProcessLogger(const std::string& name, const std::string& source) {
  auto sink = std::make_shared<SeverityFilterSink>(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(name, sink));
  ProcessLog& log = Log();
  MutexLock lock(&log.mu);
  log.sink = std::move(sink);
  log.source = source;
  ApplyLocked(log, LogSettings{});
}

void ApplyLogSettings(const LogSettings& settings) {
  ProcessLog& log = Log();
  MutexLock lock(&log.mu);
  ApplyLocked(log, settings);
}

LogSettings CurrentLogSettings() {
  ProcessLog& log = Log();
  MutexLock lock(&log.mu);
  return log.settings;
}

Status RedirectStandardError(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0) return Status::InvalidArgument("cannot open the log file " + path + ": " + ErrnoText(errno));
  const bool moved = dup2(fd, STDERR_FILENO) >= 0;
  const int saved = errno;
  close(fd);
  if (!moved) return Status::Internal("cannot send standard error to " + path + ": " + ErrnoText(saved));
  ProcessLog& log = Log();
  MutexLock lock(&log.mu);
  log.settings.file = path;
  return Status::Ok();
}

LogRequestScope::LogRequestScope(std::string_view request_id, std::string_view trace_id)
    : saved_request_id_(t_request_id), saved_trace_id_(t_trace_id) {
  t_request_id = request_id;
  t_trace_id = trace_id;
}

LogRequestScope::~LogRequestScope() {
  t_request_id = saved_request_id_;
  t_trace_id = saved_trace_id_;
}

std::string QuoteClientText(std::string_view text, size_t max_bytes) {
  const size_t n = Utf8Prefix(text, max_bytes);
  std::string out;
  out.reserve(n + 2);
  out.push_back('\'');
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    out.push_back(c < 0x20 || c == 0x7F || c == '\'' ? '?' : text[i]);
  }
  out.push_back('\'');
  return out;
}

}  // namespace es
