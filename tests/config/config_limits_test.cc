// Ranges that keep every later computation in range: byte sizes, times that
// become std::chrono durations or gRPC's int milliseconds, batch sizes and
// tensor sizes (checked products), CPUs that exist, and model files that stay
// inside the repository. Each refusal names the file, the line and the field.
#include <sched.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "config_fixture.h"

namespace es::testing {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kWeekMs = int64_t{7} * 24 * 3600 * 1000;
constexpr int64_t kTiB = int64_t{1} << 40;

// The fixture's server config with `line` ("key: value") under `limits:`,
// replacing the fixture's own line for that key if it has one.
std::string WithLimit(const std::string& line) {
  std::string yaml = kServerYaml;
  const std::string key = "\n  " + line.substr(0, line.find(':') + 1);
  const size_t at = yaml.find(key);
  if (at != std::string::npos) yaml.erase(at, yaml.find('\n', at + 1) - at);
  return Replace(yaml, "limits:\n", "limits:\n  " + line + "\n");
}

class LimitsTest : public ConfigTest {
 protected:
  // `key: value` under limits: is refused at its line, for its field.
  void ExpectLimitError(const std::string& key, const std::string& value, const std::string& detail) {
    SCOPED_TRACE(key + ": " + value);
    const std::string yaml = WithLimit(key + ": " + value);
    ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, key + ":"),
                      "limits." + key, detail);
  }
  void ExpectLimitLoads(const std::string& key, int64_t value, int64_t Limits::*field) {
    SCOPED_TRACE(key + ": " + std::to_string(value));
    WriteServer(WithLimit(key + ": " + std::to_string(value)));
    StatusOr<ServerConfig> config = Load();
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    EXPECT_EQ(config->limits.*field, value);
  }
  // The fixture's mlp config.yaml with `from` replaced by `to`; returns its path.
  std::string WriteMlp(const std::string& from, const std::string& to) {
    return WriteModel("mlp", Replace(kMlpYaml, from, to));
  }
};

// Every time limit ends up as a std::chrono duration (ns on this clock) added
// to now(): a week is the bound, and nothing past it (up to INT64_MAX, or past
// int64 itself) gets through to overflow one.
TEST_F(LimitsTest, TimeLimitsStopAtAWeek) {
  const std::pair<const char*, int64_t Limits::*> times[] = {
      {"host_startup_timeout_ms", &Limits::host_startup_timeout_ms},
      {"heartbeat_timeout_ms", &Limits::heartbeat_timeout_ms},
      {"drain_timeout_ms", &Limits::drain_timeout_ms},
      {"max_compute_ms", &Limits::max_compute_ms},
  };
  for (const auto& [key, field] : times) {
    ExpectLimitLoads(key, kWeekMs, field);
    ExpectLimitError(key, std::to_string(kWeekMs + 1), "out of range (expected in [");
    ExpectLimitError(key, std::to_string(kWeekMs + 1), ", 604800000])");
    ExpectLimitError(key, "9223372036854775807", "out of range");
    ExpectLimitError(key, "99999999999999999999", "expected an integer");
    ExpectLimitError(key, "0", "out of range");
    ExpectLimitError(key, "-5", "out of range");
  }
}

TEST_F(LimitsTest, ByteLimitsStopAtATebibyte) {
  ExpectLimitError("max_request_bytes", std::to_string(kTiB + 1), "expected in [1, 1099511627776]");
  ExpectLimitError("arena_bytes", std::to_string(kTiB + 1), "expected in [65536, 1099511627776]");
  ExpectLimitError("arena_bytes", "4096", "out of range");
  ExpectLimitError("max_output_bytes", "0", "out of range");
  ExpectLimitError("grpc_memory_quota_bytes", "1000", "expected in [1048576, 1099511627776]");
  ExpectLimitError("grpc_memory_quota_bytes", std::to_string(kTiB + 1), "out of range");
  ExpectLimitLoads("grpc_memory_quota_bytes", kTiB, &Limits::grpc_memory_quota_bytes);
}

