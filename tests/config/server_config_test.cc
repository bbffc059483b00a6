// LoadServerConfig on valid input: every field lands where it should.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config_fixture.h"
#include "tests/common/test_paths.h"

namespace es::testing {
namespace {

TEST_F(ConfigTest, LoadsServerFields) {
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->path, server_path_);
  EXPECT_EQ(config->repository, tree_.Path("repo"));
  EXPECT_EQ(config->listen_address, "0.0.0.0");
  EXPECT_EQ(config->grpc_port, 9001);
  EXPECT_EQ(config->metrics_port, 9002);
  EXPECT_EQ(config->http_port, 0);
  EXPECT_EQ(config->log_level, "debug");
  ASSERT_EQ(config->hosts.size(), 2u);
  // The log's format and file; the file relative to the config's folder.
  WriteServer(Replace(kServerYaml, "log_level: debug", "log_level: debug\nlog_format: json\nlog_file: logs/es.log"));
  StatusOr<ServerConfig> logged = Load();
  ASSERT_TRUE(logged.ok()) << logged.status().ToString();
  EXPECT_EQ(logged->log_format, "json");
  EXPECT_EQ(logged->log_file, (std::filesystem::path(server_path_).parent_path() / "logs/es.log").string());
  // Triton's trace settings at start; the file relative to the config's folder.
  WriteServer(Replace(kServerYaml, "log_level: debug",
                      "log_level: debug\ntrace: {file: traces/t.json, level: TIMESTAMPS, rate: 10, count: 5, "
                      "log_frequency: 2}"));
  StatusOr<ServerConfig> traced = Load();
  ASSERT_TRUE(traced.ok()) << traced.status().ToString();
  EXPECT_EQ(traced->trace.file, (std::filesystem::path(server_path_).parent_path() / "traces/t.json").string());
  EXPECT_EQ(traced->trace.level, "TIMESTAMPS");
  EXPECT_EQ(traced->trace.rate, 10);
  EXPECT_EQ(traced->trace.count, 5);
  EXPECT_EQ(traced->trace.log_frequency, 2);
  EXPECT_EQ(config->hosts[0].name, "cpu0");
  EXPECT_EQ(config->hosts[0].device, "cpu");
  EXPECT_EQ(config->hosts[0].cpu_affinity, (std::vector<int>{0, 1}));
  EXPECT_EQ(config->hosts[0].threads, 2);
  EXPECT_EQ(config->hosts[0].executors, 3);
  EXPECT_EQ(config->hosts[1].device, "cuda:0");
  EXPECT_TRUE(config->hosts[1].cpu_affinity.empty());
  EXPECT_EQ(config->hosts[1].threads, 1);
  EXPECT_EQ(config->limits.max_request_bytes, 1024);
  EXPECT_EQ(config->limits.drain_timeout_ms, 500);
  EXPECT_EQ(config->limits.arena_bytes, Limits{}.arena_bytes);  // default kept
  EXPECT_EQ(config->FindHost("gpu0"), &config->hosts[1]);
  EXPECT_EQ(config->FindHost("nope"), nullptr);
}

TEST_F(ConfigTest, LoadsTorchScriptModels) {
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_EQ(config->models.size(), 3u);
  const ModelConfig* mlp = config->FindModel("mlp");
  ASSERT_NE(mlp, nullptr);
  EXPECT_EQ(mlp->name, "mlp");
  EXPECT_EQ(mlp->platform, "torchscript");
  EXPECT_EQ(mlp->directory, tree_.Path("repo/mlp"));
  EXPECT_EQ(mlp->max_batch_size, 64);
  EXPECT_TRUE(mlp->batched());
  ASSERT_EQ(mlp->inputs.size(), 1u);
  EXPECT_EQ(mlp->inputs[0].name, "input");
  EXPECT_EQ(mlp->inputs[0].datatype, DataType::kFp32);
  EXPECT_EQ(mlp->inputs[0].dims, (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(mlp->outputs[0].name, "probabilities");
  EXPECT_EQ(mlp->outputs[0].dims, (std::vector<int64_t>{10}));
  EXPECT_EQ(mlp->versions, (std::vector<int64_t>{1, 3}));  // "notes/" ignored
  EXPECT_EQ(mlp->LatestVersion(), 3);
  EXPECT_EQ(mlp->ModelPath(3), tree_.Path("repo/mlp/3/model.pt"));
  EXPECT_EQ(mlp->hosts, (std::vector<std::string>{"cpu0"}));
  EXPECT_EQ(mlp->instances_per_host, 2);
  // No `hosts:`: every host of the server config, in its order.
  const ModelConfig* cnn = config->FindModel("cnn");
  ASSERT_NE(cnn, nullptr);
  EXPECT_EQ(cnn->hosts, (std::vector<std::string>{"cpu0", "gpu0"}));
  EXPECT_EQ(cnn->instances_per_host, 1);
  EXPECT_EQ(config->FindModel("rnn"), nullptr);
}

TEST_F(ConfigTest, LoadsEnsembleWithTensorsFromFirstMember) {
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const ModelConfig* ens = config->FindModel("ens");
  ASSERT_NE(ens, nullptr);
  EXPECT_TRUE(ens->is_ensemble());
  EXPECT_EQ(ens->ensemble.combine, CombineRule::kWeightedMean);
  ASSERT_EQ(ens->ensemble.members.size(), 2u);
  EXPECT_EQ(ens->ensemble.members[0].model, "mlp");
  EXPECT_DOUBLE_EQ(ens->ensemble.members[0].weight, 2.5);
  EXPECT_EQ(ens->ensemble.members[1].model, "cnn");
  EXPECT_DOUBLE_EQ(ens->ensemble.members[1].weight, 1.0);
  ASSERT_EQ(ens->inputs.size(), 1u);
  EXPECT_EQ(ens->inputs[0].dims, (std::vector<int64_t>{1, 28, 28}));
  ASSERT_EQ(ens->outputs.size(), 1u);
  EXPECT_EQ(ens->outputs[0].name, "probabilities");
  EXPECT_TRUE(ens->hosts.empty());
  EXPECT_TRUE(ens->versions.empty());
}

TEST_F(ConfigTest, DefaultsWhenOptionalFieldsAreOmitted) {
  WriteServer("repository: repo\nhosts:\n  - name: cpu0\n");
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const ServerConfig defaults;
  EXPECT_EQ(config->listen_address, defaults.listen_address);
  EXPECT_EQ(config->grpc_port, 8001);
  EXPECT_EQ(config->metrics_port, 8002);
  EXPECT_EQ(config->http_port, 8000);
  EXPECT_EQ(config->log_level, "info");
  EXPECT_EQ(config->log_format, "default");
  EXPECT_EQ(config->log_file, "") << "standard error";
  EXPECT_EQ(config->hosts[0].device, "cpu");
  EXPECT_EQ(config->limits.heartbeat_timeout_ms, Limits{}.heartbeat_timeout_ms);
  EXPECT_EQ(config->FindModel("cnn")->hosts, (std::vector<std::string>{"cpu0"}));
}

TEST_F(ConfigTest, RepositoryPathIsRelativeToTheConfigFile) {
  tree_.Write("etc/server.yaml", Replace(kServerYaml, "repository: repo", "repository: ../repo/"));
  const std::string cwd = std::filesystem::current_path();
  std::filesystem::current_path("/");  // the process's folder must not matter
  StatusOr<ServerConfig> config = LoadServerConfig(tree_.Path("etc/server.yaml"));
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->repository, tree_.Path("repo"));
}

// model_upload_dir: relative to the config's folder, "" by default (a
// temporary folder), and never inside the repository (the operator's).
TEST_F(ConfigTest, ModelUploadDirIsTheServersOwn) {
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->model_upload_dir, "");
  WriteServer(Replace(kServerYaml, "repository: repo", "repository: repo\nmodel_upload_dir: uploads/"));
  config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->model_upload_dir, tree_.Path("uploads"));
  for (const std::string inside : {"repo", "repo/uploads", "./repo/../repo/x"}) {
    WriteServer(Replace(kServerYaml, "repository: repo", "repository: repo\nmodel_upload_dir: " + inside));
    const Status s = Load().status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << inside;
    EXPECT_NE(s.message().find("model_upload_dir: '"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("lies inside the model repository"), std::string::npos) << s.message();
  }
}

TEST_F(ConfigTest, AbsoluteRepositoryPath) {
  WriteServer(Replace(kServerYaml, "repository: repo", "repository: " + tree_.Path("repo")));
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->repository, tree_.Path("repo"));
}

