// The cascade sweep of ensemble-train (training/cascade_sweep.h)
// on hand-made probabilities whose right threshold is known, and the
// cascade variant it leads to: report, printed table, and the config.yaml
// written into the repository, loaded by the server's own config loader.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "torch_utils/model_zoo.h"
#include "training/calibration.h"
#include "training/cascade_sweep.h"
#include "training/ensemble_trainer.h"
#include "training/trained_repository.h"
#include "tests/common/temp_dir.h"
#include "tests/training/served_ensembles.h"

namespace es {
namespace {

namespace fs = std::filesystem;

at::Tensor Probs(const std::vector<std::vector<float>>& rows) {
  at::Tensor t = at::empty({static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())}, at::kFloat);
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t c = 0; c < rows[r].size(); ++c) t[static_cast<int64_t>(r)][static_cast<int64_t>(c)] = rows[r][c];
  }
  return t;
}

at::Tensor Labels(const std::vector<int64_t>& labels) {
  return at::tensor(labels, at::TensorOptions().dtype(at::kLong));
}

// Member 0 ("cheap", cost 1) is sure of rows 0, 2, 3 (0.9, 0.75, 0.8) and
// right on them; on row 1 it is unsure (0.6) and wrong. Member 1
// ("expensive", cost 3) puts every row right once averaged in. So the
// full ensemble is 4/4, and the cascade is too exactly when row 1 goes on
// to member 1: threshold > 0.6. The smallest such threshold of the list is
// 0.625; 0.75 lets row 2 (top exactly 0.75) leave too, since a row leaves
// at >=.
struct HandMade {
  at::Tensor cheap = Probs({{0.9f, 0.05f, 0.05f}, {0.6f, 0.3f, 0.1f}, {0.125f, 0.75f, 0.125f}, {0.1f, 0.1f, 0.8f}});
  at::Tensor expensive = Probs({{0.8f, 0.1f, 0.1f}, {0.1f, 0.8f, 0.1f}, {0.2f, 0.6f, 0.2f}, {0.3f, 0.3f, 0.4f}});
  at::Tensor labels = Labels({0, 1, 1, 2});
  std::vector<double> costs{1.0, 3.0};
  std::vector<double> thresholds{0.5, 0.625, 0.75, 0.875, 0.95, 1.0};
};

TEST(CascadeSweepTest, HandMadeProbabilitiesGiveTheKnownThresholdAccuracyAndCost) {
  HandMade h;
  StatusOr<CascadeSweep> sweep =
      SweepCascade({h.cheap, h.expensive}, h.labels, h.costs, StagesCheapestFirst(h.costs), h.thresholds);
  ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
  EXPECT_EQ(sweep->rows, 4);
  EXPECT_EQ(sweep->full_correct, 4);
  EXPECT_DOUBLE_EQ(sweep->full_cost, 4.0);
  ASSERT_EQ(sweep->thresholds.size(), 6u);

  struct Want {
    int64_t correct;
    std::vector<int64_t> exits;
    double cost;  // mean member cost per row
  };
  const std::vector<Want> want{{3, {4, 0}, 1.0},  // 0.5: everyone leaves after the cheap member, row 1 wrong
                               {4, {3, 1}, (3 * 1.0 + 4.0) / 4},  // 0.625: row 1 goes on and is put right
                               {4, {3, 1}, (3 * 1.0 + 4.0) / 4},  // 0.75: row 2 (exactly 0.75) still leaves
                               {4, {1, 3}, (1.0 + 3 * 4.0) / 4},  // 0.875: only row 0 (0.9) leaves
                               {4, {0, 4}, 4.0},                  // 0.95: the full ensemble
                               {4, {0, 4}, 4.0}};
  for (size_t i = 0; i < want.size(); ++i) {
    const CascadeThresholdResult& t = sweep->thresholds[i];
    EXPECT_EQ(t.threshold, h.thresholds[i]);
    EXPECT_EQ(t.correct, want[i].correct) << "threshold " << t.threshold;
    EXPECT_DOUBLE_EQ(t.accuracy, want[i].correct / 4.0) << "threshold " << t.threshold;
    EXPECT_EQ(t.exits_per_stage, want[i].exits) << "threshold " << t.threshold;
    EXPECT_DOUBLE_EQ(t.mean_member_cost, want[i].cost) << "threshold " << t.threshold;
    EXPECT_DOUBLE_EQ(t.cost_fraction, want[i].cost / 4.0) << "threshold " << t.threshold;
  }
  // NLL at 0.5: the cheap member's probability of each label.
  const double nll = -(std::log(0.9f) + std::log(0.3f) + std::log(0.75f) + std::log(0.8f)) / 4;
  EXPECT_NEAR(sweep->thresholds[0].nll, nll, 1e-6);
  EXPECT_EQ(sweep->chosen, 1u);
  EXPECT_EQ(sweep->thresholds[sweep->chosen].threshold, 0.625);
  EXPECT_TRUE(sweep->chosen_within_tolerance);

  // The full ensemble is the mean ensemble, as ensemble-train scores it.
  const ClassifierScores mean = ScoreClassifier(CombineMembers({h.cheap, h.expensive}, "mean"), h.labels);
  EXPECT_DOUBLE_EQ(sweep->full_accuracy, mean.accuracy);
  EXPECT_NEAR(sweep->full_nll, mean.nll, 1e-6);
  EXPECT_NEAR(sweep->thresholds.back().nll, mean.nll, 1e-6);
}

