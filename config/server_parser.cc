#include "config/server_parser.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <system_error>

#include "common/errno_text.h"

namespace es {
namespace fs = std::filesystem;
namespace {

constexpr int kMaxPort = 65535;

// "cpu" or "cuda:N": the only devices a model host can be pinned to.
bool ValidDevice(const std::string& device) {
  if (device == "cpu") return true;
  const std::string prefix = "cuda:";
  if (device.rfind(prefix, 0) != 0 || device.size() == prefix.size()) return false;
  return device.size() - prefix.size() <= 4 &&
         std::all_of(device.begin() + static_cast<std::ptrdiff_t>(prefix.size()), device.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// The CPUs online on this machine, from the kernel's list ("0-3,6"); the
// first sysconf(_SC_NPROCESSORS_ONLN) CPUs when sysfs cannot be read.
//
// Machine-wide on purpose, not this process's sched_getaffinity(): model hosts
// load this same config after the launcher pinned them, so their own mask
// would reject the CPUs of their sibling hosts; and a router started under
// `taskset` may still pin its hosts to other CPUs of the machine.
std::set<int> OnlineCpus() {
  std::set<int> cpus;
  std::ifstream file("/sys/devices/system/cpu/online");
  std::string list;
  if (file && std::getline(file, list)) {
    std::stringstream ranges(list);
    std::string range;
    while (std::getline(ranges, range, ',')) {
      int first = 0;
      int last = 0;
      const int n = std::sscanf(range.c_str(), "%d-%d", &first, &last);
      if (n < 1 || first < 0) continue;
      if (n == 1) last = first;
      for (int cpu = first; cpu <= last && cpu < CPU_SETSIZE; ++cpu) cpus.insert(cpu);
    }
  }
  if (cpus.empty()) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    for (long cpu = 0; cpu < std::max(1L, online) && cpu < CPU_SETSIZE; ++cpu) cpus.insert(static_cast<int>(cpu));
  }
  return cpus;
}

// {0, 1, 2, 5} -> "0-2,5", as the kernel writes CPU lists.
std::string CpuList(const std::set<int>& cpus) {
  std::string text;
  for (auto it = cpus.begin(); it != cpus.end();) {
    const int first = *it;
    int last = first;
    while (++it != cpus.end() && *it == last + 1) last = *it;
    if (!text.empty()) text += ',';
    text += std::to_string(first);
    if (last > first) text.append("-").append(std::to_string(last));
  }
  return text;
}

// A CPU that does not exist would only fail when the host starts (its pinning
// fails in the forked child, far from the config line), so it is refused here.
// The upper bound is cpu_set_t's: the launcher sets these bits with CPU_SET.
Status ParseAffinity(const yaml::Field& field, const std::set<int>& online, std::vector<int>* cpus) {
  ES_RETURN_IF_ERROR(yaml::CheckSequence(field));
  std::set<int64_t> seen;
  for (const yaml::Field& item : yaml::Items(field)) {
    ES_ASSIGN_OR_RETURN(int64_t cpu, yaml::ReadInt(item));
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return yaml::Error(item, "CPU index must be in [0, " + std::to_string(CPU_SETSIZE - 1) + "]");
    }
    if (!online.count(static_cast<int>(cpu))) {
      // The line of the entry, the path of the list (as the user reads it).
      return yaml::ErrorAt(
          item.file, item.line, field.path,
          "CPU " + std::to_string(cpu) + " does not exist (this machine has " + CpuList(online) + ")");
    }
    if (!seen.insert(cpu).second) {
      return yaml::Error(item, "CPU " + std::to_string(cpu) + " listed twice");
    }
    cpus->push_back(static_cast<int>(cpu));
  }
  return Status::Ok();
}

Status ParseHost(const yaml::Field& field, const std::set<int>& online, HostConfig* host) {
  ES_RETURN_IF_ERROR(
      yaml::CheckMap(field, {"name", "device", "cpu_affinity", "threads", "executors", "binary"}));
  ES_RETURN_IF_ERROR(yaml::ReadRequiredString(field, "name", &host->name));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "device", &host->device));
  if (!ValidDevice(host->device)) {
    return yaml::Error(yaml::Child(field, "device"),
                       "unknown device '" + host->device + "' (expected cpu or cuda:N)");
  }
  ES_RETURN_IF_ERROR(ParseAffinity(yaml::Child(field, "cpu_affinity"), online, &host->cpu_affinity));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "threads", 1, 1024, &host->threads));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "binary", &host->binary));
  // Bounded by the channel: each executor has its own watchdog slot (ipc::kMaxExecutors).
  return yaml::ReadOptionalInt(field, "executors", 1, 64, &host->executors);
}

