// Fuzz target: es::LoadServerConfig on a server YAML that is the input.
//
// The file is written to the process's scratch folder beside a fixed model
// repository `models/` (a TorchScript model and an ensemble of it; no more,
// as every input loads the whole repository again), so
// seeds that say `repository: models` reach the cross checks (hosts named by
// models, ensembles) and not just the document's own fields. Loading must
// never crash or throw past the loader, and an accepted config must hold the
// documented ranges: ports, sizes that fit the arena, and time limits that
// std::chrono can turn into nanoseconds without overflow.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <string_view>

#include "config/server_config.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_files.h"

namespace {

constexpr std::string_view kMlp = R"(platform: torchscript
max_batch_size: 8
inputs:
  - {name: input, datatype: FP32, dims: [2, -1]}
outputs:
  - {name: probabilities, datatype: FP32, dims: [10]}
hosts: [cpu0]
dynamic_batching: {max_queue_delay_us: 100, preferred_batch_sizes: [2, 4]}
)";

constexpr std::string_view kEns = R"(platform: ensemble
max_batch_size: 8
ensemble: {combine: weighted_mean, members: [{model: mlp, weight: 2}]}
)";

const es::fuzz::FuzzDir& Tree() {
  static const es::fuzz::FuzzDir dir("es_fuzz_server_config_");
  static const bool written = [] {
    dir.Write("models/mlp/config.yaml", kMlp);
    dir.Write("models/mlp/1/model.pt", "");
    dir.Write("models/ens/config.yaml", kEns);
    return true;
  }();
  (void)written;
  return dir;
}

void CheckAccepted(const es::ServerConfig& config) {
  for (int port : {config.grpc_port, config.metrics_port, config.http_port}) {
    FUZZ_CHECK(port >= 0 && port <= 65535, "port %d accepted", port);
  }
  FUZZ_CHECK(!config.hosts.empty(), "a config without hosts accepted");
  std::set<std::string> hosts;
  for (const es::HostConfig& host : config.hosts) {
    FUZZ_CHECK(hosts.insert(host.name).second, "host '%s' defined twice", host.name.c_str());
    FUZZ_CHECK(host.threads >= 1 && host.executors >= 1, "host '%s': threads %d, executors %d accepted",
               host.name.c_str(), host.threads, host.executors);
  }
  const es::Limits& l = config.limits;
  FUZZ_CHECK(l.arena_bytes > 0 && l.max_request_bytes > 0 && l.max_output_bytes > 0, "a non-positive size accepted");
  FUZZ_CHECK(l.max_request_bytes <= l.arena_bytes, "max_request_bytes %lld > arena_bytes %lld",
             static_cast<long long>(l.max_request_bytes), static_cast<long long>(l.arena_bytes));
  FUZZ_CHECK(l.max_output_bytes <= l.arena_bytes, "max_output_bytes %lld > arena_bytes %lld",
             static_cast<long long>(l.max_output_bytes), static_cast<long long>(l.arena_bytes));
  // Every duration is used as std::chrono::milliseconds and added to a
  // steady_clock (nanosecond) time point: it must convert without overflow.
  constexpr int64_t kMaxMs = std::numeric_limits<int64_t>::max() / 1000000 / 2;
  for (int64_t ms : {l.host_startup_timeout_ms, l.heartbeat_timeout_ms, l.drain_timeout_ms, l.max_compute_ms,
                     l.grpc_keepalive_time_ms, l.grpc_keepalive_timeout_ms, l.grpc_max_connection_age_ms,
                     l.grpc_max_connection_age_grace_ms}) {
    FUZZ_CHECK(ms >= 0 && ms <= kMaxMs, "time limit %lld ms accepted", static_cast<long long>(ms));
  }
  for (const auto& [name, model] : config.models) {
    FUZZ_CHECK(name == model.name, "model '%s' stored as '%s'", model.name.c_str(), name.c_str());
    if (model.is_ensemble()) continue;
    FUZZ_CHECK(!model.hosts.empty(), "model '%s' runs on no host", name.c_str());
    for (const std::string& host : model.hosts) {
      FUZZ_CHECK(config.FindHost(host) != nullptr, "model '%s' placed on unknown host '%s'", name.c_str(),
                 host.c_str());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const es::fuzz::FuzzDir& tree = Tree();
  const std::string path =
      tree.Write("server.yaml", std::string_view(reinterpret_cast<const char*>(data), size));
  es::StatusOr<es::ServerConfig> config = es::LoadServerConfig(path);
  if (config.ok()) {
    CheckAccepted(*config);
  } else {
    FUZZ_CHECK(!config.status().message().empty(), "an error without a message");
  }
  return 0;
}
