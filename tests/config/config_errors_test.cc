// Every config error names the file, the line and the field, and the server
// refuses to start: each test breaks one thing in the valid fixture and checks
// that the error points at it.
#include "config_fixture.h"

namespace es::testing {
namespace {

// --- server config -------------------------------------------------------

TEST_F(ConfigTest, UnknownServerKey) {
  const std::string yaml = Replace(kServerYaml, "    threads: 2", "    thread: 2");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_,
                    LineOf(yaml, "thread: 2"), "hosts[0].thread", "unknown key 'thread'");
}

TEST_F(ConfigTest, UnknownTopLevelKey) {
  const std::string yaml = kServerYaml + "grpc_prot: 1\n";
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_,
                    LineOf(yaml, "grpc_prot"), "grpc_prot", "expected one of");
}

TEST_F(ConfigTest, BadDevice) {
  const std::string yaml = Replace(kServerYaml, "device: cuda:0", "device: gpu0");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_,
                    LineOf(yaml, "device: gpu0"), "hosts[1].device",
                    "unknown device 'gpu0' (expected cpu or cuda:N)");
}

TEST_F(ConfigTest, DuplicateHostName) {
  const std::string yaml = Replace(kServerYaml, "name: gpu0", "name: cpu0");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_,
                    LineOf(yaml, "  - name: cpu0\n    device: cuda:0"), "hosts[1].name",
                    "duplicate host name 'cpu0'");
}

TEST_F(ConfigTest, NonIntegerThreads) {
  const std::string yaml = Replace(kServerYaml, "threads: 2", "threads: two");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_,
                    LineOf(yaml, "threads: two"), "hosts[0].threads", "expected an integer");
}

TEST_F(ConfigTest, ZeroExecutors) {
  const std::string yaml = Replace(kServerYaml, "executors: 3", "executors: 0");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_,
                    LineOf(yaml, "executors: 0"), "hosts[0].executors", "out of range");
}

TEST_F(ConfigTest, NegativeAffinity) {
  const std::string yaml = Replace(kServerYaml, "cpu_affinity: [0, 1]", "cpu_affinity: [0, -1]");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_,
                    LineOf(yaml, "cpu_affinity"), "hosts[0].cpu_affinity[1]", "CPU index");
}

TEST_F(ConfigTest, PortOutOfRange) {
  const std::string yaml = Replace(kServerYaml, "grpc_port: 9001", "grpc_port: 70000");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_,
                    LineOf(yaml, "grpc_port"), "grpc_port", "out of range");
}

TEST_F(ConfigTest, BadLogLevel) {
  const std::string yaml = Replace(kServerYaml, "log_level: debug", "log_level: verbose");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_,
                    LineOf(yaml, "log_level"), "log_level", "unknown log level 'verbose'");
}

TEST_F(ConfigTest, BadLogFormat) {
  const std::string yaml = Replace(kServerYaml, "log_level: debug", "log_level: debug\nlog_format: xml");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_,
                    LineOf(yaml, "log_format"), "log_format",
                    "unknown log format 'xml' (expected default, ISO8601 or json)");
}

TEST_F(ConfigTest, BadTraceSettings) {
  std::string yaml = Replace(kServerYaml, "log_level: debug", "log_level: debug\ntrace: {level: TENSORS}");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "trace:"), "trace.level",
                    "unknown trace level 'TENSORS' (OFF or TIMESTAMPS)");
  yaml = Replace(kServerYaml, "log_level: debug", "log_level: debug\ntrace: {level: TIMESTAMPS}");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "trace:"), "trace.level",
                    "needs a file");
  yaml = Replace(kServerYaml, "log_level: debug", "log_level: debug\ntrace: {file: t.json, rate: 0}");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "trace:"), "trace.rate");
  yaml = Replace(kServerYaml, "log_level: debug", "log_level: debug\ntrace: {mode: zipkin}");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "trace:"), "trace.mode",
                    "unknown trace mode 'zipkin' (triton or opentelemetry)");
  yaml = Replace(kServerYaml, "log_level: debug", "log_level: debug\ntrace: {mode: opentelemetry, level: TIMESTAMPS}");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "trace:"), "trace.level",
                    "in mode opentelemetry needs a url");
  // A file is not what opentelemetry needs, nor a url what triton needs.
  yaml = Replace(kServerYaml, "log_level: debug",
                 "log_level: debug\ntrace: {mode: opentelemetry, file: t.json, level: TIMESTAMPS}");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "trace:"), "trace.level",
                    "needs a url");
  yaml = Replace(kServerYaml, "log_level: debug",
                 "log_level: debug\ntrace: {mode: opentelemetry, url: 'localhost:4318', level: TIMESTAMPS}");
  StatusOr<ServerConfig> config = LoadServerConfig(WriteServer(yaml));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->trace.mode, "opentelemetry");
  EXPECT_EQ(config->trace.url, "localhost:4318");
}

