// The log of a server process (the router, a model host): spdlog's default
// logger on standard error, with settings that change while it runs, as
// Triton's logging extension names them: which severities are written
// (log_info, log_warning, log_error, log_verbose_level) and how
// (log_format: "default" and "ISO8601", the same human-readable line here,
// which starts with an ISO 8601 time; or "json", one JSON object a line for
// log shippers: time, level, source, pid, message, and request_id and
// trace_id for a line logged while a LogRequestScope is open on its thread).
//
// A model host writes its lines to a pipe the router copies to its own
// standard error, whole lines, so one log holds both; the router sends each
// host its settings (a control request, and ES_LOG_SETTINGS when it starts
// one) so the hosts follow every change.
//
// Thread safety: every function may be called from any thread; a change
// applies to the lines logged after it returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace es {

enum class LogFormat { kDefault, kIso8601, kJson };

struct LogSettings {
  std::string file;  // where standard error goes ("" = where it was); set at start only
  bool info = true;
  bool warning = true;
  bool error = true;
  uint32_t verbose_level = 0;  // 0: none; 1: debug lines; 2 and more: trace lines too
  LogFormat format = LogFormat::kDefault;
  bool operator==(const LogSettings&) const = default;
};

// "default", "ISO8601", "json".
const char* LogFormatName(LogFormat format);
// The names above, case-sensitive as Triton's; an error lists them.
StatusOr<LogFormat> ParseLogFormat(std::string_view name);

// The settings a single spdlog level stands for (the config's log_level and
// --log-level): trace, debug, info, warn, error, off (each severity from it
// up, verbose 2 for trace, 1 for debug). An error names the levels.
StatusOr<LogSettings> SettingsForLevel(std::string_view level);

// The severities and format as one line of text (not the file), for a
// host's control request and environment: "info=1 warning=1 error=1
// verbose=0 format=json". Decoding checks every field (it crosses a process
// boundary) and names what was wrong.
std::string EncodeLogSettings(const LogSettings& settings);
StatusOr<LogSettings> DecodeLogSettings(std::string_view text);

// Makes spdlog's default logger this process's: `name` for spdlog's
// registry, `source` what each line says it came from ("" for the router's
// plain lines; "host cpu0" is written "[host cpu0]"; json's "source" is
// `source`, else "router"). Call once, first thing; the settings start as
// LogSettings{} (info, warning, error; default format).
void InstallProcessLogger(const std::string& name, const std::string& source);

// The severities and format (not the file) from now on.
void ApplyLogSettings(const LogSettings& settings);

// What ApplyLogSettings last set, and the file RedirectStandardError last
// opened.
LogSettings CurrentLogSettings();

// Appends standard error (the log, and everything else written there, a
// host's lines included) to `path`, created 0640 when missing. An error
// names the file and why.
Status RedirectStandardError(const std::string& path);

// Text a client chose (a request id), as a log line quotes it: in single
// quotes, at most `max_bytes` of it (64: an id's worth), cut before a UTF-8
// character rather than inside one (a json line stays valid UTF-8), with
// quotes and control characters shown as '?', so that it cannot pose as two
// quoted values or as a line of its own. It allocates: call it only for a
// line that will be written (spdlog::should_log).
std::string QuoteClientText(std::string_view text, size_t max_bytes = 64);

// While it lives, json lines logged on this thread name the request they
// were logged for: "request_id" (the request's id, when it has one) and
// "trace_id" (its W3C trace id as 32 hex digits, when it is traced). Scopes
// nest (the inner one wins until it closes). The views must outlive the
// scope; opening one copies nothing, as it is opened for every request.
class LogRequestScope {
 public:
  LogRequestScope(std::string_view request_id, std::string_view trace_id);
  ~LogRequestScope();
  LogRequestScope(const LogRequestScope&) = delete;
  LogRequestScope& operator=(const LogRequestScope&) = delete;

 private:
  std::string_view saved_request_id_, saved_trace_id_;
};

}  // namespace es
