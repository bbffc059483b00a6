#include "server/experiment/experiment_stats.h"

#include <gtest/gtest.h>

#include <cmath>

namespace es {
namespace {

TEST(CompareAnswersTest, AgreementDifferenceKlAndEntropyPerRow) {
  // Row 0: same top class (0); row 1: different (1 vs 0).
  const std::vector<float> p = {0.5f, 0.5f, 0.0f, 0.2f, 0.7f, 0.1f};
  const std::vector<float> q = {0.6f, 0.3f, 0.1f, 0.6f, 0.3f, 0.1f};
  std::optional<AnswerComparison> c = CompareAnswers(p, q, 3);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->rows, 2);
  EXPECT_EQ(c->agreeing_rows, 1);
  // mean |p - q| per row: (0.1 + 0.2 + 0.1) / 3 and (0.4 + 0.4 + 0) / 3.
  EXPECT_NEAR(c->abs_diff_sum, 0.4 / 3 + 0.8 / 3, 1e-6);
  const double kl0 = 0.5 * std::log(0.5 / 0.6) + 0.5 * std::log(0.5 / 0.3);  // the 0 term contributes ~0
  const double kl1 = 0.2 * std::log(0.2 / 0.6) + 0.7 * std::log(0.7 / 0.3) + 0.1 * std::log(0.1 / 0.1);
  EXPECT_NEAR(c->kl_sum, kl0 + kl1, 1e-5);
  const double h_p0 = -2 * 0.5 * std::log(0.5);
  EXPECT_NEAR(c->entropy_serving_sum, h_p0 + -(0.2 * std::log(0.2) + 0.7 * std::log(0.7) + 0.1 * std::log(0.1)),
              1e-5);
  // Identical answers: full agreement, no difference, no divergence.
  c = CompareAnswers(p, p, 3);
  EXPECT_EQ(c->agreeing_rows, 2);
  EXPECT_EQ(c->abs_diff_sum, 0);
  EXPECT_NEAR(c->kl_sum, 0, 1e-9);
  // Shapes that do not match are no comparison.
  EXPECT_FALSE(CompareAnswers(p, {0.1f}, 3).has_value());
  EXPECT_FALSE(CompareAnswers({0.1f, 0.2f}, {0.1f, 0.2f}, 3).has_value());
  EXPECT_FALSE(CompareAnswers(p, q, 0).has_value());
}

TEST(ExperimentStatsTest, TheWindowForgetsWhatTheTotalKeeps) {
  ExperimentStats stats(10);
  AnswerComparison disagree{1, 0, 0.5, 1.0, 0.1, 0.2};
  AnswerComparison agree{1, 1, 0.0, 0.0, 0.1, 0.1};
  for (int i = 0; i < 10; ++i) stats.Add(SideRun{true, 1'000'000}, SideRun{false, 4'000'000}, std::nullopt);
  for (int i = 0; i < 10; ++i) stats.Add(SideRun{true, 1'000'000}, SideRun{true, 2'000'000}, disagree);
  for (int i = 0; i < 10; ++i) stats.Add(SideRun{true, 1'000'000}, SideRun{true, 2'000'000}, agree);
  const ExperimentStats::Figures window = stats.Window();
  EXPECT_EQ(window.compared_requests, 10);
  EXPECT_DOUBLE_EQ(window.agreement, 1.0);
  EXPECT_EQ(window.candidate.errors, 0);
  EXPECT_EQ(window.candidate.requests, 10);
  const ExperimentStats::Figures total = stats.Total();
  EXPECT_EQ(total.compared_requests, 20);
  EXPECT_DOUBLE_EQ(total.agreement, 0.5);
  EXPECT_DOUBLE_EQ(total.mean_abs_diff, 0.25);
  EXPECT_DOUBLE_EQ(total.mean_kl, 0.5);
  EXPECT_EQ(total.candidate.errors, 10);
  EXPECT_NEAR(total.candidate.error_rate, 1.0 / 3, 1e-12);
  // Latency quantiles within the histogram's 3%: serving always 1 ms; the
  // candidate 2 ms for 20 requests and 4 ms for 10.
  EXPECT_NEAR(total.serving.p50_ms, 1.0, 0.03);
  EXPECT_NEAR(total.candidate.p50_ms, 2.0, 0.06);
  EXPECT_NEAR(total.candidate.p99_ms, 4.0, 0.12);
  EXPECT_NEAR(window.candidate.p99_ms, 2.0, 0.06);
  // A canary's request: one side only.
  stats.Add(std::nullopt, SideRun{true, 1}, std::nullopt);
  EXPECT_EQ(stats.Total().serving.requests, 30);
  EXPECT_EQ(stats.Total().candidate.requests, 31);
}

ExperimentStats::Figures Figures(int64_t compared, double agreement, double serving_errors, double candidate_errors,
                                 int64_t candidate_requests, double serving_p99, double candidate_p99) {
  ExperimentStats::Figures f;
  f.compared_requests = compared;
  f.agreement = agreement;
  f.serving.requests = 100;
  f.serving.error_rate = serving_errors;
  f.serving.p99_ms = serving_p99;
  f.candidate.requests = candidate_requests;
  f.candidate.error_rate = candidate_errors;
  f.candidate.errors = static_cast<int64_t>(candidate_errors * static_cast<double>(candidate_requests));
  f.candidate.p99_ms = candidate_p99;
  return f;
}

TEST(JudgeExperimentTest, PromotesOnlyOnEnoughGoodEvidenceAndAbortsOnErrors) {
  ExperimentGate gate;
  gate.min_compared = 100;
  gate.min_agreement = 0.95;
  gate.max_error_increase = 0.01;
  gate.max_latency_ratio = 1.5;
  gate.abort_error_rate = 0.2;
  using D = ExperimentVerdict::Decision;
  EXPECT_EQ(JudgeExperiment(gate, Figures(100, 0.96, 0.0, 0.0, 100, 10, 14), true).decision, D::kPromote);
  EXPECT_EQ(JudgeExperiment(gate, Figures(99, 0.96, 0.0, 0.0, 99, 10, 14), true).decision, D::kNone);
  EXPECT_EQ(JudgeExperiment(gate, Figures(100, 0.94, 0.0, 0.0, 100, 10, 14), true).decision, D::kNone);
  EXPECT_EQ(JudgeExperiment(gate, Figures(100, 0.96, 0.0, 0.02, 100, 10, 14), true).decision, D::kNone);
  EXPECT_EQ(JudgeExperiment(gate, Figures(100, 0.96, 0.0, 0.0, 100, 10, 16), true).decision, D::kNone);
  // A canary compares nothing: its candidate's requests are the evidence.
  EXPECT_EQ(JudgeExperiment(gate, Figures(0, 0.0, 0.0, 0.0, 100, 10, 14), false).decision, D::kPromote);
  EXPECT_EQ(JudgeExperiment(gate, Figures(0, 0.0, 0.0, 0.0, 100, 10, 14), true).decision, D::kNone);
  // Abort: over the bound with 10 candidate requests or more, whatever the rest.
  const ExperimentVerdict abort = JudgeExperiment(gate, Figures(0, 0.0, 0.0, 0.3, 10, 10, 10), true);
  EXPECT_EQ(abort.decision, D::kAbort);
  EXPECT_NE(abort.why.find("0.3000"), std::string::npos) << abort.why;
  EXPECT_EQ(JudgeExperiment(gate, Figures(0, 0.0, 0.0, 0.3, 9, 10, 10), true).decision, D::kNone);
  // No automatic promotion without min_compared.
  gate.min_compared = 0;
  EXPECT_EQ(JudgeExperiment(gate, Figures(1000, 1.0, 0.0, 0.0, 1000, 10, 10), true).decision, D::kNone);
}

}  // namespace
}  // namespace es