TEST_F(ConfigTest, ResponseCacheWithoutTheServersCache) {
  const std::string yaml = kMlpYaml + "response_cache: {enable: true}\n";
  const std::string file = WriteModel("mlp", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "response_cache"), "response_cache.enable",
                    "the server has no response cache");
  // With one, the model loads with its cache on.
  WriteServer(kServerYaml + "response_cache: {size_bytes: 1048576}\n");
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->response_cache_bytes, 1048576);
  EXPECT_TRUE(config->FindModel("mlp")->response_cache);
  EXPECT_FALSE(config->FindModel("cnn")->response_cache);
}

TEST_F(ConfigTest, ResponseCacheOnAnEnsemble) {
  WriteServer(kServerYaml + "response_cache: {size_bytes: 1048576}\n");
  const std::string yaml = kEnsYaml + "response_cache: {enable: true}\n";
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "response_cache"), "response_cache",
                    "cached through its members' caches");
}

TEST_F(ConfigTest, NonPositiveLimit) {
  const std::string yaml = Replace(kServerYaml, "drain_timeout_ms: 500", "drain_timeout_ms: 0");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_,
                    LineOf(yaml, "drain_timeout_ms"), "limits.drain_timeout_ms", "expected in [1, ");
}

TEST_F(ConfigTest, NoHosts) {
  const std::string yaml = "repository: repo\nhosts: []\n";
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, 2, "hosts",
                    "at least one host");
}

TEST_F(ConfigTest, MissingRepositoryFolder) {
  const std::string yaml = Replace(kServerYaml, "repository: repo", "repository: missing_repo");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_,
                    LineOf(yaml, "repository"), "repository", tree_.Path("missing_repo"));
}

TEST_F(ConfigTest, DuplicateKey) {
  const std::string yaml = kServerYaml + "grpc_port: 1\n";
  const int second = LineOf(yaml, "grpc_port: 1\n");
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, second,
                    "grpc_port", "duplicate key");
}

TEST_F(ConfigTest, YamlSyntaxErrorHasLine) {
  const std::string yaml = "repository: repo\nhosts:\n  - name: [cpu0\n";
  const Status status = LoadServerConfig(WriteServer(yaml)).status();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message().rfind(server_path_ + ":", 0), 0u) << status.message();
  EXPECT_NE(status.message().find("YAML syntax error"), std::string::npos) << status.message();
}

TEST_F(ConfigTest, MissingServerConfigFile) {
  const Status status = LoadServerConfig(tree_.Path("nope.yaml")).status();
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find(tree_.Path("nope.yaml")), std::string::npos);
}

TEST_F(ConfigTest, EmptyServerConfig) {
  ExpectConfigError(LoadServerConfig(WriteServer("")).status(), server_path_, 1, "",
                    "expected a mapping");
}

// --- one model's config.yaml ---------------------------------------------

TEST_F(ConfigTest, BadDatatype) {
  const std::string yaml = Replace(kMlpYaml, "name: input, datatype: FP32",
                                   "name: input, datatype: FP33");
  const std::string file = WriteModel("mlp", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "FP33"), "inputs[0].datatype",
                    "unknown datatype 'FP33'");
}

TEST_F(ConfigTest, NegativeMaxBatchSize) {
  const std::string yaml = Replace(kMlpYaml, "max_batch_size: 64", "max_batch_size: -1");
  const std::string file = WriteModel("mlp", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "max_batch_size"), "max_batch_size",
                    "out of range");
}