// The largest request and its output reservation must fit a host's arena.
TEST_F(LimitsTest, RequestAndOutputMustFitTheArena) {
  {  // The request alone: the error is at max_request_bytes.
    const std::string yaml =
        Replace(WithLimit("arena_bytes: 1048576"), "max_request_bytes: 1024", "max_request_bytes: 2000000");
    ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "max_request_bytes"),
                      "limits.max_request_bytes", "max_request_bytes (2000000) does not fit in arena_bytes (1048576)");
  }
  {  // The default output reservation (16 MiB) in a 1 MiB arena: at arena_bytes,
     // the line the user wrote, saying the other value is the default.
    const std::string yaml = WithLimit("arena_bytes: 1048576");
    ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "arena_bytes"),
                      "limits.arena_bytes",
                      "max_output_bytes (16777216, the default) does not fit in arena_bytes (1048576)");
  }
  {  // Each fits, both together do not.
    const std::string yaml = Replace(WithLimit("arena_bytes: 1048576\n  max_output_bytes: 600000"),
                                     "max_request_bytes: 1024", "max_request_bytes: 600000");
    ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "arena_bytes"),
                      "limits.arena_bytes", "cannot hold a largest request");
  }
  {  // Exactly full is fine.
    WriteServer(Replace(WithLimit("arena_bytes: 1048576\n  max_output_bytes: 1047552"), "max_request_bytes: 1024",
                        "max_request_bytes: 1024"));
    StatusOr<ServerConfig> config = Load();
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    EXPECT_EQ(config->limits.arena_bytes, 1048576);
    EXPECT_EQ(config->limits.max_output_bytes, 1047552);
  }
}

TEST_F(LimitsTest, CountAndGrpcLimits) {
  ExpectLimitError("max_inflight_calls", "0", "out of range");
  ExpectLimitError("max_inflight_calls", std::to_string((int64_t{1} << 24) + 1), "expected in [1, 16777216]");
  ExpectLimitLoads("max_inflight_calls", int64_t{1} << 24, &Limits::max_inflight_calls);
  ExpectLimitError("grpc_max_concurrent_streams", "0", "out of range");
  ExpectLimitError("grpc_max_concurrent_streams", std::to_string((int64_t{1} << 20) + 1), "out of range");
  // gRPC takes these as int milliseconds: INT32_MAX is the most that fits.
  for (const auto& [key, field] : std::vector<std::pair<std::string, int64_t Limits::*>>{
           {"grpc_keepalive_time_ms", &Limits::grpc_keepalive_time_ms},
           {"grpc_keepalive_timeout_ms", &Limits::grpc_keepalive_timeout_ms},
           {"grpc_max_connection_age_ms", &Limits::grpc_max_connection_age_ms},
           {"grpc_max_connection_age_grace_ms", &Limits::grpc_max_connection_age_grace_ms}}) {
    ExpectLimitLoads(key, INT32_MAX, field);
    ExpectLimitError(key, "2147483648", "2147483647]");
    ExpectLimitError(key, "-1", "out of range");
  }
  ExpectLimitError("grpc_keepalive_time_ms", "999", "expected in [1000, ");
  ExpectLimitLoads("grpc_max_connection_age_ms", 0, &Limits::grpc_max_connection_age_ms);  // 0 = unlimited
}

TEST_F(LimitsTest, HttpLimits) {
  for (const auto& [key, field] : std::vector<std::pair<std::string, int64_t Limits::*>>{
           {"http_request_timeout_ms", &Limits::http_request_timeout_ms},
           {"http_idle_timeout_ms", &Limits::http_idle_timeout_ms}}) {
    ExpectLimitLoads(key, kWeekMs, field);
    ExpectLimitLoads(key, 100, field);
    ExpectLimitError(key, "99", "expected in [100, 604800000]");
    ExpectLimitError(key, std::to_string(kWeekMs + 1), "out of range");
  }
  ExpectLimitLoads("http_max_header_bytes", 1024, &Limits::http_max_header_bytes);
  ExpectLimitError("http_max_header_bytes", "1023", "expected in [1024, 16777216]");
  ExpectLimitError("http_max_header_bytes", "4294967296", "out of range");  // past Beast's uint32
  ExpectLimitLoads("http_max_connections", 1, &Limits::http_max_connections);
  ExpectLimitError("http_max_connections", "0", "expected in [1, 1048576]");
  WriteServer(WithLimit("max_inflight_calls: 8"));
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->limits.http_max_header_bytes, 16 << 10);  // the defaults
  EXPECT_EQ(config->limits.http_request_timeout_ms, 30000);
  EXPECT_EQ(config->limits.http_idle_timeout_ms, 60000);
  EXPECT_EQ(config->limits.http_max_connections, 512);
}