// 0.1 points of 1000 rows is one row: a threshold that loses one row is
// close enough, one that loses two is not.
TEST(CascadeSweepTest, TheToleranceIsCountedInRows) {
  HandMade h;
  auto repeat = [](const at::Tensor& t, int64_t sure_rows, int64_t unsure_rows) {
    return at::cat({t[0].unsqueeze(0).expand({sure_rows, -1}), t[1].unsqueeze(0).expand({unsure_rows, -1})});
  };
  for (int64_t lost : {1, 2}) {
    const at::Tensor cheap = repeat(h.cheap, 1000 - lost, lost);
    const at::Tensor expensive = repeat(h.expensive, 1000 - lost, lost);
    const at::Tensor labels = at::cat({at::zeros({1000 - lost}, at::kLong), at::ones({lost}, at::kLong)});
    StatusOr<CascadeSweep> sweep =
        SweepCascade({cheap, expensive}, labels, h.costs, StagesCheapestFirst(h.costs), h.thresholds);
    ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
    EXPECT_EQ(sweep->full_correct, 1000);
    EXPECT_EQ(sweep->thresholds[0].correct, 1000 - lost);
    EXPECT_EQ(sweep->thresholds[sweep->chosen].threshold, lost == 1 ? 0.5 : 0.625) << lost << " row(s) lost";
  }
}

TEST(CascadeSweepTest, StagesRunInTheGivenOrderAndAStageAveragesItsMembers) {
  HandMade h;
  // Expensive first: at 0.75 rows 0 and 1 (0.8) leave after it alone,
  // rows 2 (0.6) and 3 (0.4) go on to the cheap member.
  StatusOr<CascadeSweep> reversed = SweepCascade({h.cheap, h.expensive}, h.labels, h.costs, {{1}, {0}}, {0.75});
  ASSERT_TRUE(reversed.ok()) << reversed.status().ToString();
  EXPECT_EQ(reversed->thresholds[0].exits_per_stage, (std::vector<int64_t>{2, 2}));
  EXPECT_DOUBLE_EQ(reversed->thresholds[0].mean_member_cost, (2 * 3.0 + 2 * 4.0) / 4);

  // One stage of both members: every row gets the full ensemble at any threshold.
  StatusOr<CascadeSweep> one = SweepCascade({h.cheap, h.expensive}, h.labels, h.costs, {{0, 1}}, {0.5, 1.0});
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  for (const CascadeThresholdResult& t : one->thresholds) {
    EXPECT_EQ(t.correct, 4);
    EXPECT_EQ(t.exits_per_stage, std::vector<int64_t>{4});
    EXPECT_DOUBLE_EQ(t.cost_fraction, 1.0);
  }

  EXPECT_EQ(StagesCheapestFirst({3, 1, 2}), (std::vector<std::vector<size_t>>{{1}, {2}, {0}}));
  EXPECT_EQ(StagesCheapestFirst({2, 1, 2}), (std::vector<std::vector<size_t>>{{1}, {0}, {2}}));  // ties: member order
}

