// Packed ensemble members (`packed: [names]`): one model answering for
// several members, its outputs [batch, M, ...]. Accepted when its outputs
// have the packed axis, refused (file, line, field) otherwise.
#include "config_fixture.h"

namespace es::testing {
namespace {

// A model answering for three members: probabilities [3, 10] per row.
const std::string kPackedYaml = R"(platform: torchscript
max_batch_size: 64
inputs:
  - {name: input, datatype: FP32, dims: [1, 28, 28]}
outputs:
  - {name: probabilities, datatype: FP32, dims: [3, 10]}
)";

const std::string kPackedEnsYaml = R"(platform: ensemble
max_batch_size: 32
ensemble:
  combine: weighted_mean
  members:
    - {model: trio, packed: [a, b, c], weights: [1, 2, 3]}
    - {model: cnn}
)";

class PackedConfigTest : public ConfigTest {
 protected:
  void SetUp() override {
    ConfigTest::SetUp();
    WriteModel("trio", kPackedYaml);
    tree_.Write("repo/trio/1/model.pt", "");
  }
};

TEST_F(PackedConfigTest, APackedMemberCountsAsItsMembers) {
  // First member packed: the ensemble's outputs are its own without the packed axis.
  WriteModel("ens", kPackedEnsYaml);
  auto config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_TRUE(config->models.count("ens"));
  const ModelConfig* ens = &config->models.at("ens");
  EXPECT_EQ(ens->ensemble.MemberCount(), 4u);
  EXPECT_EQ(ens->ensemble.Quorum(), 4u);
  EXPECT_EQ(ens->ensemble.members[0].packed, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ens->ensemble.members[0].WeightOf(2), 3.0);
  ASSERT_EQ(ens->outputs.size(), 1u);
  EXPECT_EQ(ens->outputs[0].dims, (std::vector<int64_t>{10}));
}

TEST_F(PackedConfigTest, OutputsWithoutThePackedAxisAreRefused) {
  const std::string yaml = Replace(kPackedEnsYaml, "packed: [a, b, c]", "packed: [a, b]");
  const std::string file = WriteModel("ens", Replace(yaml, "weights: [1, 2, 3]", "weights: [1, 2]"));
  ExpectConfigError(Load().status(), file, 6, "ensemble.members[0].model",
                    "has dims [3, 10], the ensemble's (from first member 'trio') with the 2 packed members first are "
                    "[2, 3, 10]");
}

TEST_F(PackedConfigTest, WeightsMustMatchThePackedMembers) {
  const std::string file = WriteModel("ens", Replace(kPackedEnsYaml, "weights: [1, 2, 3]", "weights: [1, 2]"));
  ExpectConfigError(Load().status(), file, 6, "ensemble.members[0].weights", "2 weights for 3 packed members");
}

TEST_F(PackedConfigTest, OnePackedNameIsRefused) {
  const std::string file =
      WriteModel("ens", Replace(Replace(kPackedEnsYaml, "packed: [a, b, c]", "packed: [a]"), ", weights: [1, 2, 3]", ""));
  ExpectConfigError(Load().status(), file, 6, "ensemble.members[0].packed", "at least two members");
}

TEST_F(PackedConfigTest, MemberNamesMayNotRepeat) {
  const std::string file = WriteModel("ens", Replace(kPackedEnsYaml, "packed: [a, b, c]", "packed: [a, cnn, c]"));
  ExpectConfigError(Load().status(), file, 7, "ensemble.members[1].model", "duplicate member name 'cnn'");
}

TEST_F(PackedConfigTest, WeightsWithoutPackedAreRefused) {
  const std::string file = WriteModel("ens", Replace(kPackedEnsYaml, "{model: cnn}", "{model: cnn, weights: [1]}"));
  ExpectConfigError(Load().status(), file, 7, "ensemble.members[1].weights", "packed member");
}

}  // namespace
}  // namespace es::testing