TEST_F(ConfigTest, MajorityVoteOnClassProbabilities) {
  WriteModel("ens", Replace(kEnsYaml, "weighted_mean", "majority_vote"));
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->FindModel("ens")->ensemble.combine, CombineRule::kMajorityVote);
  EXPECT_STREQ(CombineRuleName(CombineRule::kMajorityVote), "majority_vote");
}

// The user-facing example must load as documented: copy it into a tree that
// has the `../build/demo_repo` it names and load it from there.
TEST(DemoConfigTest, DemoYamlLoads) {
  std::ifstream in(std::string(es::test_paths::kSourceDir) + "/config/demo.yaml");
  ASSERT_TRUE(in.good()) << "config/demo.yaml is missing";
  std::stringstream text;
  text << in.rdbuf();
  TempTree tree;
  const std::string path = tree.Write("config/demo.yaml", text.str());
  tree.Write("build/demo_repo/mlp/config.yaml", kMlpYaml);
  tree.Write("build/demo_repo/mlp/1/model.pt", "");
  StatusOr<ServerConfig> config = LoadServerConfig(path);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->repository, tree.Path("build/demo_repo"));
  EXPECT_EQ(config->listen_address, "127.0.0.1");
  EXPECT_EQ(config->grpc_port, 8001);
  EXPECT_EQ(config->metrics_port, 8002);
  EXPECT_EQ(config->http_port, 8000);
  ASSERT_EQ(config->hosts.size(), 2u);
  EXPECT_EQ(config->hosts[0].name, "cpu0");
  EXPECT_EQ(config->hosts[0].cpu_affinity, (std::vector<int>{0}));
  EXPECT_EQ(config->hosts[1].name, "cpu1");
  EXPECT_EQ(config->hosts[1].cpu_affinity, (std::vector<int>{1}));
  for (const HostConfig& host : config->hosts) {
    EXPECT_EQ(host.device, "cpu");
    EXPECT_EQ(host.threads, 1);
    EXPECT_EQ(host.executors, 1);
  }
}

}  // namespace
}  // namespace es::testing