Status ParseHosts(const yaml::Field& field, std::vector<HostConfig>* hosts) {
  if (!field.present()) return yaml::Error(field, "missing required field (at least one host)");
  ES_RETURN_IF_ERROR(yaml::CheckSequence(field));
  std::set<std::string> names;
  const std::set<int> online = OnlineCpus();
  for (const yaml::Field& item : yaml::Items(field)) {
    HostConfig host;
    ES_RETURN_IF_ERROR(ParseHost(item, online, &host));
    if (!names.insert(host.name).second) {
      return yaml::Error(yaml::Child(item, "name"), "duplicate host name '" + host.name + "'");
    }
    hosts->push_back(std::move(host));
  }
  if (hosts->empty()) return yaml::Error(field, "at least one host is required");
  return Status::Ok();
}

// A request and its output reservation must fit one host's arena together,
// or every such request would fail there instead of being refused up front.
// The error points at the field the user wrote (a default has no line): the
// one that alone is too large, else arena_bytes.
Status CheckArenaFits(const yaml::Field& field, const Limits& limits) {
  const yaml::Field arena = yaml::Child(field, "arena_bytes");
  auto at = [&](const char* key) {
    const yaml::Field f = yaml::Child(field, key);
    return f.present() || !arena.present() ? f : arena;
  };
  auto value = [&](const char* key, int64_t v) {
    return std::string(key) + " (" + std::to_string(v) + (yaml::Child(field, key).present() ? "" : ", the default") +
           ")";
  };
  const std::string arena_text = value("arena_bytes", limits.arena_bytes);
  for (const auto& [key, v] : {std::pair<const char*, int64_t>{"max_request_bytes", limits.max_request_bytes},
                               std::pair<const char*, int64_t>{"max_output_bytes", limits.max_output_bytes}}) {
    if (v > limits.arena_bytes) return yaml::Error(at(key), value(key, v) + " does not fit in " + arena_text);
  }
  // Both are at most 2^40 (the ranges above), so the sum cannot overflow.
  if (limits.max_request_bytes + limits.max_output_bytes > limits.arena_bytes) {
    return yaml::Error(arena.present() ? arena : at("max_request_bytes"),
                       arena_text + " cannot hold a largest request, " +
                           value("max_request_bytes", limits.max_request_bytes) +
                           ", and its variable-size output reservation, " +
                           value("max_output_bytes", limits.max_output_bytes) + ", at once");
  }
  return Status::Ok();
}

Status ParseLimits(const yaml::Field& field, Limits* limits) {
  if (!field.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(
      field, {"max_request_bytes", "arena_bytes", "max_output_bytes", "host_startup_timeout_ms",
              "heartbeat_timeout_ms", "drain_timeout_ms", "channel_spin_polls", "max_compute_ms",
              "max_inflight_calls", "grpc_memory_quota_bytes", "grpc_max_concurrent_streams",
              "grpc_keepalive_time_ms", "grpc_keepalive_timeout_ms", "grpc_max_connection_age_ms",
              "grpc_max_connection_age_grace_ms", "http_max_header_bytes", "http_request_timeout_ms",
              "http_idle_timeout_ms", "http_max_connections"}));
  // Ranges keep every later computation in range: byte sizes fit the arena
  // arithmetic, times fit std::chrono and gRPC's int milliseconds.
  constexpr int64_t kMaxBytes = int64_t{1} << 40;    // 1 TiB
  constexpr int64_t kMaxMs = int64_t{7} * 24 * 3600 * 1000;  // a week
  struct Range {
    const char* key;
    int64_t* out;
    int64_t min;
    int64_t max;
  };
  const Range fields[] = {
      {"max_request_bytes", &limits->max_request_bytes, 1, kMaxBytes},
      {"arena_bytes", &limits->arena_bytes, 1 << 16, kMaxBytes},
      {"max_output_bytes", &limits->max_output_bytes, 1, kMaxBytes},
      {"host_startup_timeout_ms", &limits->host_startup_timeout_ms, 1, kMaxMs},
      {"heartbeat_timeout_ms", &limits->heartbeat_timeout_ms, 200, kMaxMs},
      {"drain_timeout_ms", &limits->drain_timeout_ms, 1, kMaxMs},
      {"max_compute_ms", &limits->max_compute_ms, 1, kMaxMs},
      {"max_inflight_calls", &limits->max_inflight_calls, 1, int64_t{1} << 24},
      {"grpc_memory_quota_bytes", &limits->grpc_memory_quota_bytes, int64_t{1} << 20, kMaxBytes},
      {"grpc_max_concurrent_streams", &limits->grpc_max_concurrent_streams, 1, int64_t{1} << 20},
      {"grpc_keepalive_time_ms", &limits->grpc_keepalive_time_ms, 1000, INT32_MAX},
      {"grpc_keepalive_timeout_ms", &limits->grpc_keepalive_timeout_ms, 1000, INT32_MAX},
      {"grpc_max_connection_age_ms", &limits->grpc_max_connection_age_ms, 0, INT32_MAX},
      {"grpc_max_connection_age_grace_ms", &limits->grpc_max_connection_age_grace_ms, 0, INT32_MAX},
      // Beast's header limit is a uint32; 1 KiB is less than any client's own headers.
      {"http_max_header_bytes", &limits->http_max_header_bytes, 1024, int64_t{1} << 24},
      {"http_request_timeout_ms", &limits->http_request_timeout_ms, 100, kMaxMs},
      {"http_idle_timeout_ms", &limits->http_idle_timeout_ms, 100, kMaxMs},
      {"http_max_connections", &limits->http_max_connections, 1, int64_t{1} << 20},
  };
  for (const Range& r : fields) {
    ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, r.key, r.min, r.max, r.out));
  }
  ES_RETURN_IF_ERROR(CheckArenaFits(field, *limits));
  // 0 is valid here: sleep at once, never poll.
  return yaml::ReadOptionalInt(field, "channel_spin_polls", int64_t{0}, int64_t{100000000},
                               &limits->channel_spin_polls);
}

