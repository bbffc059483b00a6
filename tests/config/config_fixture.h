// A valid server config and repository, written to a temp folder per test;
// error tests break one thing at a time and check where the error points.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "config/server_config.h"
#include "config_test_util.h"

namespace es::testing {

inline const std::string kServerYaml = R"(# a test server
repository: repo
listen_address: 0.0.0.0
grpc_port: 9001
metrics_port: 9002
http_port: 0
log_level: debug
hosts:
  - name: cpu0
    device: cpu
    cpu_affinity: [0, 1]
    threads: 2
    executors: 3
  - name: gpu0
    device: cuda:0
limits:
  max_request_bytes: 1024
  drain_timeout_ms: 500
)";

inline const std::string kMlpYaml = R"(name: mlp
platform: torchscript
max_batch_size: 64
inputs:
  - {name: input, datatype: FP32, dims: [1, 28, 28]}
outputs:
  - {name: probabilities, datatype: FP32, dims: [10]}
hosts: [cpu0]
instances_per_host: 2
)";

// No name (the folder names it), no hosts (all hosts), block-style tensors.
inline const std::string kCnnYaml = R"(platform: torchscript
max_batch_size: 128
inputs:
  - name: input
    datatype: FP32
    dims: [1, 28, 28]
outputs:
  - name: probabilities
    datatype: FP32
    dims: [10]
)";

// Inputs and outputs omitted: copied from the first member.
inline const std::string kEnsYaml = R"(platform: ensemble
max_batch_size: 32
ensemble:
  combine: weighted_mean
  members:
    - {model: mlp, weight: 2.5}
    - {model: cnn}
)";

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_path_ = tree_.Write("server.yaml", kServerYaml);
    WriteModel("mlp", kMlpYaml);
    tree_.Write("repo/mlp/1/model.pt", "");
    tree_.Write("repo/mlp/3/model.pt", "");
    tree_.Write("repo/mlp/notes/README", "not a version");
    WriteModel("cnn", kCnnYaml);
    tree_.Write("repo/cnn/1/model.pt", "");
    WriteModel("ens", kEnsYaml);
  }

  // Writes repo/<name>/config.yaml and returns its path.
  std::string WriteModel(const std::string& name, const std::string& yaml) {
    return tree_.Write("repo/" + name + "/config.yaml", yaml);
  }
  std::string WriteServer(const std::string& yaml) { return tree_.Write("server.yaml", yaml); }
  StatusOr<ServerConfig> Load() { return LoadServerConfig(server_path_); }

  TempTree tree_;
  std::string server_path_;
};

// `text` with the first `from` replaced by `to` (which must be there).
inline std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "fixture lacks: " << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

}  // namespace es::testing
