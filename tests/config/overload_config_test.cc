// An ensemble's `overload:` section (OverloadSpec): a good ladder loads with
// its fields read, and each broken one is an error pointing at the file, the
// line and the field: rungs that do not exist, answer with other tensors,
// repeat, nest or come in the wrong order, and bad targets and accuracies.
#include "config_fixture.h"

namespace es::testing {
namespace {

// A cheaper rung that is itself an ensemble (of cnn alone, tensors copied
// from it), so rungs are checked after every ensemble's tensors are resolved.
const std::string kSmallYaml = R"(platform: ensemble
max_batch_size: 32
ensemble:
  members:
    - model: cnn
)";

// The fixture's ensemble with a ladder, one rung a line.
const std::string kLadderYaml = kEnsYaml + R"(overload:
  latency_target_ms: 40
  dwell_ms: 500
  lower_priority_share: 0.7
  ladder:
    - ens
    - small
    - {model: mlp, accuracy: 0.91}
)";

class OverloadConfigTest : public ConfigTest {
 protected:
  void SetUp() override {
    ConfigTest::SetUp();
    WriteModel("small", kSmallYaml);
  }
  // Writes `yaml` as ens's config and returns its path.
  std::string WriteEns(const std::string& yaml) { return WriteModel("ens", yaml); }
  // A torchscript model like mlp but with `outputs` in place of mlp's.
  void WriteTorchModel(const std::string& name, const std::string& from, const std::string& to) {
    WriteModel(name, Replace(Replace(kMlpYaml, "name: mlp", "name: " + name), from, to));
    tree_.Write("repo/" + name + "/1/model.pt", "");
  }
};

TEST_F(OverloadConfigTest, GoodLadderLoadsWithItsFields) {
  WriteEns(kLadderYaml);
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const OverloadSpec& spec = config->FindModel("ens")->overload;
  EXPECT_TRUE(spec.enabled());
  EXPECT_DOUBLE_EQ(spec.latency_target_ms, 40);
  EXPECT_EQ(spec.dwell_ms, 500);
  EXPECT_DOUBLE_EQ(spec.lower_priority_share, 0.7);
  ASSERT_EQ(spec.ladder.size(), 3u);
  EXPECT_EQ(spec.ladder[0].model, "ens");
  EXPECT_EQ(spec.ladder[1].model, "small");
  EXPECT_EQ(spec.ladder[2].model, "mlp");
  EXPECT_LT(spec.ladder[0].accuracy, 0) << "no accuracy given: not known";
  EXPECT_DOUBLE_EQ(spec.ladder[2].accuracy, 0.91);
  // The rungs themselves have no ladder.
  EXPECT_FALSE(config->FindModel("small")->overload.enabled());
}

TEST_F(OverloadConfigTest, FlowLadderAndDefaults) {
  WriteEns(kEnsYaml + "overload:\n  latency_target_ms: 25.5\n"
                      "  ladder: [ens, small, {model: mlp, accuracy: 0.91}]\n");
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const OverloadSpec& spec = config->FindModel("ens")->overload;
  EXPECT_DOUBLE_EQ(spec.latency_target_ms, 25.5);
  EXPECT_EQ(spec.dwell_ms, 1000);
  EXPECT_DOUBLE_EQ(spec.lower_priority_share, 0.8);
  ASSERT_EQ(spec.ladder.size(), 3u);
  EXPECT_EQ(spec.ladder[1].model, "small");
  EXPECT_DOUBLE_EQ(spec.ladder[2].accuracy, 0.91);
}

TEST_F(OverloadConfigTest, WithoutTheSectionThereIsNoLadder) {
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_FALSE(config->FindModel("ens")->overload.enabled());
}