TEST_F(ConfigTest, UnknownModelKey) {
  const std::string yaml = kCnnYaml + "max_queue_delay: 5\n";
  const std::string file = WriteModel("cnn", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "max_queue_delay"), "max_queue_delay",
                    "unknown key 'max_queue_delay'");
}

TEST_F(ConfigTest, UnknownTensorKey) {
  const std::string yaml = Replace(kCnnYaml, "    dims: [10]", "    shape: [10]");
  const std::string file = WriteModel("cnn", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "shape"), "outputs[0].shape",
                    "unknown key 'shape'");
}

TEST_F(ConfigTest, ZeroDim) {
  const std::string yaml = Replace(kCnnYaml, "dims: [10]", "dims: [0]");
  const std::string file = WriteModel("cnn", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "dims: [0]"), "outputs[0].dims[0]",
                    "-1 for variable");
}

TEST_F(ConfigTest, DuplicateTensorName) {
  const std::string yaml = Replace(
      kMlpYaml, "outputs:\n", "outputs:\n  - {name: probabilities, datatype: FP32, dims: [3]}\n");
  const std::string file = WriteModel("mlp", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "dims: [10]"), "outputs[1].name",
                    "duplicate tensor name 'probabilities'");
}

TEST_F(ConfigTest, NameDiffersFromFolder) {
  const std::string yaml = Replace(kMlpYaml, "name: mlp", "name: mlp2");
  const std::string file = WriteModel("mlp", yaml);
  ExpectConfigError(Load().status(), file, 1, "name", "folder name 'mlp'");
}

TEST_F(ConfigTest, UnknownPlatform) {
  const std::string yaml = Replace(kCnnYaml, "platform: torchscript", "platform: onnx");
  const std::string file = WriteModel("cnn", yaml);
  ExpectConfigError(Load().status(), file, 1, "platform", "unknown platform 'onnx'");
}

TEST_F(ConfigTest, MissingVersionFolder) {
  tree_.Remove("repo/cnn/1");
  tree_.MakeDir("repo/cnn/latest");  // not numeric: does not count
  ExpectConfigError(Load().status(), tree_.Path("repo/cnn/config.yaml"),
                    LineOf(kCnnYaml, "platform"), "platform",
                    tree_.Path("repo/cnn/1/model.pt"));
}

TEST_F(ConfigTest, VersionFolderWithoutModelFile) {
  tree_.MakeDir("repo/mlp/7");
  const Status status = Load().status();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message().rfind(tree_.Path("repo/mlp/7/model.pt") + ": missing", 0), 0u)
      << status.message();
}

TEST_F(ConfigTest, ModelFolderWithoutConfig) {
  tree_.Write("repo/orphan/1/model.pt", "");
  const Status status = Load().status();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message().rfind(tree_.Path("repo/orphan") + ":", 0), 0u) << status.message();
  EXPECT_NE(status.message().find("config.yaml"), std::string::npos) << status.message();
}

TEST_F(ConfigTest, UnknownHostInModel) {
  const std::string yaml = Replace(kMlpYaml, "hosts: [cpu0]", "hosts:\n  - cpu0\n  - cpu9");
  const std::string file = WriteModel("mlp", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "cpu9"), "hosts[1]",
                    "unknown host 'cpu9'");
}

TEST_F(ConfigTest, EnsembleWithHosts) {
  const std::string yaml = kEnsYaml + "hosts: [cpu0]\n";
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "hosts"), "hosts", "members' hosts");
}

// --- ensembles against their members --------------------------------------

TEST_F(ConfigTest, UnknownMember) {
  const std::string yaml = Replace(kEnsYaml, "{model: cnn}", "{model: rnn}");
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "rnn"), "ensemble.members[1].model",
                    "unknown model 'rnn'");
}

TEST_F(ConfigTest, MemberIsAnEnsemble) {
  WriteModel("ens2", "platform: ensemble\nensemble:\n  members:\n    - model: ens\n");
  ExpectConfigError(Load().status(), tree_.Path("repo/ens2/config.yaml"), 4,
                    "ensemble.members[0].model", "is itself an ensemble");
}

