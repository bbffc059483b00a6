// LoadRepository on its own (no server config): folders, versions, ensembles.
#include "config_fixture.h"

namespace es::testing {
namespace {

TEST_F(ConfigTest, LoadRepositoryAlone) {
  StatusOr<std::map<std::string, ModelConfig>> models = LoadRepository(tree_.Path("repo/"));
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  ASSERT_EQ(models->size(), 3u);
  EXPECT_EQ(models->at("mlp").directory, tree_.Path("repo/mlp"));
  EXPECT_EQ(models->at("mlp").versions, (std::vector<int64_t>{1, 3}));
  // Without a server config nobody fills in the default placement.
  EXPECT_TRUE(models->at("cnn").hosts.empty());
  EXPECT_EQ(models->at("ens").outputs.size(), 1u);
}

TEST_F(ConfigTest, VersionsSortNumerically) {
  tree_.Write("repo/mlp/10/model.pt", "");
  tree_.Write("repo/mlp/2/model.pt", "");
  StatusOr<std::map<std::string, ModelConfig>> models = LoadRepository(tree_.Path("repo"));
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  EXPECT_EQ(models->at("mlp").versions, (std::vector<int64_t>{1, 2, 3, 10}));
  EXPECT_EQ(models->at("mlp").LatestVersion(), 10);
}

TEST_F(ConfigTest, HiddenFoldersAndFilesAreNotModels) {
  tree_.MakeDir("repo/.cache");
  tree_.Write("repo/README.md", "models live in sub-folders");
  StatusOr<std::map<std::string, ModelConfig>> models = LoadRepository(tree_.Path("repo"));
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  EXPECT_EQ(models->size(), 3u);
}

TEST_F(ConfigTest, EnsembleMayDeclareItsTensors) {
  WriteModel("ens", kEnsYaml + R"(inputs:
  - {name: input, datatype: FP32, dims: [1, 28, 28]}
outputs:
  - {name: probabilities, datatype: FP32, dims: [10]}
)");
  StatusOr<std::map<std::string, ModelConfig>> models = LoadRepository(tree_.Path("repo"));
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  EXPECT_EQ(models->at("ens").inputs[0].name, "input");
}

TEST_F(ConfigTest, VariableDimsAndUnbatchedModels) {
  WriteModel("seq", R"(platform: torchscript
inputs:
  - {name: tokens, datatype: INT64, dims: [-1, 16]}
outputs:
  - {name: logits, datatype: FP16, dims: [-1]}
)");
  tree_.Write("repo/seq/1/model.pt", "");
  StatusOr<std::map<std::string, ModelConfig>> models = LoadRepository(tree_.Path("repo"));
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  const ModelConfig& seq = models->at("seq");
  EXPECT_EQ(seq.max_batch_size, 0);
  EXPECT_FALSE(seq.batched());
  EXPECT_EQ(seq.inputs[0].datatype, DataType::kInt64);
  EXPECT_EQ(seq.inputs[0].dims, (std::vector<int64_t>{-1, 16}));
  EXPECT_EQ(seq.outputs[0].datatype, DataType::kFp16);
}

TEST(RepositoryTest, MissingRepositoryNamesThePath) {
  TempTree tree;
  StatusOr<std::map<std::string, ModelConfig>> models = LoadRepository(tree.Path("nowhere"));
  ASSERT_FALSE(models.ok());
  EXPECT_EQ(models.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(models.status().message().find(tree.Path("nowhere")), std::string::npos)
      << models.status().message();
  EXPECT_EQ(models.status().message().find("ensemble-make-demo"), std::string::npos) << models.status().message();
}

// config/demo.yaml's repository is made by scripts/demo.sh, not the build:
// its absence says how to make it.
TEST(RepositoryTest, MissingDemoRepositorySaysHowToMakeIt) {
  TempTree tree;
  StatusOr<std::map<std::string, ModelConfig>> models = LoadRepository(tree.Path("demo_repo"));
  ASSERT_FALSE(models.ok());
  EXPECT_NE(models.status().message().find("the model repository folder does not exist (write it with "
                                           "`build/bin/ensemble-make-demo --out " +
                                           tree.Path("demo_repo") + "`, or run scripts/demo.sh)"),
            std::string::npos)
      << models.status().message();
}

TEST(RepositoryTest, EmptyRepositoryIsValid) {
  TempTree tree;
  tree.MakeDir("repo");
  StatusOr<std::map<std::string, ModelConfig>> models = LoadRepository(tree.Path("repo"));
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  EXPECT_TRUE(models->empty());
}

}  // namespace
}  // namespace es::testing