Status ParseLogLevel(const yaml::Field& root, std::string* level) {
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(root, "log_level", level));
  for (const char* known : {"trace", "debug", "info", "warn", "error", "off"}) {
    if (*level == known) return Status::Ok();
  }
  return yaml::Error(yaml::Child(root, "log_level"),
                     "unknown log level '" + *level +
                         "' (expected trace, debug, info, warn, error or off)");
}

// trace: Triton's trace settings (the file relative to the config's folder;
// the url is checked when the server starts, server/tracing/otlp_exporter.h).
Status ParseTrace(const yaml::Field& field, ServerConfig::Trace* trace) {
  if (!field.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(field, {"mode", "file", "url", "level", "rate", "count", "log_frequency"}));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "mode", &trace->mode));
  if (trace->mode != "triton" && trace->mode != "opentelemetry") {
    return yaml::Error(yaml::Child(field, "mode"), "unknown trace mode '" + trace->mode + "' (triton or opentelemetry)");
  }
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "url", &trace->url));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "level", &trace->level));
  if (trace->level != "OFF" && trace->level != "TIMESTAMPS") {
    return yaml::Error(yaml::Child(field, "level"), "unknown trace level '" + trace->level + "' (OFF or TIMESTAMPS)");
  }
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "rate", int64_t{1}, int64_t{1} << 40, &trace->rate));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "count", int64_t{-1}, int64_t{1} << 40, &trace->count));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "log_frequency", int64_t{0}, int64_t{1} << 40, &trace->log_frequency));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "file", &trace->file));
  if (!trace->file.empty()) {
    fs::path path(trace->file);
    if (path.is_relative()) path = fs::path(field.file).parent_path() / path;
    trace->file = path.lexically_normal().string();
  }
  if (trace->level == "TIMESTAMPS" && trace->mode == "triton" && trace->file.empty()) {
    return yaml::Error(yaml::Child(field, "level"), "level TIMESTAMPS needs a file (where the traces go)");
  }
  if (trace->level == "TIMESTAMPS" && trace->mode == "opentelemetry" && trace->url.empty()) {
    return yaml::Error(yaml::Child(field, "level"),
                       "level TIMESTAMPS in mode opentelemetry needs a url (the collector's, e.g. "
                       "http://localhost:4318/v1/traces)");
  }
  return Status::Ok();
}

