#include "config/server_parser.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <set>
#include <system_error>

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

Status ParseAffinity(const yaml::Field& field, std::vector<int>* cpus) {
  ES_RETURN_IF_ERROR(yaml::CheckSequence(field));
  std::set<int64_t> seen;
  for (const yaml::Field& item : yaml::Items(field)) {
    StatusOr<int64_t> cpu = yaml::ReadInt(item);
    if (!cpu.ok()) return cpu.status();
    // Not checked against the CPUs online here: the config may be written
    // for another machine; pinning fails loudly when the host starts.
    if (*cpu < 0 || *cpu > 65535) return yaml::Error(item, "CPU index must be in [0, 65535]");
    if (!seen.insert(*cpu).second) {
      return yaml::Error(item, "CPU " + std::to_string(*cpu) + " listed twice");
    }
    cpus->push_back(static_cast<int>(*cpu));
  }
  return Status::Ok();
}

Status ParseHost(const yaml::Field& field, HostConfig* host) {
  ES_RETURN_IF_ERROR(
      yaml::CheckMap(field, {"name", "device", "cpu_affinity", "threads", "executors"}));
  ES_RETURN_IF_ERROR(yaml::ReadRequiredString(field, "name", &host->name));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "device", &host->device));
  if (!ValidDevice(host->device)) {
    return yaml::Error(yaml::Child(field, "device"),
                       "unknown device '" + host->device + "' (expected cpu or cuda:N)");
  }
  ES_RETURN_IF_ERROR(ParseAffinity(yaml::Child(field, "cpu_affinity"), &host->cpu_affinity));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "threads", 1, 1024, &host->threads));
  return yaml::ReadOptionalInt(field, "executors", 1, 1024, &host->executors);
}

Status ParseHosts(const yaml::Field& field, std::vector<HostConfig>* hosts) {
  if (!field.present()) return yaml::Error(field, "missing required field (at least one host)");
  ES_RETURN_IF_ERROR(yaml::CheckSequence(field));
  std::set<std::string> names;
  for (const yaml::Field& item : yaml::Items(field)) {
    HostConfig host;
    ES_RETURN_IF_ERROR(ParseHost(item, &host));
    if (!names.insert(host.name).second) {
      return yaml::Error(yaml::Child(item, "name"), "duplicate host name '" + host.name + "'");
    }
    hosts->push_back(std::move(host));
  }
  if (hosts->empty()) return yaml::Error(field, "at least one host is required");
  return Status::Ok();
}

Status ParseLimits(const yaml::Field& field, Limits* limits) {
  if (!field.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(
      field, {"max_request_bytes", "arena_bytes", "max_output_bytes", "host_startup_timeout_ms",
              "heartbeat_timeout_ms", "drain_timeout_ms", "channel_spin_polls"}));
  const std::pair<const char*, int64_t*> fields[] = {
      {"max_request_bytes", &limits->max_request_bytes},
      {"arena_bytes", &limits->arena_bytes},
      {"max_output_bytes", &limits->max_output_bytes},
      {"host_startup_timeout_ms", &limits->host_startup_timeout_ms},
      {"heartbeat_timeout_ms", &limits->heartbeat_timeout_ms},
      {"drain_timeout_ms", &limits->drain_timeout_ms},
  };
  for (const auto& [key, out] : fields) {
    ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, key, int64_t{1}, INT64_MAX, out));
  }
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

}  // namespace

Status ParseServerConfig(const yaml::Field& root, ServerConfig* config) {
  ES_RETURN_IF_ERROR(yaml::CheckMap(root, {"repository", "listen_address", "grpc_port",
                                           "metrics_port", "http_port", "log_level", "hosts",
                                           "limits"}));
  ES_RETURN_IF_ERROR(ResolveRepository(root, &config->repository));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(root, "listen_address", &config->listen_address));
  // Port 0 asks for a free port (the server prints the one it got).
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(root, "grpc_port", 0, kMaxPort, &config->grpc_port));
  ES_RETURN_IF_ERROR(
      yaml::ReadOptionalInt(root, "metrics_port", 0, kMaxPort, &config->metrics_port));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(root, "http_port", 0, kMaxPort, &config->http_port));
  ES_RETURN_IF_ERROR(ParseLogLevel(root, &config->log_level));
  ES_RETURN_IF_ERROR(ParseHosts(yaml::Child(root, "hosts"), &config->hosts));
  return ParseLimits(yaml::Child(root, "limits"), &config->limits);
}

}  // namespace es
