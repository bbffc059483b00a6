// ModelRepository (server/repository/model_repository.h) without hosts, on
// repository folders written per test: the start-up set (LOADING until the
// hosts are attached, then READY), Index() states and reasons, Find and
// ReadyVersions (version policy, ensembles following their members), and
// explicit mode: loads and unloads (members loaded first, unload_dependents),
// errors naming the model (an unknown model is NOT_FOUND), a broken reload
// that leaves the old config serving, a new version folder rolled out, a
// changed experiment applied without reloading the hosts.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/repository/model_repository.h"
#include "tests/common/temp_dir.h"

namespace es {
namespace {

const std::string kMlpYaml = R"(platform: torchscript
max_batch_size: 8
inputs:
  - {name: input, datatype: FP32, dims: [4]}
outputs:
  - {name: probabilities, datatype: FP32, dims: [3]}
hosts: [cpu0]
)";

const std::string kEnsYaml = R"(platform: ensemble
max_batch_size: 8
ensemble:
  combine: mean
  members:
    - {model: mlp}
    - {model: cnn}
)";

class ModelRepositoryTest : public ::testing::Test {
 protected:
  ModelRepositoryTest() {
    WriteModel("mlp", kMlpYaml + "version_policy: {latest: {num_versions: 2}}\n");
    tree_.Write("repo/mlp/1/model.pt", "");
    tree_.Write("repo/mlp/2/model.pt", "");
    tree_.Write("repo/mlp/3/model.pt", "");
    WriteModel("cnn", kMlpYaml);  // default policy: the latest version
    tree_.Write("repo/cnn/1/model.pt", "");
    tree_.Write("repo/cnn/4/model.pt", "");
    WriteModel("ens", kEnsYaml);
  }

  void WriteModel(const std::string& name, const std::string& yaml) {
    tree_.Write("repo/" + name + "/config.yaml", yaml);
  }

  // Reads the server config in `mode` ("none" or "explicit") and makes the repository.
  void Make(const std::string& mode) {
    const std::string path = tree_.Write("server.yaml", "repository: repo\nmodel_control_mode: " + mode +
                                                            "\nhosts:\n  - name: cpu0\n    device: cpu\n");
    StatusOr<ServerConfig> loaded = LoadServerConfig(path, /*with_repository=*/mode != "explicit");
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    config_ = std::move(loaded).value();
    repo_ = std::make_unique<ModelRepository>(&config_);
  }

  // No hosts, and no request ever in flight.
  void Attach() { repo_->Attach({}, nullptr); }

  // Also checks HighestReady, which answers every member call without the
  // list, against the list's last entry.
  std::vector<int64_t> Ready(const std::string& name) const {
    const ModelConfig* model = repo_->Find(name);
    if (model == nullptr) return {};
    std::vector<int64_t> ready = repo_->ReadyVersions(*model);
    const std::optional<int64_t> highest = repo_->HighestReady(*model);
    EXPECT_EQ(highest, ready.empty() ? std::nullopt : std::optional<int64_t>(ready.back())) << "model " << name;
    return ready;
  }

  // Index() as "name:version:STATE" entries, sorted, without model `except`.
  std::vector<std::string> IndexStates(const std::string& except = "") const {
    std::vector<std::string> states;
    for (const auto& e : repo_->Index()) {
      if (e.name != except) states.push_back(e.name + ":" + e.version + ":" + e.state);
    }
    return states;
  }
  ModelRepository::IndexEntry IndexEntryOf(const std::string& name) const {
    for (const auto& e : repo_->Index()) {
      if (e.name == name) return e;
    }
    ADD_FAILURE() << "no index entry for " << name;
    return {};
  }

  testing::TempDir tree_;
  ServerConfig config_;
  std::unique_ptr<ModelRepository> repo_;
};

TEST_F(ModelRepositoryTest, StartUpSetIsLoadingUntilTheHostsAreAttachedThenReady) {
  Make("none");
  ASSERT_TRUE(repo_->Begin({}).ok());
  EXPECT_EQ(IndexStates("ens"), (std::vector<std::string>{"cnn:4:LOADING", "mlp:2:LOADING", "mlp:3:LOADING"}));
  ASSERT_NE(repo_->Find("mlp"), nullptr);
  EXPECT_TRUE(Ready("mlp").empty()) << "versions take requests before their hosts loaded them";
  EXPECT_TRUE(Ready("ens").empty()) << "an ensemble is ready only while its members are";
  EXPECT_EQ(repo_->Loaded().size(), 3u);

  Attach();
  EXPECT_EQ(IndexStates(),
            (std::vector<std::string>{"cnn:4:READY", "ens:1:READY", "mlp:2:READY", "mlp:3:READY"}));
  EXPECT_EQ(IndexEntryOf("ens").version, "1");
  EXPECT_EQ(Ready("mlp"), (std::vector<int64_t>{2, 3})) << "version_policy latest 2";
  EXPECT_EQ(Ready("cnn"), (std::vector<int64_t>{4})) << "the default policy: the latest version";
  EXPECT_EQ(Ready("ens"), (std::vector<int64_t>{1}));
  const ModelConfig* mlp = repo_->Find("mlp");
  EXPECT_TRUE(repo_->Serves(*mlp, 3));
  EXPECT_FALSE(repo_->Serves(*mlp, 1)) << "version 1 is outside the policy";
  EXPECT_EQ(repo_->Find("ghost"), nullptr);
}