// 2^20: bounded because ModelStatistics keeps a counter per batch size.
TEST_F(LimitsTest, MaxBatchSizeIsBounded) {
  const std::string file = WriteMlp("max_batch_size: 64", "max_batch_size: 1048577");
  ExpectConfigError(Load().status(), file, LineOf(kMlpYaml, "max_batch_size"), "max_batch_size",
                    "expected in [0, 1048576]");
  WriteMlp("max_batch_size: 64", "max_batch_size: 1048576");
  // The ensemble's 32 still fits the member; the tensors (3 KiB a row) too.
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->FindModel("mlp")->max_batch_size, 1048576);
}

// Tensor sizes are products of dims, item size and the largest batch,
// computed with checked arithmetic and bounded by 2^40 bytes.
TEST_F(LimitsTest, TensorSizeIsCheckedAtTheDims) {
  {  // 2^32 * 2^32 elements: overflows 64 bits.
    const std::string yaml = Replace(kMlpYaml, "dims: [1, 28, 28]", "dims: [4294967296, 4294967296]");
    const std::string file = WriteModel("mlp", yaml);
    ExpectConfigError(Load().status(), file, LineOf(yaml, "4294967296"), "inputs[0].dims",
                      "tensor 'input' would be more than 2^64 bytes at max_batch_size 64");
  }
  // The rest on a model of its own (an ensemble member's outputs must match
  // the others'); mlp is valid again.
  WriteModel("mlp", kMlpYaml);
  tree_.Write("repo/big/1/model.pt", "");
  {  // 2^30 FP32 per row * 128 rows = 2^39 bytes: fine. * 1024 rows = 2^42: not.
    WriteModel("big", Replace(kCnnYaml, "dims: [10]", "dims: [1073741824]"));
    StatusOr<ServerConfig> config = Load();
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    const std::string yaml =
        Replace(Replace(kCnnYaml, "dims: [10]", "dims: [1073741824]"), "max_batch_size: 128", "max_batch_size: 1024");
    const std::string file = WriteModel("big", yaml);
    ExpectConfigError(Load().status(), file, LineOf(yaml, "1073741824"), "outputs[0].dims",
                      "tensor 'probabilities' would be 4398046511104 bytes at max_batch_size 1024");
  }
  {  // Variable dims count as 1: only the fixed part is bounded here.
    WriteModel("big", Replace(kCnnYaml, "dims: [10]", "dims: [-1, 1073741824]"));
    StatusOr<ServerConfig> config = Load();
    EXPECT_TRUE(config.ok()) << config.status().ToString();
  }
}

TEST_F(LimitsTest, ModelLimits) {
  {
    const std::string yaml = kCnnYaml + "max_compute_ms: " + std::to_string(kWeekMs + 1) + "\n";
    const std::string file = WriteModel("cnn", yaml);
    ExpectConfigError(Load().status(), file, LineOf(yaml, "max_compute_ms"), "max_compute_ms",
                      "expected in [0, 604800000]");
  }
  {
    WriteModel("cnn", kCnnYaml + "max_compute_ms: " + std::to_string(kWeekMs) + "\n");
    StatusOr<ServerConfig> config = Load();
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    EXPECT_EQ(config->FindModel("cnn")->max_compute_ms, kWeekMs);
  }
  for (const std::string& value : {std::string("0"), std::to_string(kTiB + 1)}) {
    const std::string yaml = kCnnYaml + "dynamic_batching:\n  max_queue_bytes: " + value + "\n";
    const std::string file = WriteModel("cnn", yaml);
    ExpectConfigError(Load().status(), file, LineOf(yaml, "max_queue_bytes"), "dynamic_batching.max_queue_bytes",
                      "expected in [1, 1099511627776]");
  }
}

// --- cpu_affinity ----------------------------------------------------------

// The CPUs this test may run on exist, whatever the machine.
std::vector<int> UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {0};
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