// log_format: the names of common/log_setup.h; log_file: relative to the
// config file's folder, as the repository is.
Status ParseLogOutput(const yaml::Field& root, ServerConfig* config) {
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(root, "log_format", &config->log_format));
  if (config->log_format != "default" && config->log_format != "ISO8601" && config->log_format != "json") {
    return yaml::Error(yaml::Child(root, "log_format"),
                       "unknown log format '" + config->log_format + "' (expected default, ISO8601 or json)");
  }
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(root, "log_file", &config->log_file));
  if (!config->log_file.empty()) {
    fs::path path(config->log_file);
    if (path.is_relative()) path = fs::path(root.file).parent_path() / path;
    config->log_file = path.lexically_normal().string();
  }
  return Status::Ok();
}

Status ParseModelControlMode(const yaml::Field& root, ModelControlMode* mode) {
  std::string name = ModelControlModeName(*mode);
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(root, "model_control_mode", &name));
  for (ModelControlMode m : {ModelControlMode::kNone, ModelControlMode::kExplicit, ModelControlMode::kPoll}) {
    if (name == ModelControlModeName(m)) {
      *mode = m;
      return Status::Ok();
    }
  }
  return yaml::Error(yaml::Child(root, "model_control_mode"),
                     "unknown model control mode '" + name + "' (expected none, explicit or poll)");
}

// Relative to the config file's folder, so the config works from any cwd.
Status ResolveRepository(const yaml::Field& root, std::string* repository) {
  ES_RETURN_IF_ERROR(yaml::ReadRequiredString(root, "repository", repository));
  fs::path path(*repository);
  if (path.is_relative()) path = fs::path(root.file).parent_path() / path;
  std::error_code ec;
  path = fs::absolute(path, ec).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();  // "repo/" -> "repo"
  const yaml::Field field = yaml::Child(root, "repository");
  if (ec || !fs::is_directory(path, ec)) {
    return yaml::Error(field, "model repository folder '" + path.string() +
                                  "' does not exist (relative paths start at the config "
                                  "file's folder)");
  }
  *repository = path.string();
  return Status::Ok();
}

// Relative to the config file's folder; never inside the repository, which
// is the operator's (a rescan would take uploads for models of its own).
Status ResolveUploadDir(const yaml::Field& root, const std::string& repository, std::string* upload_dir) {
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(root, "model_upload_dir", upload_dir));
  if (upload_dir->empty()) return Status::Ok();
  fs::path path(*upload_dir);
  if (path.is_relative()) path = fs::path(root.file).parent_path() / path;
  std::error_code ec;
  path = fs::absolute(path, ec).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();
  const fs::path repo = fs::path(repository);
  const auto [repo_end, path_end] = std::mismatch(repo.begin(), repo.end(), path.begin(), path.end());
  if (repo_end == repo.end()) {
    std::string message = "'";
    message += path.string();
    message += "' lies inside the model repository '" + repository + "' (uploads go to a folder of the server's own)";
    return yaml::Error(yaml::Child(root, "model_upload_dir"), message);
  }
  *upload_dir = path.string();
  return Status::Ok();
}

// --- tls:, auth:, metrics_address --------------------------------------------

// A file the server reads at start-up (certificates, keys, tokens): relative
// to the config file's folder, made absolute, and checked to be a readable
// regular file now, so a typo fails at load with the config line, not later
// at the first TLS handshake or request.
Status ResolveReadableFile(const yaml::Field& map, std::string_view key, std::string* path_out) {
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(map, key, path_out));
  const yaml::Field field = yaml::Child(map, key);
  if (!field.present()) return Status::Ok();
  if (path_out->empty()) return yaml::Error(field, "empty path");
  fs::path path(*path_out);
  if (path.is_relative()) path = fs::path(map.file).parent_path() / path;
  std::error_code ec;
  path = fs::absolute(path, ec).lexically_normal();
  const std::string shown = path.string();
  if (ec || !fs::exists(path, ec)) {
    return yaml::Error(field, "file '" + shown + "' does not exist (relative paths start at the config file's folder)");
  }
  if (!fs::is_regular_file(path, ec)) return yaml::Error(field, "'" + shown + "' is not a regular file");
  if (::access(shown.c_str(), R_OK) != 0) {
    return yaml::Error(field, "file '" + shown + "' is not readable: " + es::ErrnoText(errno));
  }
  *path_out = shown;
  return Status::Ok();
}