TEST_F(ConfigTest, MemberWithDifferentDims) {
  WriteModel("cnn", Replace(kCnnYaml, "dims: [10]", "dims: [5]"));
  ExpectConfigError(Load().status(), tree_.Path("repo/ens/config.yaml"), LineOf(kEnsYaml, "cnn"),
                    "ensemble.members[1].model",
                    "member 'cnn' output 'probabilities' has dims [5], "
                    "the ensemble's (from first member 'mlp') are [10]");
}

TEST_F(ConfigTest, MemberDiffersFromDeclaredOutputs) {
  WriteModel("ens", kEnsYaml + "outputs:\n  - {name: probabilities, datatype: FP32, dims: [12]}\n");
  ExpectConfigError(Load().status(), tree_.Path("repo/ens/config.yaml"), LineOf(kEnsYaml, "mlp"),
                    "ensemble.members[0].model",
                    "member 'mlp' output 'probabilities' has dims [10], the ensemble's are [12]");
}

TEST_F(ConfigTest, MemberWithDifferentDatatype) {
  WriteModel("cnn", Replace(kCnnYaml, "    datatype: FP32\n    dims: [1, 28, 28]",
                            "    datatype: FP64\n    dims: [1, 28, 28]"));
  ExpectConfigError(Load().status(), tree_.Path("repo/ens/config.yaml"), LineOf(kEnsYaml, "cnn"),
                    "ensemble.members[1].model", "input 'input' has datatype FP64");
}

TEST_F(ConfigTest, MemberWithExtraOutput) {
  WriteModel("cnn", kCnnYaml + "  - {name: features, datatype: FP32, dims: [64]}\n");
  ExpectConfigError(Load().status(), tree_.Path("repo/ens/config.yaml"), LineOf(kEnsYaml, "cnn"),
                    "ensemble.members[1].model", "has output 'features' that the ensemble lacks");
}

TEST_F(ConfigTest, EnsembleBatchLargerThanMember) {
  const std::string yaml = Replace(kEnsYaml, "max_batch_size: 32", "max_batch_size: 100");
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "max_batch_size"), "max_batch_size",
                    "exceeds member 'mlp' max_batch_size 64");
}

TEST_F(ConfigTest, MajorityVoteNeedsClassVectors) {
  WriteModel("mlp", Replace(kMlpYaml, "dims: [10]", "dims: [2, 5]"));
  WriteModel("cnn", Replace(kCnnYaml, "dims: [10]", "dims: [2, 5]"));
  const std::string yaml = Replace(kEnsYaml, "weighted_mean", "majority_vote");
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "combine"), "ensemble.combine",
                    "output 'probabilities' has dims [2, 5]");
}

TEST_F(ConfigTest, EnsembleWithoutMembers) {
  const std::string yaml = "platform: ensemble\nensemble:\n  combine: mean\n  members: []\n";
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, 4, "ensemble.members", "at least one member");
}

TEST_F(ConfigTest, BadCombineRule) {
  const std::string yaml = Replace(kEnsYaml, "weighted_mean", "median");
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "median"), "ensemble.combine",
                    "unknown combine rule 'median'");
}

TEST_F(ConfigTest, NonPositiveWeight) {
  const std::string yaml = Replace(kEnsYaml, "weight: 2.5", "weight: -1");
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "weight: -1"),
                    "ensemble.members[0].weight", "> 0");
}

TEST_F(ConfigTest, DuplicateMember) {
  const std::string yaml = Replace(kEnsYaml, "{model: cnn}", "{model: mlp}");
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "{model: mlp}\n"),
                    "ensemble.members[1].model", "duplicate member 'mlp'");
}

TEST_F(ConfigTest, MinMembersAboveTheMemberCount) {
  const std::string yaml = Replace(kEnsYaml, "  combine: weighted_mean\n", "  combine: weighted_mean\n  min_members: 3\n");
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "min_members"), "ensemble.min_members",
                    "min_members 3 is more than the ensemble's 2 members");
}

TEST_F(ConfigTest, MinMembersZero) {
  const std::string yaml = Replace(kEnsYaml, "  combine: weighted_mean\n", "  combine: weighted_mean\n  min_members: 0\n");
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "min_members"), "ensemble.min_members", "out of range");
}