// Explicit and poll modes load one model at a time (LoadRepositoryModel),
// checked against the models served now: a ladder whose rungs are served
// should load as it does at start-up, and name its rungs as what to load
// first.
TEST_F(OverloadConfigTest, LadderLoadsAloneAgainstTheServedModels) {
  WriteEns(kLadderYaml);
  StatusOr<ServerConfig> config = LoadServerConfig(server_path_, /*with_repository=*/false);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  std::map<std::string, ModelConfig> served;
  for (const char* name : {"mlp", "cnn", "small"}) {
    StatusOr<ModelConfig> model = LoadRepositoryModel(*config, name, served);
    ASSERT_TRUE(model.ok()) << name << ": " << model.status().ToString();
    served.emplace(name, *std::move(model));
  }
  StatusOr<ModelConfig> ens = LoadRepositoryModel(*config, "ens", served);
  ASSERT_TRUE(ens.ok()) << ens.status().ToString();
  EXPECT_EQ(ens->overload.ladder.size(), 3u);
  StatusOr<std::vector<std::string>> rungs = RepositoryLadderRungs(*config, "ens");
  ASSERT_TRUE(rungs.ok()) << rungs.status().ToString();
  EXPECT_EQ(*rungs, (std::vector<std::string>{"small", "mlp"}));
}

TEST_F(OverloadConfigTest, UnknownRung) {
  const std::string yaml = Replace(kLadderYaml, "- small", "- rnn");
  const std::string file = WriteEns(yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "- rnn"), "overload.ladder[1]",
                    "unknown model 'rnn'");
}

TEST_F(OverloadConfigTest, RungWithOtherOutputDims) {
  WriteTorchModel("wide", "dims: [10]", "dims: [12]");
  const std::string yaml = Replace(kLadderYaml, "- small", "- wide");
  const std::string file = WriteEns(yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "- wide"), "overload.ladder[1]",
                    "rung 'wide' output 'probabilities' has dims [12], the ensemble's are [10]");
}

TEST_F(OverloadConfigTest, RungWithOtherInputDims) {
  WriteTorchModel("tall", "dims: [1, 28, 28]", "dims: [3, 28, 28]");
  const std::string yaml = Replace(kLadderYaml, "- small", "- tall");
  const std::string file = WriteEns(yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "- tall"), "overload.ladder[1]",
                    "rung 'tall' input 'input' has dims [3, 28, 28]");
}

TEST_F(OverloadConfigTest, RungMissingAnOutput) {
  WriteTorchModel("logit", "name: probabilities", "name: logits");
  const std::string yaml = Replace(kLadderYaml, "{model: mlp, accuracy", "{model: logit, accuracy");
  const std::string file = WriteEns(yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "{model: logit"), "overload.ladder[2]",
                    "rung 'logit' has no output 'probabilities'");
}

TEST_F(OverloadConfigTest, RungTakingSmallerBatches) {
  WriteTorchModel("tiny", "max_batch_size: 64", "max_batch_size: 8");
  const std::string yaml = Replace(kLadderYaml, "- small", "- tiny");
  const std::string file = WriteEns(yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "- tiny"), "overload.ladder[1]",
                    "rung 'tiny' has max_batch_size 8, the ensemble 32");
}

TEST_F(OverloadConfigTest, ZeroTarget) {
  const std::string yaml = Replace(kLadderYaml, "latency_target_ms: 40", "latency_target_ms: 0");
  const std::string file = WriteEns(yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "latency_target_ms"),
                    "overload.latency_target_ms", "must be a number of milliseconds");
}

// Errors about the section as a whole point where its mapping starts: its
// first key's line (yaml_reader's convention for block mappings).
TEST_F(OverloadConfigTest, MissingTarget) {
  const std::string yaml = Replace(kLadderYaml, "  latency_target_ms: 40\n", "");
  const std::string file = WriteEns(yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "  dwell_ms"), "overload.latency_target_ms",
                    "missing required field");
}

TEST_F(OverloadConfigTest, LadderNotStartingWithTheEnsemble) {
  const std::string yaml = Replace(Replace(kLadderYaml, "    - ens\n", ""), "- {model: mlp, accuracy",
                                   "- ens\n    - {model: mlp, accuracy");
  const std::string file = WriteEns(yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "- small"), "overload.ladder[0]",
                    "the ladder starts with the ensemble itself ('ens')");
}