TEST_F(ModelRepositoryTest, LoadModelsAtStartAreOnlyForExplicitMode) {
  Make("none");
  const Status s = repo_->Begin({"mlp"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("explicit"), std::string::npos) << s.message();
}

TEST_F(ModelRepositoryTest, ExplicitModeServesOnlyTheModelsAskedForAndIndexesTheOtherFolders) {
  Make("explicit");
  ASSERT_TRUE(repo_->Begin({"mlp"}).ok());
  Attach();
  EXPECT_EQ(Ready("mlp"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(repo_->Find("cnn"), nullptr);
  const ModelRepository::IndexEntry cnn = IndexEntryOf("cnn");
  EXPECT_EQ(cnn.state, "UNAVAILABLE");
  EXPECT_EQ(cnn.version, "");
  EXPECT_EQ(cnn.reason, "not loaded");

  ASSERT_TRUE(repo_->Load("cnn").ok());
  EXPECT_EQ(Ready("cnn"), (std::vector<int64_t>{4}));
  EXPECT_EQ(IndexEntryOf("cnn").state, "READY");
}

TEST_F(ModelRepositoryTest, LoadingAnEnsembleLoadsItsMembersFirst) {
  Make("explicit");
  ASSERT_TRUE(repo_->Begin({}).ok());
  Attach();
  ASSERT_TRUE(repo_->Load("ens").ok());
  EXPECT_NE(repo_->Find("mlp"), nullptr);
  EXPECT_NE(repo_->Find("cnn"), nullptr);
  EXPECT_EQ(Ready("ens"), (std::vector<int64_t>{1}));
}

TEST_F(ModelRepositoryTest, UnknownModelIsNotFoundNamingIt) {
  Make("explicit");
  const Status at_start = repo_->Begin({"ghost"});
  EXPECT_EQ(at_start.code(), StatusCode::kNotFound) << at_start.ToString();
  EXPECT_NE(at_start.message().find("ghost"), std::string::npos) << at_start.message();
  Attach();

  const Status load = repo_->Load("ghost");
  EXPECT_EQ(load.code(), StatusCode::kNotFound) << load.ToString();
  EXPECT_NE(load.message().find("'ghost'"), std::string::npos) << load.message();
  const Status unload = repo_->Unload("ghost", false);
  EXPECT_EQ(unload.code(), StatusCode::kNotFound) << unload.ToString();
  EXPECT_NE(unload.message().find("'ghost'"), std::string::npos) << unload.message();
  for (const auto& e : repo_->Index()) EXPECT_NE(e.name, "ghost") << "a made-up name left an index entry";
  EXPECT_EQ(repo_->load_failures(), 0u);
}

TEST_F(ModelRepositoryTest, UnloadingAMemberLeavesItsEnsembleLoadedButNotReady) {
  Make("explicit");
  ASSERT_TRUE(repo_->Begin({"ens"}).ok());
  Attach();
  ASSERT_EQ(Ready("ens"), (std::vector<int64_t>{1}));
  ASSERT_TRUE(repo_->Unload("mlp", false).ok());
  EXPECT_EQ(repo_->Find("mlp"), nullptr);
  const ModelRepository::IndexEntry mlp = IndexEntryOf("mlp");
  EXPECT_EQ(mlp.state, "UNAVAILABLE");
  EXPECT_EQ(mlp.reason, "unloaded");
  ASSERT_NE(repo_->Find("ens"), nullptr);
  EXPECT_TRUE(Ready("ens").empty());
  // Unloading what is not loaded (a folder of the repository) is no error.
  EXPECT_TRUE(repo_->Unload("mlp", false).ok());
}

TEST_F(ModelRepositoryTest, UnloadDependentsUnloadsMembersNoOtherEnsembleUses) {
  WriteModel("duo", R"(platform: ensemble
max_batch_size: 8
ensemble:
  members:
    - {model: mlp}
)");
  Make("explicit");
  ASSERT_TRUE(repo_->Begin({"ens", "duo"}).ok());
  Attach();
  ASSERT_TRUE(repo_->Unload("ens", /*unload_dependents=*/true).ok());
  EXPECT_EQ(repo_->Find("ens"), nullptr);
  EXPECT_EQ(repo_->Find("cnn"), nullptr) << "cnn was used by ens alone";
  EXPECT_NE(repo_->Find("mlp"), nullptr) << "mlp is still used by duo";
  EXPECT_EQ(Ready("duo"), (std::vector<int64_t>{1}));
}

TEST_F(ModelRepositoryTest, ABrokenReloadFailsNamingTheModelAndTheOldConfigKeepsServing) {
  Make("explicit");
  ASSERT_TRUE(repo_->Begin({"mlp"}).ok());
  Attach();
  const ModelConfig* before = repo_->Find("mlp");
  WriteModel("mlp", "platform: torchscript\nmax_batch_size: [not a number]\n");
  const Status s = repo_->Load("mlp");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("mlp"), std::string::npos) << s.message();
  EXPECT_EQ(repo_->Find("mlp"), before);
  EXPECT_EQ(Ready("mlp"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(repo_->load_failures(), 1u);
  const ModelRepository::IndexEntry entry = IndexEntryOf("mlp");
  EXPECT_EQ(entry.state, "READY");
  EXPECT_EQ(entry.reason, s.message()) << "the index does not say why the reload failed";
}

TEST_F(ModelRepositoryTest, ANewVersionFolderIsRolledOutAndTheVersionLeavingThePolicyIsUnloaded) {
  Make("explicit");
  ASSERT_TRUE(repo_->Begin({"cnn"}).ok());
  Attach();
  ASSERT_EQ(Ready("cnn"), (std::vector<int64_t>{4}));
  const ModelConfig* before = repo_->Find("cnn");
  tree_.Write("repo/cnn/5/model.pt", "");
  ASSERT_TRUE(repo_->Load("cnn").ok());
  EXPECT_EQ(Ready("cnn"), (std::vector<int64_t>{5}));
  EXPECT_EQ(repo_->Find("cnn")->HostKey(), before->HostKey()) << "an unchanged config keeps its host key";
  std::vector<std::string> cnn;
  for (const auto& e : repo_->Index()) {
    if (e.name == "cnn") cnn.push_back(e.version + ":" + e.state);
  }
  EXPECT_EQ(cnn, (std::vector<std::string>{"5:READY"}));
}

TEST_F(ModelRepositoryTest, AChangedConfigIsServedUnderANewHostKey) {
  Make("explicit");
  ASSERT_TRUE(repo_->Begin({"cnn"}).ok());
  Attach();
  const ModelConfig* before = repo_->Find("cnn");
  WriteModel("cnn", kMlpYaml + "instances_per_host: 2\n");
  ASSERT_TRUE(repo_->Load("cnn").ok());
  const ModelConfig* after = repo_->Find("cnn");
  ASSERT_NE(after, before);
  EXPECT_NE(after->HostKey(), before->HostKey());
  EXPECT_EQ(Ready("cnn"), (std::vector<int64_t>{4}));
  EXPECT_FALSE(repo_->Serves(*before, 4)) << "the replaced config still takes requests";
  EXPECT_TRUE(repo_->Serves(*after, 4));
}

// Only the experiment changed (what poll mode applies when an operator or
// ensemble-train --shadow edits the section): the new config serves under
// the old host key (no version reloaded on the hosts), and its experiment
// is the new one; an ensemble's likewise.
TEST_F(ModelRepositoryTest, AChangedExperimentIsServedWithoutReloadingTheHosts) {
  Make("explicit");
  ASSERT_TRUE(repo_->Begin({"cnn", "mlp", "ens"}).ok());
  Attach();
  const ModelConfig* before = repo_->Find("cnn");
  ASSERT_FALSE(before->experiment.enabled());
  WriteModel("cnn", kMlpYaml + "experiment: {candidate: mlp, mode: shadow, percent: 10}\n");
  ASSERT_TRUE(repo_->Load("cnn").ok());
  const ModelConfig* after = repo_->Find("cnn");
  ASSERT_NE(after, before);
  EXPECT_EQ(after->HostKey(), before->HostKey());
  EXPECT_EQ(after->experiment.candidate, "mlp");
  EXPECT_EQ(after->experiment.percent, 10);
  EXPECT_EQ(Ready("cnn"), (std::vector<int64_t>{4}));

  WriteModel("ens", kEnsYaml + "experiment: {candidate: mlp, mode: canary, percent: 5}\n");
  ASSERT_TRUE(repo_->Load("ens").ok());
  EXPECT_EQ(repo_->Find("ens")->experiment.mode, ExperimentSpec::Mode::kCanary);
}

}  // namespace
}  // namespace es