// tls: {cert, key, client_ca}. cert and key come together; client_ca (mTLS)
// needs them: a server that asks clients for certificates must itself speak TLS.
Status ParseTls(const yaml::Field& field, TlsConfig* tls) {
  if (!field.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(field, {"cert", "key", "client_ca"}));
  ES_RETURN_IF_ERROR(ResolveReadableFile(field, "cert", &tls->cert));
  ES_RETURN_IF_ERROR(ResolveReadableFile(field, "key", &tls->key));
  ES_RETURN_IF_ERROR(ResolveReadableFile(field, "client_ca", &tls->client_ca));
  if (tls->cert.empty()) {
    for (const char* key : {"key", "client_ca"}) {
      const yaml::Field given = yaml::Child(field, key);
      if (given.present()) return yaml::Error(given, "needs tls.cert (the server's own certificate)");
    }
    return yaml::Error(field, "tls needs cert and key (PEM files)");
  }
  if (tls->key.empty()) return yaml::Error(yaml::Child(field, "cert"), "needs tls.key (the certificate's private key)");
  return Status::Ok();
}

// auth: {tokens_file, open_health}. The tokens themselves are read by
// AuthPolicy::Load at start-up (server/security/auth_policy.h), which names a bad line.
Status ParseAuth(const yaml::Field& field, AuthConfig* auth) {
  if (!field.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(field, {"tokens_file", "open_health"}));
  ES_RETURN_IF_ERROR(ResolveReadableFile(field, "tokens_file", &auth->tokens_file));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalBool(field, "open_health", &auth->open_health));
  if (auth->tokens_file.empty()) return yaml::Error(field, "auth needs tokens_file");
  return Status::Ok();
}

Status ParseMetricsAddress(const yaml::Field& root, std::string* address) {
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(root, "metrics_address", address));
  const yaml::Field field = yaml::Child(root, "metrics_address");
  // A host only: the port is metrics_port (or --metrics-port).
  if (field.present() && (address->empty() || address->find_first_of(" /") != std::string::npos)) {
    return yaml::Error(field, "expected a host address such as 127.0.0.1 or 0.0.0.0 (the port is metrics_port)");
  }
  return Status::Ok();
}

}  // namespace

Status ParseServerConfig(const yaml::Field& root, ServerConfig* config) {
  ES_RETURN_IF_ERROR(yaml::CheckMap(root, {"repository", "listen_address", "grpc_port",
                                           "metrics_port", "http_port", "log_level", "log_format", "log_file",
                                           "response_cache", "trace", "hosts",
                                           "limits", "model_control_mode", "repository_poll_secs",
                                           "model_upload_dir", "metrics_address", "tls", "auth"}));
  ES_RETURN_IF_ERROR(ResolveRepository(root, &config->repository));
  ES_RETURN_IF_ERROR(ResolveUploadDir(root, config->repository, &config->model_upload_dir));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(root, "listen_address", &config->listen_address));
  // Port 0 asks for a free port (the server prints the one it got).
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(root, "grpc_port", 0, kMaxPort, &config->grpc_port));
  ES_RETURN_IF_ERROR(
      yaml::ReadOptionalInt(root, "metrics_port", 0, kMaxPort, &config->metrics_port));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(root, "http_port", 0, kMaxPort, &config->http_port));
  ES_RETURN_IF_ERROR(ParseLogLevel(root, &config->log_level));
  ES_RETURN_IF_ERROR(ParseLogOutput(root, config));
  ES_RETURN_IF_ERROR(ParseTrace(yaml::Child(root, "trace"), &config->trace));
  if (const yaml::Field cache = yaml::Child(root, "response_cache"); cache.present()) {
    ES_RETURN_IF_ERROR(yaml::CheckMap(cache, {"size_bytes"}));
    // At most 1 TiB: a bound, not a wish.
    ES_RETURN_IF_ERROR(
        yaml::ReadOptionalInt(cache, "size_bytes", int64_t{0}, int64_t{1} << 40, &config->response_cache_bytes));
  }
  ES_RETURN_IF_ERROR(ParseModelControlMode(root, &config->model_control_mode));
  // At most a day: a poll that rare is no poll.
  ES_RETURN_IF_ERROR(
      yaml::ReadOptionalInt(root, "repository_poll_secs", int64_t{1}, int64_t{86400}, &config->repository_poll_secs));
  ES_RETURN_IF_ERROR(ParseMetricsAddress(root, &config->metrics_address));
  ES_RETURN_IF_ERROR(ParseTls(yaml::Child(root, "tls"), &config->tls));
  ES_RETURN_IF_ERROR(ParseAuth(yaml::Child(root, "auth"), &config->auth));
  ES_RETURN_IF_ERROR(ParseHosts(yaml::Child(root, "hosts"), &config->hosts));
  return ParseLimits(yaml::Child(root, "limits"), &config->limits);
}

}  // namespace es
