// Packed training (ensemble.pack_training): members of one zoo architecture
// trained as one packed module follow the trajectory the same members
// follow trained one by one (losses, accuracy counts, weights), the other
// members train as they are, checkpoints resume a packed run exactly, and a
// checkpoint of the other kind is a clear error.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tests/common/temp_dir.h"
#include "tests/training/training_test_util.h"
#include "training/checkpoint.h"
#include "training/ensemble_trainer.h"
#include "training/train_config.h"

namespace es::training_test {
namespace {

constexpr int kSteps = 5;

// Three cnn members (packed when asked) and one mlp (alone either way),
// the mlp between them so that packing must keep the config's order.
TrainConfig MixedConfig(const std::string& optimizer, bool pack_training) {
  TrainConfig config = SmallConfig(optimizer, 25.0);
  config.members = {{"c1", "cnn", "", 1}, {"m", "mlp", "", 2}, {"c2", "cnn", "", 3}, {"c3", "cnn", "", 4}};
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

TrainedRun Train(const TrainConfig& config) {
  TrainedRun run;
  RunRanks(1, config, kSteps, [&](std::vector<Rank>& ranks, int) {
    Rank& me = ranks[0];
    run.initial = FlatParameters(*me.trainer);
    run.packed_groups = me.trainer->PackedGroups();
    me.loader->StartEpoch(0);
    for (int i = 0; i < kSteps; ++i) {
      std::optional<Batch> batch = NextBatch(*me.loader);
      ASSERT_TRUE(batch.has_value());
      StatusOr<StepStats> stats = me.trainer->Step(batch->images, batch->labels);
      ASSERT_TRUE(stats.ok()) << stats.status().ToString();
      run.steps.push_back(*stats);
    }
    run.parameters = FlatParameters(*me.trainer);
    for (const auto& [key, tensor] : me.trainer->Snapshot()) run.snapshot_keys.push_back(key);
  });
  return run;
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
    ASSERT_EQ(separate.steps.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(packed.steps.size(), static_cast<size_t>(kSteps));
    // It did pack: the cnn members' parameters are the packed module's, the mlp's its own.
    EXPECT_TRUE(HasKey(packed, "param/packed_cnn/conv1_w")) << optimizer;
    EXPECT_TRUE(HasKey(packed, "param/m/fc1_w")) << optimizer;
    EXPECT_FALSE(HasKey(packed, "param/c1/conv1_w")) << optimizer;
    EXPECT_TRUE(HasKey(separate, "param/c1/conv1_w")) << optimizer;
    EXPECT_EQ(packed.packed_groups, std::vector<std::string>{"cnn (3 members)"});
    EXPECT_TRUE(separate.packed_groups.empty());
    for (int i = 0; i < kSteps; ++i) {
      ASSERT_EQ(packed.steps[i].members.size(), 4u);
      for (size_t m = 0; m < 4; ++m) {
        // Per member, in the config's order: its own loss and count.
        EXPECT_NEAR(packed.steps[i].members[m].loss, separate.steps[i].members[m].loss, 1e-4)
            << optimizer << " step " << i << " member " << m;
        EXPECT_EQ(packed.steps[i].members[m].correct, separate.steps[i].members[m].correct)
            << optimizer << " step " << i << " member " << m;
      }
    }
    // The members' weights after the steps, copied back from the packed module.
    ASSERT_TRUE(packed.parameters.sizes().equals(separate.parameters.sizes()));
    EXPECT_GT((separate.parameters - separate.initial).abs().max().item<double>(), 1e-3) << optimizer;
    EXPECT_EQ((packed.initial - separate.initial).abs().max().item<double>(), 0.0) << optimizer;
    EXPECT_LT((packed.parameters - separate.parameters).abs().max().item<double>(), 1e-4) << optimizer;
  }
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

  // The same checkpoint into a run that trains the members one by one.
  RunRanks(1, MixedConfig("adam", false), kSteps, [&](std::vector<Rank>& ranks, int) {
    const Status status = ranks[0].trainer->Restore(tensors, saved->step);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("pack_training"), std::string::npos) << status.message();
  });
}

}  // namespace
}  // namespace es::training_test
