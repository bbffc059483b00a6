// Packed training (ensemble.pack_training): members of one zoo architecture
// trained as one packed module follow the trajectory the same members
// follow trained one by one (losses, accuracy counts, weights), the other
// members train as they are, on one rank and on two, checkpoints resume a
// packed run exactly, and a checkpoint of the other kind, or of members in
// another order, is a clear error.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/common/temp_dir.h"
#include "tests/training/training_test_util.h"
#include "training/checkpoint.h"
#include "training/ensemble_trainer.h"
#include "training/train_config.h"

namespace es::training_test {
namespace {

constexpr int kSteps = 5;

// Three cnn members and two mlp (each kind packed when asked) and one
// wide_mlp (alone either way), interleaved so that packing must keep the
// config's order.
TrainConfig MixedConfig(const std::string& optimizer, bool pack_training) {
  TrainConfig config = SmallConfig(optimizer, 25.0);
  config.members = {{"c1", "cnn", "", 1},     {"m1", "mlp", "", 2}, {"c2", "cnn", "", 3},
                    {"w", "wide_mlp", "", 4}, {"m2", "mlp", "", 5}, {"c3", "cnn", "", 6}};
  config.ensemble.pack_training = pack_training;
  return config;
}

struct TrainedRun {
  std::vector<StepStats> steps;
  at::Tensor initial;     // every member's weights before the steps, config order
  at::Tensor parameters;  // and after them
  std::vector<std::string> snapshot_keys;
  std::vector<std::string> packed_groups;
};

// `world` ranks train kSteps steps; what rank 0 saw.
TrainedRun Train(const TrainConfig& config, int world = 1) {
  TrainedRun run;
  RunRanks(world, config, kSteps, [&](std::vector<Rank>& ranks, int rank) {
    Rank& me = ranks[rank];
    TrainedRun mine;
    mine.initial = FlatParameters(*me.trainer);
    mine.packed_groups = me.trainer->PackedGroups();
    me.loader->StartEpoch(0);
    for (int i = 0; i < kSteps; ++i) {
      std::optional<Batch> batch = NextBatch(*me.loader);
      ASSERT_TRUE(batch.has_value());
      StatusOr<StepStats> stats = me.trainer->Step(batch->images, batch->labels);
      ASSERT_TRUE(stats.ok()) << stats.status().ToString();
      mine.steps.push_back(*stats);
    }
    mine.parameters = FlatParameters(*me.trainer);
    for (const auto& [key, tensor] : me.trainer->Snapshot()) mine.snapshot_keys.push_back(key);
    if (rank == 0) run = std::move(mine);
  });
  return run;
}

// Per member, in the config's order: the same loss and count at every step,
// and the same weights after the steps (copied back from the packed modules).
void ExpectSameTrajectory(const TrainedRun& packed, const TrainedRun& separate, const std::string& what) {
  ASSERT_EQ(separate.steps.size(), static_cast<size_t>(kSteps)) << what;
  ASSERT_EQ(packed.steps.size(), static_cast<size_t>(kSteps)) << what;
  for (int i = 0; i < kSteps; ++i) {
    ASSERT_EQ(packed.steps[i].members.size(), separate.steps[i].members.size()) << what;
    for (size_t m = 0; m < packed.steps[i].members.size(); ++m) {
      EXPECT_NEAR(packed.steps[i].members[m].loss, separate.steps[i].members[m].loss, 1e-4)
          << what << " step " << i << " member " << m;
      EXPECT_EQ(packed.steps[i].members[m].correct, separate.steps[i].members[m].correct)
          << what << " step " << i << " member " << m;
    }
  }
  EXPECT_EQ((packed.initial - separate.initial).abs().max().item<double>(), 0.0) << what;
  EXPECT_GT((separate.parameters - separate.initial).abs().max().item<double>(), 1e-3) << what;
  ASSERT_TRUE(packed.parameters.sizes().equals(separate.parameters.sizes())) << what;
  EXPECT_LT((packed.parameters - separate.parameters).abs().max().item<double>(), 1e-4) << what;
}

bool HasKey(const TrainedRun& run, const std::string& key) {
  for (const std::string& k : run.snapshot_keys) {
    if (k == key) return true;
  }
  return false;
}

TEST(PackedTrainingTest, FollowsTheUnpackedTrajectory) {
  torch::set_num_threads(1);
  for (const char* optimizer : {"adam", "sgd"}) {
    const TrainedRun separate = Train(MixedConfig(optimizer, false));
    const TrainedRun packed = Train(MixedConfig(optimizer, true));
    // It did pack: one module per architecture with two or more members,
    // its parameters saved under the packed members' names; the wide_mlp alone.
    EXPECT_EQ(packed.packed_groups, (std::vector<std::string>{"cnn (3 members)", "mlp (2 members)"}));
    EXPECT_TRUE(separate.packed_groups.empty());
    EXPECT_TRUE(HasKey(packed, "param/packed:c1+c2+c3/conv1_w")) << optimizer;
    EXPECT_TRUE(HasKey(packed, "param/packed:m1+m2/fc1_w")) << optimizer;
    EXPECT_TRUE(HasKey(packed, "param/w/fc1_w")) << optimizer;
    EXPECT_FALSE(HasKey(packed, "param/c1/conv1_w")) << optimizer;
    EXPECT_TRUE(HasKey(separate, "param/c1/conv1_w")) << optimizer;
    ExpectSameTrajectory(packed, separate, optimizer);
  }
}

// Two ranks: the packed parameters' gradients all-reduced as the members'
// are (each rank's losses are its own rows').
TEST(PackedTrainingTest, FollowsTheUnpackedTrajectoryOnTwoRanks) {
  torch::set_num_threads(1);
  ExpectSameTrajectory(Train(MixedConfig("adam", true), 2), Train(MixedConfig("adam", false), 2), "two ranks");
}

TEST(PackedTrainingTest, CheckpointsResumeAPackedRunExactlyAndRefuseTheOtherKind) {
  torch::set_num_threads(1);
  testing::TempDir dir;
  const std::string path = dir.Path("latest.pt");
  constexpr int kStop = 2;
  const TrainConfig config = MixedConfig("adam", true);
  at::Tensor continued;
  RunRanks(1, config, kSteps,
           [&](std::vector<Rank>& ranks, int) { continued = TrainWithCheckpointAt(ranks[0], kSteps, kStop, path); });
  StatusOr<CheckpointData> saved = ReadCheckpoint(path);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  const std::map<std::string, at::Tensor> tensors(saved->tensors.begin(), saved->tensors.end());

  at::Tensor resumed;
  RunRanks(1, config, kSteps, [&](std::vector<Rank>& ranks, int) {
    Rank& me = ranks[0];
    ASSERT_TRUE(me.trainer->Restore(tensors, saved->step).ok());
    me.loader->StartEpoch(0, kStop);
    while (std::optional<Batch> batch = NextBatch(*me.loader)) {
      if (me.trainer->step() == kSteps) break;
      ASSERT_TRUE(me.trainer->Step(batch->images, batch->labels).ok());
    }
    resumed = FlatParameters(*me.trainer);
  });
  ASSERT_TRUE(continued.defined() && resumed.defined());
  EXPECT_EQ((continued - resumed).abs().max().item<double>(), 0.0);

  // The same checkpoint into a packed run whose cnn members come in another
  // order: refused (member 1's weights would have gone to member 2).
  TrainConfig reordered = MixedConfig("adam", true);
  std::swap(reordered.members[0], reordered.members[2]);
  RunRanks(1, reordered, kSteps, [&](std::vector<Rank>& ranks, int) {
    const Status status = ranks[0].trainer->Restore(tensors, saved->step);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("packed:c2+c1+c3"), std::string::npos) << status.message();
  });

  // The same checkpoint into a run that trains the members one by one.
  RunRanks(1, MixedConfig("adam", false), kSteps, [&](std::vector<Rank>& ranks, int) {
    const Status status = ranks[0].trainer->Restore(tensors, saved->step);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("pack_training"), std::string::npos) << status.message();
  });
}

}  // namespace
}  // namespace es::training_test
