// ModelStatistics: Triton's meanings for the counters, and sums that saturate
// at UINT64_MAX instead of wrapping (a host's compute_ns is whatever the host
// wrote; a wrapped total would read as a tiny one).
#include <gtest/gtest.h>

#include <limits>

#include "server/core/model_statistics.h"
#include "server/kserve/statistics_reply.h"

namespace es {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

class ModelStatisticsTest : public ::testing::Test {
 protected:
  ModelStatisticsTest() : stats_(Models()) {}

  static std::map<std::string, ModelConfig> Models() {
    ModelConfig m;
    m.name = "mlp";
    m.platform = "torchscript";
    m.max_batch_size = 4;
    m.versions = {2};
    return {{"mlp", m}};
  }

  const inference::ModelStatistics& Get() {
    response_.Clear();
    EXPECT_TRUE(FillModelStatistics(stats_, "mlp", "", &response_));
    return response_.model_stats(0);
  }

  ModelStatistics stats_;
  inference::ModelStatisticsResponse response_;
};

TEST_F(ModelStatisticsTest, CountsRequestsAndExecutions) {
  StageTimes stages;
  stages.queue_ns = 5;
  stats_.Record("mlp", 2, true, 100, stages, 3);
  stats_.Record("mlp", 2, false, 40, stages, 1);
  stats_.RecordExecution("mlp", 2, 3, 70);
  const auto& s = Get();
  EXPECT_EQ(s.version(), "2");
  EXPECT_EQ(s.inference_stats().success().count(), 1u);
  EXPECT_EQ(s.inference_stats().success().ns(), 100u);
  EXPECT_EQ(s.inference_stats().fail().count(), 1u);
  EXPECT_EQ(s.inference_stats().fail().ns(), 40u);
  EXPECT_EQ(s.inference_stats().queue().ns(), 5u);
  EXPECT_EQ(s.inference_count(), 3u);
  EXPECT_EQ(s.execution_count(), 1u);
  EXPECT_EQ(s.inference_stats().compute_infer().ns(), 70u);
  ASSERT_EQ(s.batch_stats_size(), 1);
  EXPECT_EQ(s.batch_stats(0).batch_size(), 3u);
  EXPECT_EQ(s.batch_stats(0).compute_infer().ns(), 70u);
  EXPECT_FALSE(FillModelStatistics(stats_, "nope", "", &response_));
  EXPECT_FALSE(FillModelStatistics(stats_, "mlp", "7", &response_));
}

// Each version has its own figures; a version first used while serving
// (a rollout) gets them then; asking for one version gives just it.
TEST_F(ModelStatisticsTest, FiguresArePerVersion) {
  stats_.Record("mlp", 2, true, 10, {}, 1);
  stats_.Record("mlp", 3, true, 20, {}, 1);
  stats_.Record("mlp", 3, true, 30, {}, 2);
  stats_.Record("mlp", 0, true, 30, {}, 2);  // no version: not counted
  response_.Clear();
  ASSERT_TRUE(FillModelStatistics(stats_, "mlp", "", &response_));
  ASSERT_EQ(response_.model_stats_size(), 2);
  EXPECT_EQ(response_.model_stats(0).version(), "2");
  EXPECT_EQ(response_.model_stats(0).inference_stats().success().count(), 1u);
  EXPECT_EQ(response_.model_stats(1).version(), "3");
  EXPECT_EQ(response_.model_stats(1).inference_stats().success().count(), 2u);
  EXPECT_EQ(response_.model_stats(1).inference_count(), 3u);
  response_.Clear();
  ASSERT_TRUE(FillModelStatistics(stats_, "mlp", "3", &response_));
  ASSERT_EQ(response_.model_stats_size(), 1);
  EXPECT_EQ(response_.model_stats(0).inference_stats().success().ns(), 50u);
}

TEST_F(ModelStatisticsTest, SumsSaturateInsteadOfWrapping) {
  // A lying host reports a compute time near 2^64 twice: unchecked, the sum
  // wraps to a small number.
  stats_.RecordExecution("mlp", 2, 2, kMax - 10);
  stats_.RecordExecution("mlp", 2, 2, 100);
  StageTimes stages;
  stages.queue_ns = kMax;
  stats_.Record("mlp", 2, true, kMax - 1, stages, kMax);
  stats_.Record("mlp", 2, true, 5, stages, 7);
  stats_.Record("mlp", 2, false, kMax, stages, 1);
  stats_.Record("mlp", 2, false, kMax, stages, 1);
  const auto& s = Get();
  EXPECT_EQ(s.inference_stats().compute_infer().ns(), kMax);
  EXPECT_EQ(s.batch_stats(0).compute_infer().ns(), kMax);
  EXPECT_EQ(s.inference_stats().success().ns(), kMax);
  EXPECT_EQ(s.inference_stats().queue().ns(), kMax);
  EXPECT_EQ(s.inference_count(), kMax);
  EXPECT_EQ(s.inference_stats().fail().ns(), kMax);
  // Counts are exact.
  EXPECT_EQ(s.execution_count(), 2u);
  EXPECT_EQ(s.inference_stats().success().count(), 2u);
  EXPECT_EQ(s.inference_stats().fail().count(), 2u);
}

}  // namespace
}  // namespace es