TEST(CascadeSweepTest, TwoStagesAreTheCheapestMemberThenEveryOther) {
  using Stages = std::vector<std::vector<size_t>>;
  EXPECT_EQ(StagesCheapestThenRest({3, 1, 2, 4}), (Stages{{1}, {2, 0, 3}}));
  EXPECT_EQ(StagesCheapestThenRest({2, 1, 2}), (Stages{{1}, {0, 2}}));  // ties: member order
  EXPECT_EQ(StagesCheapestThenRest({2, 1}), (Stages{{1}, {0}}));
  EXPECT_EQ(StagesCheapestThenRest({5}), (Stages{{0}}));
  EXPECT_EQ(StagesCheapestThenRest({}), Stages{});
}

// As in the server: a float probability of exactly 1.0 leaves even at 1.0.
TEST(CascadeSweepTest, ASaturatedRowLeavesEvenAtThresholdOne) {
  const at::Tensor cheap = Probs({{1.0f, 0.0f}, {0.7f, 0.3f}});
  const at::Tensor expensive = Probs({{0.6f, 0.4f}, {0.2f, 0.8f}});
  StatusOr<CascadeSweep> sweep = SweepCascade({cheap, expensive}, Labels({0, 1}), {1, 1}, {{0}, {1}}, {1.0});
  ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
  EXPECT_EQ(sweep->thresholds[0].exits_per_stage, (std::vector<int64_t>{1, 1}));
}

TEST(CascadeSweepTest, WhenNoThresholdIsCloseEnoughTheLargestIsChosenAndSaidSo) {
  HandMade h;
  StatusOr<CascadeSweep> sweep = SweepCascade({h.cheap, h.expensive}, h.labels, h.costs, {{0}, {1}}, {0.3, 0.5});
  ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
  EXPECT_FALSE(sweep->chosen_within_tolerance);
  EXPECT_EQ(sweep->chosen, 1u);
}