TEST_F(ConfigTest, MemberTimeoutWithoutAQuorumBelowAll) {
  const std::string yaml =
      Replace(kEnsYaml, "  combine: weighted_mean\n", "  combine: weighted_mean\n  member_timeout_ms: 50\n");
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "member_timeout_ms"), "ensemble.member_timeout_ms",
                    "needs min_members below the member count (2)");
}

TEST_F(ConfigTest, QuorumSettingsAreRead) {
  const std::string yaml = Replace(kEnsYaml, "  combine: weighted_mean\n",
                                   "  combine: weighted_mean\n  min_members: 1\n  member_timeout_ms: 50\n");
  WriteModel("ens", yaml);
  auto repo = Load();
  ASSERT_TRUE(repo.ok()) << repo.status().ToString();
  const EnsembleSpec& spec = repo->models.at("ens").ensemble;
  EXPECT_EQ(spec.min_members, 1);
  EXPECT_EQ(spec.Quorum(), 1u);
  EXPECT_EQ(spec.member_timeout_ms, 50);
}

// --- cascades ---------------------------------------------------------------

std::string CascadeYaml(const std::string& extra) {
  return "platform: ensemble\nmax_batch_size: 32\nensemble:\n  combine: cascade\n" + extra +
         "  members:\n    - {model: mlp}\n    - {model: cnn}\n";
}

TEST_F(ConfigTest, CascadeNeedsAnExitThreshold) {
  const std::string yaml = CascadeYaml("");
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "combine"), "ensemble.combine", "needs exit_threshold");
}

TEST_F(ConfigTest, CascadeThresholdOutOfRange) {
  const std::string yaml = CascadeYaml("  exit_threshold: 1.5\n");
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "exit_threshold"), "ensemble.exit_threshold", "(0, 1]");
}

TEST_F(ConfigTest, CascadeStageNamingANonMember) {
  const std::string yaml = CascadeYaml("  exit_threshold: 0.9\n  stages: [[mlp], [rnn]]\n");
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "stages"), "ensemble.stages[1][0]",
                    "'rnn' is not one of the ensemble's members");
}

TEST_F(ConfigTest, CascadeMemberInTwoStagesOrNone) {
  std::string yaml = CascadeYaml("  exit_threshold: 0.9\n  stages: [[mlp], [mlp, cnn]]\n");
  std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "stages"), "ensemble.stages[1][0]",
                    "member 'mlp' is in more than one stage");
  yaml = CascadeYaml("  exit_threshold: 0.9\n  stages: [[cnn]]\n");
  file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "stages"), "ensemble.stages", "member 'mlp' is in no stage");
}

TEST_F(ConfigTest, CascadeSettingsOnlyWithCascade) {
  const std::string yaml =
      Replace(kEnsYaml, "  combine: weighted_mean\n", "  combine: weighted_mean\n  exit_threshold: 0.9\n");
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "exit_threshold"), "ensemble.exit_threshold",
                    "only for combine: cascade");
}

TEST_F(ConfigTest, CascadeWithoutQuorum) {
  const std::string yaml = CascadeYaml("  exit_threshold: 0.9\n  min_members: 1\n");
  const std::string file = WriteModel("ens", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "min_members"), "ensemble.min_members",
                    "not with combine: cascade");
}

TEST_F(ConfigTest, CascadeStagesAreRead) {
  WriteModel("ens", CascadeYaml("  exit_threshold: 0.75\n  stages: [[cnn], [mlp]]\n"));
  auto config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const EnsembleSpec& spec = config->models.at("ens").ensemble;
  EXPECT_TRUE(spec.cascade());
  EXPECT_DOUBLE_EQ(spec.exit_threshold, 0.75);
  EXPECT_EQ(spec.stages, (std::vector<std::vector<size_t>>{{1}, {0}}));
  WriteModel("ens", CascadeYaml("  exit_threshold: 0.75\n"));
  config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->models.at("ens").ensemble.stages, (std::vector<std::vector<size_t>>{{0}, {1}}));
}

}  // namespace
}  // namespace es::testing
