// version_policy (Triton's): which version folders a model serves, and the
// errors for a policy that is malformed or serves nothing. Also the model
// spec the router sends a host in a load request (config/host_model_spec.h).
#include "config/host_model_spec.h"
#include "config_fixture.h"

namespace es::testing {
namespace {

// mlp has version folders 1 and 3 (config_fixture.h), here also 2 and 7.
class VersionPolicyTest : public ConfigTest {
 protected:
  void SetUp() override {
    ConfigTest::SetUp();
    tree_.Write("repo/mlp/2/model.pt", "");
    tree_.Write("repo/mlp/7/model.pt", "");
  }
  StatusOr<std::vector<int64_t>> Served(const std::string& policy) {
    WriteModel("mlp", kMlpYaml + policy);
    ES_ASSIGN_OR_RETURN(const auto models, LoadRepository(tree_.Path("repo")));
    return models.at("mlp").ServedVersions();
  }
};

TEST_F(VersionPolicyTest, DefaultServesTheNewestOnly) {
  auto served = Served("");
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(*served, (std::vector<int64_t>{7}));
}

TEST_F(VersionPolicyTest, LatestAllAndSpecific) {
  auto latest = Served("version_policy: {latest: {num_versions: 2}}\n");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, (std::vector<int64_t>{3, 7}));
  auto more = Served("version_policy: {latest: {num_versions: 10}}\n");
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(*more, (std::vector<int64_t>{1, 2, 3, 7}));
  auto all = Served("version_policy: {all: {}}\n");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, (std::vector<int64_t>{1, 2, 3, 7}));
  // Listed versions without a folder are not served (Triton's reading); order does not matter.
  auto specific = Served("version_policy:\n  specific: {versions: [3, 1, 9]}\n");
  ASSERT_TRUE(specific.ok()) << specific.status().ToString();
  EXPECT_EQ(*specific, (std::vector<int64_t>{1, 3}));
}

TEST_F(VersionPolicyTest, MalformedPoliciesNameTheField) {
  const std::string path = tree_.Path("repo/mlp/config.yaml");
  struct Case {
    std::string policy, field, what;
  };
  const std::vector<Case> cases = {
      {"version_policy: {newest: {}}\n", "version_policy.newest", "unknown key 'newest'"},
      {"version_policy: {latest: {num_versions: 0}}\n", "version_policy.latest.num_versions", ""},
      {"version_policy: {all: {}, latest: {}}\n", "version_policy", "exactly one of latest, all, specific"},
      {"version_policy: {specific: {versions: []}}\n", "version_policy.specific.versions", "at least one version"},
      {"version_policy: {specific: {versions: [2, 2]}}\n", "version_policy.specific.versions", "listed twice"},
      {"version_policy: {specific: {versions: [0]}}\n", "version_policy.specific.versions[0]", "numbered from 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.policy);
    auto served = Served(c.policy);
    ASSERT_FALSE(served.ok());
    const std::string message = served.status().message();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(c.field), std::string::npos) << message;
    EXPECT_NE(message.find(c.what), std::string::npos) << message;
  }
}

TEST_F(VersionPolicyTest, APolicyThatServesNothingIsAnError) {
  auto served = Served("version_policy: {specific: {versions: [4, 5]}}\n");
  ASSERT_FALSE(served.ok());
  EXPECT_NE(served.status().message().find("version_policy serves none of the version folders"), std::string::npos)
      << served.status().message();
}

TEST_F(VersionPolicyTest, EnsemblesHaveNoPolicy) {
  WriteModel("ens", kEnsYaml + "version_policy: {all: {}}\n");
  StatusOr<std::map<std::string, ModelConfig>> models = LoadRepository(tree_.Path("repo"));
  ASSERT_FALSE(models.ok());
  EXPECT_NE(models.status().message().find("an ensemble runs on its members' hosts"), std::string::npos)
      << models.status().message();
}

TEST_F(ConfigTest, EnsembleMembersMayPinAVersion) {
  std::string yaml = kEnsYaml;
  yaml.replace(yaml.find("{model: cnn}"), 12, "{model: cnn, version: 3}");
  WriteModel("ens", yaml);
  StatusOr<std::map<std::string, ModelConfig>> models = LoadRepository(tree_.Path("repo"));
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  EXPECT_EQ(models->at("ens").ensemble.members[0].version, 0);  // follows the newest ready
  EXPECT_EQ(models->at("ens").ensemble.members[1].version, 3);
  yaml.replace(yaml.find("version: 3"), 10, "version: 0");
  WriteModel("ens", yaml);
  models = LoadRepository(tree_.Path("repo"));
  ASSERT_FALSE(models.ok());
  EXPECT_NE(models.status().message().find("ensemble.members[1].version"), std::string::npos)
      << models.status().message();
}

TEST_F(ConfigTest, HostModelSpecRoundTrips) {
  StatusOr<std::map<std::string, ModelConfig>> models = LoadRepository(tree_.Path("repo"));
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  const ModelConfig& mlp = models->at("mlp");
  StatusOr<ModelConfig> back = DecodeHostModelSpec(EncodeHostModelSpec(mlp));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->name, "mlp");
  EXPECT_EQ(back->platform, "torchscript");
  EXPECT_EQ(back->directory, mlp.directory);
  EXPECT_EQ(back->max_batch_size, 64);
  ASSERT_EQ(back->inputs.size(), 1u);
  EXPECT_EQ(back->inputs[0].name, "input");
  EXPECT_EQ(back->inputs[0].datatype, DataType::kFp32);
  EXPECT_EQ(back->inputs[0].dims, (std::vector<int64_t>{1, 28, 28}));
  ASSERT_EQ(back->outputs.size(), 1u);
  EXPECT_EQ(back->outputs[0].dims, (std::vector<int64_t>{10}));
}

TEST(HostModelSpecTest, BadSpecsNameTheField) {
  const std::string good =
      R"({"name":"m","platform":"torchscript","directory":"/r/m","max_batch_size":4,)"
      R"("inputs":[{"name":"x","datatype":"FP32","dims":[-1]}],"outputs":[{"name":"y","datatype":"FP32","dims":[2]}]})";
  ASSERT_TRUE(DecodeHostModelSpec(good).ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not a JSON object"},
      {R"({"platform":"torchscript"})", "'name'"},
      {std::string(good).replace(good.find("torchscript"), 11, "ensemble"), "'platform'"},
      {std::string(good).replace(good.find("/r/m"), 4, "r/m"), "'directory' must be an absolute path"},
      {std::string(good).replace(good.find(":4,"), 3, ":-1,"), "'max_batch_size'"},
      {std::string(good).replace(good.find("FP32"), 4, "FP33"), "'inputs[0].datatype'"},
      {std::string(good).replace(good.find("[2]"), 3, "[0]"), "'outputs[0].dims'"},
      {std::string(good).replace(good.find(R"("inputs":[)") + 9, 0, "]"), "not a JSON object"},
  };
  for (const auto& [text, what] : cases) {
    SCOPED_TRACE(text);
    StatusOr<ModelConfig> spec = DecodeHostModelSpec(text);
    ASSERT_FALSE(spec.ok());
    EXPECT_NE(spec.status().message().find(what), std::string::npos) << spec.status().message();
  }
}

}  // namespace
}  // namespace es::testing