TEST_F(OverloadConfigTest, RungListedTwice) {
  const std::string yaml = Replace(kLadderYaml, "    - small\n", "    - mlp\n");
  const std::string file = WriteEns(yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "{model: mlp, accuracy"), "overload.ladder[2]",
                    "rung 'mlp' is listed twice");
}

TEST_F(OverloadConfigTest, OverloadOnATorchscriptModel) {
  const std::string yaml =
      kMlpYaml + "overload:\n  latency_target_ms: 40\n  ladder: [mlp, cnn]\n";
  const std::string file = WriteModel("mlp", yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "  latency_target_ms"), "overload",
                    "only an ensemble has an overload ladder");
}

TEST_F(OverloadConfigTest, RungWithALadderOfItsOwn) {
  WriteModel("small", kSmallYaml + "overload:\n  latency_target_ms: 40\n  ladder: [small, cnn]\n");
  const std::string file = WriteEns(kLadderYaml);
  ExpectConfigError(Load().status(), file, LineOf(kLadderYaml, "- small"), "overload.ladder[1]",
                    "rung 'small' has an overload ladder of its own");
}

TEST_F(OverloadConfigTest, AccuracyAboveOne) {
  const std::string yaml = Replace(kLadderYaml, "accuracy: 0.91", "accuracy: 1.5");
  const std::string file = WriteEns(yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "accuracy: 1.5"), "overload.ladder[2].accuracy",
                    "out of range");
}

TEST_F(OverloadConfigTest, NegativeAccuracy) {
  const std::string yaml = Replace(kLadderYaml, "accuracy: 0.91", "accuracy: -0.1");
  const std::string file = WriteEns(yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "accuracy: -0.1"), "overload.ladder[2].accuracy",
                    "out of range");
}

// A cascade may serve as several rungs, each at its own exit_threshold.
TEST_F(OverloadConfigTest, CascadeRungsAtTheirOwnThresholds) {
  WriteModel("casc", R"(platform: ensemble
max_batch_size: 32
ensemble:
  combine: cascade
  exit_threshold: 0.9
  members:
    - model: cnn
)");
  WriteEns(kEnsYaml + R"(overload:
  latency_target_ms: 40
  ladder:
    - ens
    - casc
    - {model: casc, exit_threshold: 0.7, accuracy: 0.9}
    - mlp
)");
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const OverloadSpec& spec = config->FindModel("ens")->overload;
  ASSERT_EQ(spec.ladder.size(), 4u);
  EXPECT_EQ(spec.ladder[1].exit_threshold, 0) << "the cascade's own threshold";
  EXPECT_DOUBLE_EQ(spec.ladder[2].exit_threshold, 0.7);
  EXPECT_EQ(spec.ladder[2].label(), "casc@0.7");
  EXPECT_EQ(spec.ladder[1].label(), "casc");
}

TEST_F(OverloadConfigTest, ExitThresholdOnARungThatIsNotACascade) {
  const std::string yaml = Replace(kLadderYaml, "- small", "- {model: small, exit_threshold: 0.8}");
  const std::string file = WriteEns(yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "{model: small"), "overload.ladder[1]",
                    "rung 'small' sets exit_threshold but is not a cascade");
}

TEST_F(OverloadConfigTest, ExitThresholdOutOfRange) {
  const std::string yaml = Replace(kLadderYaml, "- small", "- {model: small, exit_threshold: 1.5}");
  const std::string file = WriteEns(yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "{model: small"), "overload.ladder[1].exit_threshold",
                    "exit_threshold must be in (0, 1]");
}

TEST_F(OverloadConfigTest, LadderOfOneRung) {
  const std::string yaml = kEnsYaml + "overload:\n  latency_target_ms: 40\n  ladder: [ens]\n";
  const std::string file = WriteEns(yaml);
  ExpectConfigError(Load().status(), file, LineOf(yaml, "ladder:"), "overload.ladder",
                    "at least one cheaper rung");
}

}  // namespace
}  // namespace es::testing