TEST_F(LimitsTest, AffinityToACpuThisMachineLacksIsRefused) {
  // CPUs are numbered from 0; the configured count is one past the last.
  const long missing = sysconf(_SC_NPROCESSORS_CONF);
  ASSERT_GT(missing, 0);
  ASSERT_LT(missing, CPU_SETSIZE) << "a machine this large has no missing CPU below cpu_set_t's bound";
  const std::string yaml =
      Replace(kServerYaml, "device: cuda:0", "device: cuda:0\n    cpu_affinity: [0, " + std::to_string(missing) + "]");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_,
                    LineOf(yaml, "cpu_affinity: [0, " + std::to_string(missing)), "hosts[1].cpu_affinity",
                    "CPU " + std::to_string(missing) + " does not exist (this machine has 0");
}

TEST_F(LimitsTest, AffinityBeyondCpuSetIsRefused) {
  const std::string yaml = Replace(kServerYaml, "cpu_affinity: [0, 1]", "cpu_affinity: [1024]");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "[1024]"),
                    "hosts[0].cpu_affinity[0]", "CPU index must be in [0, 1023]");
}

TEST_F(LimitsTest, AffinityToEveryUsableCpuLoads) {
  std::string list;
  for (int cpu : UsableCpus()) list += (list.empty() ? "" : ", ") + std::to_string(cpu);
  WriteServer(Replace(kServerYaml, "cpu_affinity: [0, 1]", "cpu_affinity: [" + list + "]"));
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->hosts[0].cpu_affinity, UsableCpus());
}

// --- symlinks out of the repository ---------------------------------------

TEST_F(LimitsTest, ModelFolderSymlinkOutsideTheRepositoryIsRefused) {
  tree_.Write("elsewhere/stolen/config.yaml", kCnnYaml);
  tree_.Write("elsewhere/stolen/1/model.pt", "");
  fs::create_directory_symlink(tree_.Path("elsewhere/stolen"), tree_.Path("repo/stolen"));
  const Status status = Load().status();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message().rfind(tree_.Path("repo/stolen") + ": the model folder resolves to '" +
                                       fs::canonical(tree_.Path("elsewhere/stolen")).string() +
                                       "', outside the model repository",
                                   0),
            0u)
      << status.message();
  // The same through LoadRepository (no server config).
  EXPECT_FALSE(LoadRepository(tree_.Path("repo")).ok());
}

TEST_F(LimitsTest, ModelFileSymlinkOutsideTheRepositoryIsRefused) {
  tree_.Write("elsewhere/model.pt", "");
  tree_.Remove("repo/cnn/1/model.pt");
  fs::create_symlink(tree_.Path("elsewhere/model.pt"), tree_.Path("repo/cnn/1/model.pt"));
  Status status = Load().status();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message().rfind(tree_.Path("repo/cnn/1/model.pt") + ": the model.pt resolves to '" +
                                       fs::canonical(tree_.Path("elsewhere/model.pt")).string() + "', outside",
                                   0),
            0u)
      << status.message();
  // A version folder that links out is the same thing.
  tree_.Remove("repo/cnn/1");
  tree_.Write("elsewhere/v1/model.pt", "");
  fs::create_directory_symlink(tree_.Path("elsewhere/v1"), tree_.Path("repo/cnn/1"));
  status = Load().status();
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("outside the model repository"), std::string::npos) << status.message();
}

TEST_F(LimitsTest, SymlinksInsideTheRepositoryStillWork) {
  // A model folder linking to another model's folder, and a version whose
  // model.pt links to another version's: both stay inside.
  fs::create_directory_symlink(tree_.Path("repo/cnn"), tree_.Path("repo/cnn_alias"));
  tree_.MakeDir("repo/mlp/4");
  fs::create_symlink("../3/model.pt", tree_.Path("repo/mlp/4/model.pt"));
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_NE(config->FindModel("cnn_alias"), nullptr);
  EXPECT_EQ(config->FindModel("cnn_alias")->versions, (std::vector<int64_t>{1}));
  EXPECT_EQ(config->FindModel("mlp")->versions, (std::vector<int64_t>{1, 3, 4}));
}

TEST_F(LimitsTest, RepositoryReachedThroughASymlinkWorks) {
  fs::create_directory_symlink(tree_.Path("repo"), tree_.Path("repo_link"));
  WriteServer(Replace(kServerYaml, "repository: repo", "repository: repo_link"));
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->models.size(), 3u);
}

}  // namespace
}  // namespace es::testing