TEST(CascadeSweepTest, BadInputIsAClearError) {
  HandMade h;
  const std::vector<at::Tensor> members{h.cheap, h.expensive};
  struct Case {
    std::vector<at::Tensor> members;
    at::Tensor labels;
    std::vector<double> costs;
    std::vector<std::vector<size_t>> stages;
    std::vector<double> thresholds;
    const char* needle;
  };
  const std::vector<Case> cases{
      {members, h.labels, {1}, {{0}, {1}}, {0.5}, "1 costs for 2 members"},
      {members, h.labels, {1, NAN}, {{0}, {1}}, {0.5}, "a cost is nan"},
      {members, h.labels, h.costs, {{0}, {0, 1}}, {0.5}, "in two stages"},
      {members, h.labels, h.costs, {{0}, {2}}, {0.5}, "out of range"},
      {members, h.labels, h.costs, {{0}}, {0.5}, "in no stage"},
      {members, h.labels, h.costs, {{0}, {}}, {0.5}, "an empty stage"},
      {members, h.labels, h.costs, {{0}, {1}}, {0.9, 0.5}, "strictly ascending in (0, 1]; got 0.5"},
      {members, h.labels, h.costs, {{0}, {1}}, {0.0}, "strictly ascending in (0, 1]; got 0"},
      {members, h.labels, h.costs, {{0}, {1}}, {1.5}, "got 1.5"},
      {members, Labels({0, 1, 7, 2}), h.costs, {{0}, {1}}, {0.5}, "label 7 at row 2 is outside [0, 3)"},
      {{h.cheap, h.expensive.narrow(0, 0, 3)}, h.labels, h.costs, {{0}, {1}}, {0.5}, "member 1's probabilities"},
      {{}, h.labels, {}, {}, {0.5}, "no members"},
  };
  for (const Case& c : cases) {
    StatusOr<CascadeSweep> sweep = SweepCascade(c.members, c.labels, c.costs, c.stages, c.thresholds);
    ASSERT_FALSE(sweep.ok()) << c.needle;
    EXPECT_EQ(sweep.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(sweep.status().message().find(c.needle), std::string::npos) << sweep.status().message();
  }
}

// ---- the variant: report, table, repository ------------------------------------

TrainConfig TwoMembers() {
  TrainConfig config;
  config.members = {{"big", "mlp", "", 1}, {"small", "mlp", "", 2}};
  config.ensemble.name = "ens";
  return config;
}

TEST(CascadeVariantTest, TheReportSweepsCheapestFirstByTheEvaluationsTimings) {
  HandMade h;
  const TrainConfig config = TwoMembers();
  // Member 0 ("big") is the expensive one here: the cascade runs "small" first.
  Evaluation evaluation{{h.expensive, h.cheap}, CombineMembers({h.expensive, h.cheap}, "mean"), {3e-6, 1e-6}};
  const TrainReport report = ScoreEvaluation(config, evaluation, h.labels);
  ASSERT_TRUE(report.cascade) << report.cascade_error;
  const std::optional<CascadeVariant> variant = ChosenCascade(report);
  ASSERT_TRUE(variant);
  EXPECT_EQ(variant->name, "ens_cascade");
  EXPECT_EQ(variant->stages, (std::vector<std::vector<std::string>>{{"small"}, {"big"}}));
  EXPECT_EQ(variant->exit_threshold, 0.65);  // the default list's smallest above 0.6
  EXPECT_DOUBLE_EQ(report.cascade->full_accuracy, report.ensemble.scores.accuracy);
  const std::string text = FormatReport(report);
  for (const char* needle : {"Cascade (ens_cascade), stages with forward time per row: [small 1.0 us], [big 3.0 us]",
                             "full ensemble: 100.00%", "0.650   100.00%", "3/1",
                             "chosen: exit_threshold 0.65, 100.00% (+0.00 points), 43."}) {
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;
  }

  evaluation.member_seconds_per_row.clear();
  const TrainReport untimed = ScoreEvaluation(config, evaluation, h.labels);
  EXPECT_FALSE(untimed.cascade);
  EXPECT_FALSE(ChosenCascade(untimed));
  EXPECT_NE(FormatReport(untimed).find("cascade: not swept (the evaluation has no member timings)"), std::string::npos);
}

// ensemble.cascade_stages: "two" (the default) runs the cheapest member
// alone, then the others at once; "per_member" one at a time.
TEST(CascadeVariantTest, TheStagesFollowTheConfig) {
  HandMade h;
  TrainConfig config = TwoMembers();
  config.members.push_back({"mid", "mlp", "", 3});
  const Evaluation evaluation{
      {h.expensive, h.cheap, h.cheap}, CombineMembers({h.expensive, h.cheap, h.cheap}, "mean"), {3e-6, 1e-6, 2e-6}};
  const TrainReport two = ScoreEvaluation(config, evaluation, h.labels);
  ASSERT_TRUE(two.cascade) << two.cascade_error;
  EXPECT_EQ(ChosenCascade(two)->stages, (std::vector<std::vector<std::string>>{{"small"}, {"mid", "big"}}));
  EXPECT_NE(FormatReport(two).find("stages with forward time per row: [small 1.0 us], [mid 2.0 us, big 3.0 us]"),
            std::string::npos)
      << FormatReport(two);
  config.ensemble.cascade_stages = "per_member";
  const TrainReport per_member = ScoreEvaluation(config, evaluation, h.labels);
  ASSERT_TRUE(per_member.cascade) << per_member.cascade_error;
  EXPECT_EQ(ChosenCascade(per_member)->stages, (std::vector<std::vector<std::string>>{{"small"}, {"mid"}, {"big"}}));
}

TEST(CascadeVariantTest, TheWrittenVariantLoadsAsTheServerLoadsIt) {
  testing::TempDir dir;
  const TrainConfig config = TwoMembers();
  std::vector<torch::jit::Module> modules{BuildZooModel("mlp", 1).value(), BuildZooModel("mlp", 2).value()};
  const CascadeVariant variant{"ens_cascade", {{"small"}, {"big"}}, 0.995};
  ASSERT_TRUE(WriteTrainedRepository(dir.root(), config, modules, {"cpu:0"}, {variant}).ok());

  StatusOr<std::map<std::string, training_test::ServedEnsemble>> served =
      training_test::LoadServedEnsembles(dir.Path("server.yaml"), /*server_yaml=*/true);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  ASSERT_EQ(served->size(), 2u);
  const training_test::ServedEnsemble& cascade = served->at("ens_cascade");
  ASSERT_TRUE(cascade.cascade);
  EXPECT_EQ(cascade.exit_threshold, 0.995);
  EXPECT_EQ(cascade.members, (std::vector<std::string>{"small", "big"}));  // listed in stage order
  EXPECT_EQ(cascade.stages, (std::vector<std::vector<size_t>>{{0}, {1}}));
  EXPECT_FALSE(served->at("ens").cascade);

  // A later run in the same folder without a sweep leaves no stale variant.
  ASSERT_TRUE(WriteTrainedRepository(dir.root(), config, modules, {"cpu:0"}).ok());
  EXPECT_FALSE(fs::exists(dir.path() / "ens_cascade"));
}

// Two stages, the second of two members (ensemble.cascade_stages: two).
TEST(CascadeVariantTest, AStageOfSeveralMembersLoadsAsTheServerLoadsIt) {
  testing::TempDir dir;
  TrainConfig config = TwoMembers();
  config.members.push_back({"mid", "mlp", "", 3});
  std::vector<torch::jit::Module> modules{BuildZooModel("mlp", 1).value(), BuildZooModel("mlp", 2).value(),
                                          BuildZooModel("mlp", 3).value()};
  const CascadeVariant variant{"ens_cascade", {{"small"}, {"mid", "big"}}, 0.95};
  ASSERT_TRUE(WriteTrainedRepository(dir.root(), config, modules, {"cpu:0"}, {variant}).ok());
  StatusOr<std::map<std::string, training_test::ServedEnsemble>> served =
      training_test::LoadServedEnsembles(dir.Path("server.yaml"), /*server_yaml=*/true);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  const training_test::ServedEnsemble& cascade = served->at("ens_cascade");
  ASSERT_TRUE(cascade.cascade);
  EXPECT_EQ(cascade.members, (std::vector<std::string>{"small", "mid", "big"}));
  EXPECT_EQ(cascade.stages, (std::vector<std::vector<size_t>>{{0}, {1, 2}}));
}

TEST(CascadeVariantTest, PublishAddsTheVariantOnceAndThenKeepsTheUsersFile) {
  testing::TempDir dir;
  const TrainConfig config = TwoMembers();
  std::vector<torch::jit::Module> modules{BuildZooModel("mlp", 1).value(), BuildZooModel("mlp", 2).value()};
  StatusOr<std::vector<std::string>> published =
      PublishTrained(dir.root(), config, modules, {CascadeVariant{"ens_cascade", {{"small"}, {"big"}}, 0.9}});
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  // The variant before the ensemble (whose ladder may name it).
  EXPECT_EQ(published->at(published->size() - 2),
            "ens_cascade: new cascade (exit_threshold 0.9, stages [[small], [big]])");
  EXPECT_EQ(published->back(), "ens: new ensemble");
  StatusOr<std::map<std::string, training_test::ServedEnsemble>> repo =
      training_test::LoadServedEnsembles(dir.root(), /*server_yaml=*/false);
  ASSERT_TRUE(repo.ok()) << repo.status().ToString();
  ASSERT_TRUE(repo->count("ens_cascade"));
  EXPECT_EQ(repo->at("ens_cascade").exit_threshold, 0.9);
  EXPECT_EQ(repo->at("ens_cascade").members, (std::vector<std::string>{"small", "big"}));

  published = PublishTrained(dir.root(), config, modules, {CascadeVariant{"ens_cascade", {{"big"}, {"small"}}, 0.97}});
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  EXPECT_EQ(published->at(published->size() - 2),
            "ens_cascade: config.yaml kept; this run's sweep chose exit_threshold 0.97, stages [[big], [small]]");
  repo = training_test::LoadServedEnsembles(dir.root(), /*server_yaml=*/false);
  ASSERT_TRUE(repo.ok()) << repo.status().ToString();
  EXPECT_EQ(repo->at("ens_cascade").exit_threshold, 0.9);
  EXPECT_FALSE(fs::exists(dir.path() / (".publish-" + std::to_string(getpid()))));
}

// --publish --shadow: the run goes beside the serving ensemble under new
// names, and the serving ensemble's config names it as its shadow
// candidate; a second run replaces the section, the user's other lines stay.
TEST(PublishAsCandidateTest, TheRunIsPublishedBesideAndShadowed) {
  testing::TempDir dir;
  const TrainConfig config = TwoMembers();
  std::vector<torch::jit::Module> modules{BuildZooModel("mlp", 1).value(), BuildZooModel("mlp", 2).value()};
  const StatusOr<std::vector<std::string>> nothing = PublishAsCandidate(dir.root(), config, modules, 50);
  EXPECT_EQ(nothing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(nothing.status().message().find("no ensemble 'ens' serves"), std::string::npos)
      << nothing.status().message();
  ASSERT_TRUE(PublishTrained(dir.root(), config, modules).ok());
  {
    std::ofstream(dir.path() / "ens" / "config.yaml", std::ios::app) << "# the operator's note\n";
  }

  StatusOr<std::vector<std::string>> published = PublishAsCandidate(dir.root(), config, modules, 50);
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  EXPECT_EQ(*published, (std::vector<std::string>{"big_r2: version 1", "small_r2: version 1", "ens_r2: new ensemble",
                                                  "ens: experiment: shadow candidate ens_r2 at 50%"}));
  StatusOr<std::map<std::string, training_test::ServedEnsemble>> repo =
      training_test::LoadServedEnsembles(dir.root(), /*server_yaml=*/false);
  ASSERT_TRUE(repo.ok()) << repo.status().ToString();
  EXPECT_EQ(repo->at("ens").members, (std::vector<std::string>{"big", "small"})) << "the serving ensemble is kept";
  EXPECT_EQ(repo->at("ens_r2").members, (std::vector<std::string>{"big_r2", "small_r2"}));
  const ExperimentSpec& experiment = repo->at("ens").experiment;
  EXPECT_EQ(experiment.candidate, "ens_r2");
  EXPECT_EQ(experiment.mode, ExperimentSpec::Mode::kShadow);
  EXPECT_EQ(experiment.percent, 50);
  EXPECT_EQ(experiment.gate.min_compared, 1000);
  EXPECT_FALSE(repo->at("ens_r2").experiment.enabled());

  published = PublishAsCandidate(dir.root(), config, modules, 12.5);
  ASSERT_TRUE(published.ok()) << published.status().ToString();
  EXPECT_EQ(published->back(), "ens: experiment: shadow candidate ens_r3 at 12.5%");
  repo = training_test::LoadServedEnsembles(dir.root(), /*server_yaml=*/false);
  ASSERT_TRUE(repo.ok()) << repo.status().ToString();
  EXPECT_EQ(repo->at("ens").experiment.candidate, "ens_r3");
  EXPECT_EQ(repo->at("ens").experiment.percent, 12.5);
  std::ifstream in(dir.path() / "ens" / "config.yaml");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("# the operator's note"), std::string::npos) << text;
  EXPECT_EQ(text.find("experiment:"), text.rfind("experiment:")) << "one section:\n" << text;
}

TEST(PublishAsCandidateTest, TheExperimentSectionIsReplacedNotDuplicated) {
  const std::string before = "platform: ensemble\nexperiment:\n  candidate: old\n  percent: 5\nensemble:\n  members: [a]\n";
  EXPECT_EQ(WithExperimentSection(before, "experiment:\n  candidate: new\n"),
            "platform: ensemble\nensemble:\n  members: [a]\nexperiment:\n  candidate: new\n");
  EXPECT_EQ(WithExperimentSection("platform: ensemble\n", "experiment: {candidate: x}\n"),
            "platform: ensemble\nexperiment: {candidate: x}\n");
}

// A sweep from report.json's rows: threshold, accuracy, cost_fraction.
CascadeSweep SweepOf(const std::vector<std::array<double, 3>>& rows, size_t chosen) {
  CascadeSweep sweep;
  for (const auto& [threshold, accuracy, cost] : rows) {
    CascadeThresholdResult r;
    r.threshold = threshold;
    r.accuracy = accuracy;
    r.cost_fraction = cost;
    sweep.thresholds.push_back(r);
  }
  sweep.chosen = chosen;
  sweep.full_cost = 1;
  return sweep;
}

// The sweep of a real run (Fashion-MNIST, twelve CNNs), its chosen
// threshold 0.95; the best member had 92.79% at 0.088 of the cost.
CascadeSweep RealSweep() {
  return SweepOf({{0.5, 0.925, 0.049},
                  {0.55, 0.9263, 0.052},
                  {0.6, 0.9281, 0.057},
                  {0.65, 0.9301, 0.067},
                  {0.7, 0.9319, 0.080},
                  {0.75, 0.9328, 0.093},
                  {0.8, 0.9334, 0.109},
                  {0.85, 0.934, 0.1287},
                  {0.9, 0.9341, 0.155},
                  {0.95, 0.9347, 0.193},
                  {0.97, 0.9351, 0.220},
                  {0.99, 0.9355, 0.279},
                  {0.995, 0.9357, 0.316},
                  {1.0, 0.9356, 0.722}},
                 9);
}

// The thresholds CascadeLadderThresholds picks, as thresholds.
std::vector<double> LadderThresholds(const CascadeSweep& sweep, double member_accuracy, double member_cost) {
  std::vector<double> out;
  for (size_t i : CascadeLadderThresholds(sweep, member_accuracy, member_cost)) {
    out.push_back(sweep.thresholds[i].threshold);
  }
  return out;
}

// The thresholds a trained ladder serves its cascade at.
TEST(CascadeVariantTest, LadderThresholdsStepDownInCostWhileBeatingTheBestMember) {
  CascadeSweep sweep = RealSweep();
  auto thresholds = [&](double member_accuracy, double member_cost) {
    return LadderThresholds(sweep, member_accuracy, member_cost);
  };
  // 0.995 is the most accurate above the chosen costing under two thirds
  // of the full ensemble; 0.85 misses two thirds of 0.193 by a hair, 0.8 does not;
  // the next step, 0.65, would cost less than the best member.
  EXPECT_EQ(thresholds(0.9279, 0.088), (std::vector<double>{0.995, 0.95, 0.8}));
  // A best member more accurate than every cheaper threshold: none below.
  EXPECT_EQ(thresholds(0.9340, 0.088), (std::vector<double>{0.995, 0.95}));
  // A cheap best member: the steps go on, two below the chosen at most.
  EXPECT_EQ(thresholds(0.92, 0.01), (std::vector<double>{0.995, 0.95, 0.8, 0.65}));
  // 0.99: above it 0.995, a little dearer and more accurate; below, 0.97 and
  // 0.95 cost more than two thirds of 0.279.
  sweep.chosen = 11;
  EXPECT_EQ(thresholds(0.9279, 0.088), (std::vector<double>{0.995, 0.99, 0.9, 0.75}));
  // 1.0, the last: nothing above it.
  sweep.chosen = 13;
  EXPECT_EQ(thresholds(0.9279, 0.088).front(), 1.0);

  // Another run's sweep (chosen 0.9): above it 0.97 is the most accurate
  // and cheaper than 0.99, 0.995 and 1.0, which are no more accurate than
  // one another (the cheapest of equals would be 0.99); a bound of half
  // again the chosen's cost (0.269) had kept 0.97 out and let 0.99 in.
  CascadeSweep other = SweepOf({{0.5, 0.9259, 0.077},
                                {0.55, 0.9264, 0.081},
                                {0.6, 0.9285, 0.087},
                                {0.65, 0.9305, 0.096},
                                {0.7, 0.931, 0.106},
                                {0.75, 0.9318, 0.120},
                                {0.8, 0.9325, 0.137},
                                {0.85, 0.934, 0.155},
                                {0.9, 0.9349, 0.1795},
                                {0.95, 0.9354, 0.218},
                                {0.97, 0.9359, 0.248},
                                {0.99, 0.9356, 0.303},
                                {0.995, 0.9356, 0.339},
                                {1.0, 0.9356, 0.740}},
                               8);
  EXPECT_EQ(LadderThresholds(other, 0.9279, 0.0795), (std::vector<double>{0.97, 0.9, 0.7}));
  other.thresholds[10].accuracy = 0.9356;  // 0.97 ties 0.99: still the cheapest of equals
  EXPECT_EQ(LadderThresholds(other, 0.9279, 0.0795).front(), 0.97);
  for (CascadeThresholdResult& r : other.thresholds) {
    if (r.threshold > 0.9) r.accuracy = 0.9349;  // none above more accurate than the chosen: no rung above it
  }
  EXPECT_EQ(LadderThresholds(other, 0.9279, 0.0795).front(), 0.9);
}

// The ladder ensemble-train writes: the ensemble, its cascade variant, the
// most accurate member, each with its test accuracy; the server loads it
// with every cross-check (each rung exists and matches the ensemble).
TEST(CascadeVariantTest, TheWrittenOverloadLadderLoadsAsTheServerLoadsIt) {
  HandMade h;
  TrainConfig config = TwoMembers();
  config.ensemble.latency_target_ms = 40;
  Evaluation evaluation{{h.expensive, h.cheap}, CombineMembers({h.expensive, h.cheap}, "mean"), {3e-6, 1e-6}};
  const TrainReport report = ScoreEvaluation(config, evaluation, h.labels);
  const std::optional<CascadeVariant> variant = ChosenCascade(report);
  ASSERT_TRUE(variant);
  const std::string ladder = OverloadLadderYaml(config, report, variant);
  testing::TempDir dir;
  std::vector<torch::jit::Module> modules{BuildZooModel("mlp", 1).value(), BuildZooModel("mlp", 2).value()};
  ASSERT_TRUE(WriteTrainedRepository(dir.root(), config, modules, {"cpu:0"}, {variant, std::nullopt, ladder}).ok());

  StatusOr<std::map<std::string, training_test::ServedEnsemble>> served =
      training_test::LoadServedEnsembles(dir.Path("server.yaml"), /*server_yaml=*/true);
  ASSERT_TRUE(served.ok()) << served.status().ToString() << "\n" << ladder;
  const OverloadSpec& overload = served->at("ens").overload;
  EXPECT_EQ(overload.latency_target_ms, 40);
  ASSERT_EQ(overload.ladder.size(), 3u) << ladder;
  EXPECT_EQ(overload.ladder[0].model, "ens");
  EXPECT_NEAR(overload.ladder[0].accuracy, report.ensemble.scores.accuracy, 1e-4);
  EXPECT_EQ(overload.ladder[1].model, "ens_cascade");
  EXPECT_NEAR(overload.ladder[1].accuracy, report.cascade->thresholds[report.cascade->chosen].accuracy, 1e-4);
  const ScoredModel& best =
      report.members[0].scores.accuracy >= report.members[1].scores.accuracy ? report.members[0] : report.members[1];
  EXPECT_EQ(overload.ladder[2].model, best.name);
  EXPECT_FALSE(served->at("ens_cascade").overload.enabled()) << "rungs have no ladder of their own";

  // A sweep with thresholds worth serving beside the chosen one: rungs of
  // the same cascade at their own exit_threshold, which the server loads
  // (the members tie: the first is the best).
  TrainReport wide = report;
  const std::vector<double> member_costs = {0.088, 0.088};
  wide.cascade = RealSweep();
  wide.cascade->costs = member_costs;
  for (ScoredModel& m : wide.members) m.scores.accuracy = 0.9279;
  const std::string wide_ladder = OverloadLadderYaml(config, wide, variant);
  testing::TempDir wide_dir;
  ASSERT_TRUE(
      WriteTrainedRepository(wide_dir.root(), config, modules, {"cpu:0"}, {variant, std::nullopt, wide_ladder}).ok());
  served = training_test::LoadServedEnsembles(wide_dir.Path("server.yaml"), /*server_yaml=*/true);
  ASSERT_TRUE(served.ok()) << served.status().ToString() << "\n" << wide_ladder;
  std::vector<std::string> labels;
  for (const OverloadRung& r : served->at("ens").overload.ladder) labels.push_back(r.label());
  EXPECT_EQ(labels, (std::vector<std::string>{"ens", "ens_cascade@0.995", "ens_cascade", "ens_cascade@0.8", "big"}))
      << wide_ladder;
  EXPECT_NEAR(served->at("ens").overload.ladder[3].accuracy, 0.9334, 1e-9);

  // Without a sweep: the ensemble, then the best member. Target 0: no ladder.
  EXPECT_EQ(OverloadLadderYaml(config, report, std::nullopt).find("ens_cascade"), std::string::npos);
  config.ensemble.latency_target_ms = 0;
  EXPECT_EQ(OverloadLadderYaml(config, report, variant), "");
}

}  // namespace
}  // namespace es
