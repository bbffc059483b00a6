// Data-parallel training over real Gloo: ranks as threads of this process
// (training_test_util.h), so every rank's parameters can be compared
// directly after every step.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "training/gradient_reducer.h"
#include "tests/training/training_test_util.h"

namespace es::training_test {
namespace {

constexpr int kSteps = 12;

// Trains `world` ranks for `steps` steps; returns rank 0's final parameters.
at::Tensor Train(int world, const TrainConfig& config, int steps) {
  at::Tensor result;
  RunRanks(world, config, steps, [&](std::vector<Rank>& ranks, int r) {
    Rank& me = ranks[r];
    me.loader->StartEpoch(0);
    for (int step = 0; step < steps; ++step) {
      std::optional<Batch> batch = NextBatch(*me.loader);
      ASSERT_TRUE(batch.has_value());
      ASSERT_TRUE(me.trainer->Step(batch->images, batch->labels).ok());
    }
    if (r == 0) result = FlatParameters(*me.trainer);
  });
  return result;
}

class DistributedTest : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

TEST_F(DistributedTest, TwoRanksKeepIdenticalParametersAfterEveryStep) {
  // Tiny buckets: several all-reduces per step, launched from the hooks.
  const TrainConfig config = SmallConfig("adam", /*bucket_mb=*/0.02);
  RankBarrier sync(2);
  int buckets = 0;
  RunRanks(2, config, kSteps, [&](std::vector<Rank>& ranks, int r) {
    Rank& me = ranks[r];
    if (r == 0) buckets = me.trainer->reducer().num_buckets();
    me.loader->StartEpoch(0);
    for (int step = 0; step < kSteps; ++step) {
      // EXPECT, not ASSERT: a rank leaving early would strand the other at
      // the barrier instead of failing the test.
      std::optional<Batch> batch = NextBatch(*me.loader);
      EXPECT_TRUE(batch.has_value());
      if (batch) {
        StatusOr<StepStats> stats = me.trainer->Step(batch->images, batch->labels);
        EXPECT_TRUE(stats.ok()) << stats.status().ToString();
      }
      StatusOr<double> divergence = me.trainer->reducer().ParameterDivergence();
      EXPECT_TRUE(divergence.ok()) << divergence.status().ToString();
      if (divergence.ok()) {
        EXPECT_LE(*divergence, 1e-6) << "step " << step;
      }
      sync.ArriveAndWait();  // both stepped: compare
      if (r == 0) {
        const double diff =
            (FlatParameters(*ranks[0].trainer) - FlatParameters(*ranks[1].trainer)).abs().max().item<double>();
        EXPECT_LE(diff, 1e-6) << "step " << step;
      }
      sync.ArriveAndWait();  // compared: step again
    }
  });
  EXPECT_GT(buckets, 2) << "the test meant to exercise several buckets";
}

TEST_F(DistributedTest, TwoRanksFollowOneRankWithTheSameGlobalBatch) {
  for (const char* optimizer : {"sgd", "adam"}) {
    const TrainConfig config = SmallConfig(optimizer, 25.0);
    const at::Tensor one = Train(1, config, kSteps);
    const at::Tensor two = Train(2, config, kSteps);
    ASSERT_TRUE(one.defined() && two.defined());
    const double moved = (one - Train(1, config, 1)).abs().max().item<double>();
    const double diff = (one - two).abs().max().item<double>();
    EXPECT_GT(moved, 1e-3) << optimizer << ": training should move the parameters";
    EXPECT_LE(diff, 1e-4) << optimizer;
    std::cout << optimizer << ": max |1 rank - 2 ranks| after " << kSteps << " steps = " << diff
              << " (parameters moved up to " << moved << " since step 1)\n";
  }
}

TEST_F(DistributedTest, DivergenceCheckSeesADifferentRank) {
  const TrainConfig config = SmallConfig("sgd", 25.0);
  RunRanks(2, config, 1, [&](std::vector<Rank>& ranks, int r) {
    if (r == 1) {
      torch::NoGradGuard no_grad;
      ranks[r].trainer->modules()[0].parameters().begin().operator*().add_(0.5);
    }
    StatusOr<double> divergence = ranks[r].trainer->reducer().ParameterDivergence();
    ASSERT_TRUE(divergence.ok());
    EXPECT_NEAR(*divergence, 0.5, 1e-6);
  });
}

TEST_F(DistributedTest, BroadcastGivesEveryRankRankZerosWeights) {
  const TrainConfig config = SmallConfig("sgd", 25.0);
  RankBarrier sync(2);
  RunRanks(2, config, 1, [&](std::vector<Rank>& ranks, int r) {
    if (r == 1) {  // as if rank 1 had loaded other weights
      torch::NoGradGuard no_grad;
      for (at::Tensor p : ranks[r].trainer->modules()[1].parameters()) p.mul_(3.0);
    }
    const at::Tensor before = FlatParameters(*ranks[r].trainer);
    ASSERT_TRUE(ranks[r].trainer->SyncInitialParameters().ok());
    sync.ArriveAndWait();
    if (r == 0) {
      const at::Tensor zero = FlatParameters(*ranks[0].trainer);
      EXPECT_TRUE(zero.equal(before)) << "rank 0 keeps its weights";
      EXPECT_TRUE(zero.equal(FlatParameters(*ranks[1].trainer))) << "rank 1 takes rank 0's";
    }
  });
}

}  // namespace
}  // namespace es::training_test
