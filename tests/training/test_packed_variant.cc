// The packed variant ensemble-train writes (training/packed_variant.h): which
// members it packs, what it writes and publishes, that the server's own
// config loader accepts it with every cross-check, and that its packed
// models answer what the members answer.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "config/server_config.h"
#include "tests/common/temp_dir.h"
#include "tests/training/served_ensembles.h"
#include "torch_utils/model_zoo.h"
#include "training/packed_variant.h"
#include "training/trained_repository.h"

namespace es {
namespace {

namespace fs = std::filesystem;

// Two mlps, a cnn, two convnets and a member from a TorchScript file (which
// is never packed, whatever its architecture).
TrainConfig MixedConfig() {
  TrainConfig config;
  config.members = {{"mlp_a", "mlp", "", 1},         {"cnn_a", "cnn", "", 2},     {"conv_a", "convnet", "", 3},
                    {"mlp_b", "mlp", "", 4},         {"conv_b", "convnet", "", 5}, {"file_mlp", "", "/m.pt", 6}};
  config.ensemble.name = "ens";
  return config;
}

std::vector<torch::jit::Module> BuildMembers(const TrainConfig& config) {
  std::vector<torch::jit::Module> modules;
  for (const MemberSpec& member : config.members) {
    modules.push_back(BuildZooModel(member.architecture.empty() ? "mlp" : member.architecture, member.seed).value());
  }
  return modules;
}

std::vector<at::Tensor> MemberAnswers(std::vector<torch::jit::Module>& modules, const at::Tensor& images) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> answers;
  for (torch::jit::Module& module : modules) {
    module.eval();
    answers.push_back(module.forward({images}).toTensor());
  }
  return answers;
}

// MixedConfig's members, built, and their packed variant.
struct PackedRun {
  TrainConfig config = MixedConfig();
  std::vector<torch::jit::Module> modules = BuildMembers(config);
  TrainedVariants variants{std::nullopt, PackTrainedMembers(config, modules).value(), ""};
};

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(PackedVariantTest, PacksEachArchitectureWithTwoOrMoreZooMembersInTheConfigsOrder) {
  const TrainConfig config = MixedConfig();
  StatusOr<std::optional<PackedVariant>> packed = PackTrainedMembers(config, BuildMembers(config));
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  ASSERT_TRUE(packed->has_value());
  const PackedVariant& variant = **packed;
  EXPECT_EQ(variant.name, "ens_packed");
  ASSERT_EQ(variant.groups.size(), 2u);  // the lone cnn and the file member stay single
  EXPECT_EQ(variant.groups[0].model, "ens_packed_mlp");
  EXPECT_EQ(variant.groups[0].members, (std::vector<size_t>{0, 3}));
  EXPECT_EQ(variant.groups[1].model, "ens_packed_convnet");
  EXPECT_EQ(variant.groups[1].members, (std::vector<size_t>{2, 4}));
  EXPECT_EQ(variant.groups[1].module.attr("packed_members").toInt(), 2);

  EXPECT_EQ(PackedFolderNames(config),
            (std::vector<std::string>{"ens_packed", "ens_packed_mlp", "ens_packed_cnn", "ens_packed_convnet"}));
}

TEST(PackedVariantTest, SeveralHostsGetOnePackedModelEachOfAtLeastTwoMembers) {
  TrainConfig config;
  config.ensemble.name = "ens";
  for (int i = 1; i <= 5; ++i) config.members.push_back({"conv_" + std::to_string(i), "convnet", "", uint64_t(i)});
  config.members.push_back({"mlp_a", "mlp", "", 6});
  config.members.push_back({"mlp_b", "mlp", "", 7});
  const std::vector<torch::jit::Module> modules = BuildMembers(config);
  const std::optional<PackedVariant> two_hosts = PackTrainedMembers(config, modules, 2).value();
  ASSERT_TRUE(two_hosts);
  ASSERT_EQ(two_hosts->groups.size(), 3u);
  EXPECT_EQ(two_hosts->groups[0].model, "ens_packed_convnet_1");
  EXPECT_EQ(two_hosts->groups[0].members, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(two_hosts->groups[1].model, "ens_packed_convnet_2");
  EXPECT_EQ(two_hosts->groups[1].members, (std::vector<size_t>{3, 4}));
  EXPECT_EQ(two_hosts->groups[2].model, "ens_packed_mlp");  // two members: one model, not two of one
  EXPECT_EQ(two_hosts->groups[2].members, (std::vector<size_t>{5, 6}));
  // Eight hosts: still no packed model of a single member.
  const std::optional<PackedVariant> eight_hosts = PackTrainedMembers(config, modules, 8).value();
  ASSERT_EQ(eight_hosts->groups.size(), 3u);
  EXPECT_EQ(eight_hosts->groups[1].members.size(), 2u);
  // Every name a run of any host count could leave, for the writer to clear.
  EXPECT_EQ(PackedFolderNames(config),
            (std::vector<std::string>{"ens_packed", "ens_packed_convnet", "ens_packed_convnet_1",
                                      "ens_packed_convnet_2", "ens_packed_mlp"}));
  const std::string yaml = PackedEnsembleYaml(config, *two_hosts);
  EXPECT_NE(yaml.find("    - {model: ens_packed_convnet_1, packed: [conv_1, conv_2, conv_3]}\n"
                      "    - {model: ens_packed_convnet_2, packed: [conv_4, conv_5]}\n"
                      "    - {model: ens_packed_mlp, packed: [mlp_a, mlp_b]}\n"),
            std::string::npos)
      << yaml;
}

TEST(PackedVariantTest, NoVariantWithoutAPairOrWhenTurnedOff) {
  TrainConfig config = MixedConfig();
  config.ensemble.pack = false;
  StatusOr<std::optional<PackedVariant>> off = PackTrainedMembers(config, BuildMembers(config));
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->has_value());

  TrainConfig singles;
  singles.members = {{"a", "mlp", "", 1}, {"b", "cnn", "", 2}};
  StatusOr<std::optional<PackedVariant>> none = PackTrainedMembers(singles, BuildMembers(singles));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  StatusOr<std::optional<PackedVariant>> short_list = PackTrainedMembers(singles, {});
  ASSERT_FALSE(short_list.ok());
  EXPECT_NE(short_list.status().message().find("0 modules for 2 members"), std::string::npos);
}

TEST(PackedVariantTest, TheCheckFindsThePackedAnswersEqualToTheMembersAndNoticesASwap) {
  const TrainConfig config = MixedConfig();
  std::vector<torch::jit::Module> modules = BuildMembers(config);
  const std::optional<PackedVariant> variant = PackTrainedMembers(config, modules).value();
  ASSERT_TRUE(variant);
  torch::manual_seed(3);
  const at::Tensor images = torch::rand({50, 1, 28, 28});
  std::vector<at::Tensor> answers = MemberAnswers(modules, images);
  StatusOr<PackedCheck> check = CheckPackedVariant(*variant, images, answers, 16);  // batches 16, 16, 16, 2
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  EXPECT_LE(check->max_abs_difference, 1e-5);
  EXPECT_GT(check->seconds_per_row, 0);

  std::swap(answers[0], answers[3]);  // the two mlps' answers, each under the other's name
  check = CheckPackedVariant(*variant, images, answers, 16);
  ASSERT_TRUE(check.ok());
  EXPECT_GT(check->max_abs_difference, 1e-3);

  answers.pop_back();
  answers.pop_back();  // conv_b's answers gone
  EXPECT_FALSE(CheckPackedVariant(*variant, images, answers, 16).ok());
}

TEST(PackedVariantTest, TheWrittenVariantLoadsAsTheServerLoadsItAndAStaleOneIsRemoved) {
  testing::TempDir dir;
  PackedRun run;
  ASSERT_TRUE(WriteTrainedRepository(dir.root(), run.config, run.modules, {"cpu:0"}, run.variants).ok());

  // Every cross-check of a server start: the packed models' outputs are the
  // ensemble's with the packed axis, every member exists.
  StatusOr<std::map<std::string, training_test::ServedEnsemble>> served =
      training_test::LoadServedEnsembles(dir.Path("server.yaml"), /*server_yaml=*/true);
  ASSERT_TRUE(served.ok()) << served.status().ToString() << "\n" << ReadFile(dir.path() / "ens_packed/config.yaml");
  const training_test::ServedEnsemble& packed = served->at("ens_packed");
  // Entries where each group's first member stands: mlp_a's, cnn_a, conv_a's, file_mlp.
  EXPECT_EQ(packed.members, (std::vector<std::string>{"ens_packed_mlp", "cnn_a", "ens_packed_convnet", "file_mlp"}));
  EXPECT_EQ(packed.packed.at("ens_packed_mlp"), (std::vector<std::string>{"mlp_a", "mlp_b"}));
  EXPECT_EQ(packed.packed.at("ens_packed_convnet"), (std::vector<std::string>{"conv_a", "conv_b"}));
  EXPECT_NE(ReadFile(dir.path() / "ens_packed_convnet/config.yaml").find("dims: [2, 10]"), std::string::npos);
  const torch::jit::Module loaded = torch::jit::load((dir.path() / "ens_packed_mlp/1/model.pt").string());
  EXPECT_EQ(loaded.attr("packed_members").toInt(), 2);

  // A later run without packing (or with other architectures) leaves none
  // of this run's packed folders to be served as if current.
  ASSERT_TRUE(WriteTrainedRepository(dir.root(), run.config, run.modules, {"cpu:0"}).ok());
  for (const char* folder : {"ens_packed", "ens_packed_mlp", "ens_packed_convnet"}) {
    EXPECT_FALSE(fs::exists(dir.path() / folder)) << folder;
  }
  EXPECT_TRUE(fs::exists(dir.path() / "ens/config.yaml"));
}

// Every model ensemble-train writes (members, packed models) is served with
// its waiting requests batched and no lone request held back: the server
// reads a dynamic_batching section with max_queue_delay_us 0 from each.
TEST(PackedVariantTest, EveryWrittenModelBatchesWhatWaitsAndNeverWaitsForMore) {
  testing::TempDir dir;
  PackedRun run;
  ASSERT_TRUE(WriteTrainedRepository(dir.root(), run.config, run.modules, {"cpu:0"}, run.variants).ok());
  StatusOr<std::map<std::string, ModelConfig>> models = LoadRepository(dir.root());
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  size_t checked = 0;
  for (const auto& [name, model] : *models) {
    if (model.is_ensemble()) continue;
    EXPECT_TRUE(model.dynamic_batching.enabled) << name;
    EXPECT_EQ(model.dynamic_batching.max_queue_delay_us, 0) << name;
    ++checked;
  }
  EXPECT_EQ(checked, run.config.members.size() + run.variants.packed->groups.size());
}

TEST(PackedVariantTest, PublishGivesPackedModelsTheirNextVersionAndKeepsTheUsersEnsembleFile) {
  testing::TempDir dir;
  PackedRun run;
  StatusOr<std::vector<std::string>> published = PublishTrained(dir.root(), run.config, run.modules, run.variants);
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  const std::vector<std::string> first{"mlp_a: version 1",
                                       "cnn_a: version 1",
                                       "conv_a: version 1",
                                       "mlp_b: version 1",
                                       "conv_b: version 1",
                                       "file_mlp: version 1",
                                       "ens_packed_mlp: version 1",
                                       "ens_packed_convnet: version 1",
                                       "ens_packed: new packed ensemble",
                                       "ens: new ensemble"};
  EXPECT_EQ(*published, first);
  StatusOr<std::map<std::string, training_test::ServedEnsemble>> repo =
      training_test::LoadServedEnsembles(dir.root(), /*server_yaml=*/false);
  ASSERT_TRUE(repo.ok()) << repo.status().ToString();
  ASSERT_TRUE(repo->count("ens_packed"));

  published = PublishTrained(dir.root(), run.config, run.modules, run.variants);
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  EXPECT_EQ(published->at(6), "ens_packed_mlp: version 2");
  EXPECT_EQ(published->at(8), "ens_packed: config.yaml kept (it follows its models' newest versions)");
  EXPECT_TRUE(fs::exists(dir.path() / "ens_packed_convnet/2/model.pt"));
  EXPECT_FALSE(fs::exists(dir.path() / (".publish-" + std::to_string(getpid()))));
}

// A packed model already published with another member count (members
// added to the config) would serve a new version its kept config.yaml
// does not describe: nothing is published, and the error says what to do.
TEST(PackedVariantTest, PublishRefusesAPackedModelOfAnotherSizeAndPublishesNothing) {
  testing::TempDir dir;
  PackedRun run;
  ASSERT_TRUE(PublishTrained(dir.root(), run.config, run.modules, run.variants).ok());
  TrainConfig more = run.config;
  more.members.push_back({"mlp_c", "mlp", "", 8});
  std::vector<torch::jit::Module> modules = BuildMembers(more);
  TrainedVariants variants{std::nullopt, PackTrainedMembers(more, modules).value(), ""};
  StatusOr<std::vector<std::string>> published = PublishTrained(dir.root(), more, modules, variants);
  ASSERT_FALSE(published.ok());
  EXPECT_NE(published.status().message().find("the packed model ens_packed_mlp in the repository computes another "
                                              "number of members than this run's 3 (its config.yaml has no "
                                              "'dims: [3, 10]')"),
            std::string::npos)
      << published.status().message();
  EXPECT_FALSE(fs::exists(dir.path() / "mlp_a" / "2")) << "a member was published";
  EXPECT_FALSE(fs::exists(dir.path() / "mlp_c"));
  // Without packing the members go in.
  variants.packed.reset();
  ASSERT_TRUE(PublishTrained(dir.root(), more, modules, variants).ok());
  EXPECT_TRUE(fs::exists(dir.path() / "mlp_a" / "2" / "model.pt"));
}

TEST(PackedVariantTest, TheReportSaysHowThePackedModelsAnswered) {
  const TrainConfig config = MixedConfig();
  std::vector<torch::jit::Module> modules = BuildMembers(config);
  const std::optional<PackedVariant> variant = PackTrainedMembers(config, modules).value();
  ASSERT_TRUE(variant);
  const at::Tensor images = torch::rand({8, 1, 28, 28});
  Evaluation evaluation;
  evaluation.members = MemberAnswers(modules, images);
  evaluation.ensemble = CombineMembers(evaluation.members, "mean");
  evaluation.member_seconds_per_row = {1e-6, 2e-6, 3e-6, 4e-6, 5e-6, 6e-6};
  TrainReport report = ScoreEvaluation(config, evaluation, torch::zeros({8}, torch::kLong));
  const PackedCheck check = CheckPackedVariant(*variant, images, evaluation.members, 8).value();
  AddPackedCheck(*variant, check, evaluation, &report);
  EXPECT_DOUBLE_EQ(report.members_seconds_per_row, 1e-6 + 3e-6 + 4e-6 + 5e-6);  // the packed members only
  const std::string text = FormatReport(report);
  EXPECT_NE(text.find("Packed (ens_packed): ens_packed_mlp (2 members), ens_packed_convnet (2 members)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("(the members on their own: 13.0 us)"), std::string::npos) << text;
}

}  // namespace
}  // namespace es
