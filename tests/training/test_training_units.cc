// Units of the trainer: its config file, the learning-rate schedule, the
// ensemble combination, and checkpoints (write, read, resume).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "tests/common/temp_dir.h"
#include "tests/common/test_paths.h"
#include "tests/training/training_test_util.h"
#include "torch_utils/model_zoo.h"
#include "torch_utils/served_config.h"
#include "training/checkpoint.h"
#include "training/ensemble_trainer.h"
#include "training/train_config.h"
#include "training/train_options.h"

namespace es::training_test {
namespace {

// ---- config ----------------------------------------------------------------

StatusOr<TrainConfig> LoadText(const testing::TempDir& dir, const std::string& yaml) {
  return LoadTrainConfig(dir.Write("train.yaml", yaml));
}

constexpr const char* kMinimal =
    "members:\n"
    "  - {name: a, architecture: convnet, seed: 1}\n";

TEST(TrainConfigTest, MinimalConfigGetsDefaults) {
  testing::TempDir dir;
  StatusOr<TrainConfig> config = LoadText(dir, kMinimal);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->data.dataset, "fashion-mnist");
  EXPECT_EQ(config->optim.batch_size, 64);
  EXPECT_EQ(config->distributed.bucket_mb, 25.0);
  ASSERT_EQ(config->members.size(), 1u);
  EXPECT_EQ(config->members[0].architecture, "convnet");
  EXPECT_EQ(config->members[0].seed, 1u);
  EXPECT_TRUE(config->ensemble.pack);
  EXPECT_FALSE(config->ensemble.pack_training);
  EXPECT_EQ(config->ensemble.cascade_stages, "two");
}

TEST(TrainConfigTest, CascadeStagesMayBePerMember) {
  testing::TempDir dir;
  StatusOr<TrainConfig> config =
      LoadText(dir, std::string(kMinimal) + "ensemble: {name: e, cascade_stages: per_member}\n");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->ensemble.cascade_stages, "per_member");
}

TEST(TrainConfigTest, PackCanBeTurnedOffAndTrainingPacked) {
  testing::TempDir dir;
  StatusOr<TrainConfig> config = LoadText(dir, std::string(kMinimal) + "ensemble: {name: e, pack: false}\n");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_FALSE(config->ensemble.pack);
  StatusOr<TrainConfig> packed =
      LoadText(dir, std::string(kMinimal) + "ensemble: {name: e, pack_training: true}\n");
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_TRUE(packed->ensemble.pack_training);
}

TEST(TrainConfigTest, TheExampleConfigsLoad) {
  StatusOr<TrainConfig> config =
      LoadTrainConfig(std::string(es::test_paths::kSourceDir) + "/config/train-fashion-mnist.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  // The training benchmark's: twelve convnets.
  ASSERT_EQ(config->members.size(), 12u);
  EXPECT_EQ(config->members[11].architecture, "convnet");
  // The cascade benchmark's: members of different depths, cheapest first.
  config = LoadTrainConfig(std::string(es::test_paths::kSourceDir) + "/config/train-fashion-mnist-cascade.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_EQ(config->members.size(), 5u);
  EXPECT_EQ(config->members[0].architecture, "mlp");
  EXPECT_EQ(config->members[1].architecture, "cnn");
}

// The config parser keeps its own list of the zoo's names (it must stay
// LibTorch-free): every architecture the zoo builds is accepted, and a name
// it does not build is refused.
TEST(TrainConfigTest, AcceptsEveryZooArchitectureAndNoOther) {
  testing::TempDir dir;
  for (const std::string& architecture : ZooArchitectures()) {
    StatusOr<TrainConfig> config =
        LoadText(dir, "members:\n  - {name: a, architecture: " + architecture + ", seed: 1}\n");
    EXPECT_TRUE(config.ok()) << architecture << ": " << config.status().ToString();
  }
  StatusOr<TrainConfig> config = LoadText(dir, "members:\n  - {name: a, architecture: resnet, seed: 1}\n");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("unknown zoo architecture 'resnet'"), std::string::npos)
      << config.status().message();
}

struct BadConfig {
  const char* yaml;
  const char* needle;  // expected in the error, after "train.yaml:LINE: "
};

TEST(TrainConfigTest, ErrorsNameTheLineAndField) {
  const BadConfig cases[] = {
      {"members: []\n", "members: at least one member is required"},
      {"data:\n  augment: {flip: yes}\nmembers:\n  - {name: a, architecture: mlp}\n",
       "data.augment.flip: expected true or false"},
      {"data:\n  augment: {shift: 9}\nmembers:\n  - {name: a, architecture: mlp}\n", "data.augment.shift"},
      {"data:\n  augment: {crop: 2}\nmembers:\n  - {name: a, architecture: mlp}\n", "unknown key 'crop'"},
      {"run: x\n", "members: missing required field"},
      {"members:\n  - {name: a, architecture: resnet}\n", "members[0].architecture: unknown zoo architecture 'resnet'"},
      {"members:\n  - {name: a}\n", "exactly one of `architecture`"},
      {"members:\n  - {name: a, torchscript: nowhere.pt}\n", "does not exist"},
      {"members:\n  - {name: a, architecture: mlp}\n  - {name: a, architecture: cnn}\n",
       "members[1].name: duplicate member name 'a'"},
      {"trainig: {}\nmembers:\n  - {name: a, architecture: mlp}\n", "trainig"},
      {"training: {optimizer: rmsprop}\nmembers:\n  - {name: a, architecture: mlp}\n",
       "training.optimizer: unknown value 'rmsprop'"},
      {"training: {learning_rate: -1}\nmembers:\n  - {name: a, architecture: mlp}\n",
       "training.learning_rate: value -1 out of range"},
      {"data: {dataset: cifar}\nmembers:\n  - {name: a, architecture: mlp}\n", "data.dataset: unknown value 'cifar'"},
      {"ensemble: {name: a}\nmembers:\n  - {name: a, architecture: mlp}\n", "also a member's name"},
      {"ensemble: {name: e}\nmembers:\n  - {name: e_cascade, architecture: mlp}\n",
       "ensemble.name: member 'e_cascade' has the name of the ensemble's cascade variant (e_cascade)"},
      {"ensemble: {name: e}\nmembers:\n  - {name: e_packed_mlp, architecture: mlp}\n",
       "ensemble.name: member 'e_packed_mlp' has the name of a folder of the ensemble's packed variant"},
      {"ensemble: {name: e}\nmembers:\n  - {name: e_packed, architecture: cnn}\n", "packed variant"},
      {"ensemble: {name: e, cascade_stages: three}\nmembers:\n  - {name: a, architecture: mlp}\n",
       "ensemble.cascade_stages: unknown value 'three'"},
      {"ensemble: {name: e, pack: maybe}\nmembers:\n  - {name: a, architecture: mlp}\n",
       "ensemble.pack: expected true or false"},
      {"ensemble: {name: .}\nmembers:\n  - {name: a, architecture: mlp}\n",
       "ensemble.name: '.' is not a valid model name"},
      {"members:\n  - {name: ../x, architecture: mlp}\n", "members[0].name: '../x' is not a valid model name"},
  };
  for (const BadConfig& bad : cases) {
    testing::TempDir dir;
    StatusOr<TrainConfig> config = LoadText(dir, bad.yaml);
    ASSERT_FALSE(config.ok()) << bad.yaml;
    EXPECT_NE(config.status().message().find("train.yaml:"), std::string::npos)
        << config.status().message();
    EXPECT_NE(config.status().message().find(bad.needle), std::string::npos)
        << "wanted '" << bad.needle << "' in: " << config.status().message();
  }
}

TEST(TrainOptionsTest, ParsesDevices) {
  EXPECT_EQ(ParseDevices("cpu:2").value(), (std::vector<std::string>{"cpu:0", "cpu:1"}));
  EXPECT_EQ(ParseDevices("cuda:0,3").value(), (std::vector<std::string>{"cuda:0", "cuda:3"}));
  for (const char* bad : {"cpu", "cpu:0", "gpu:1", "cuda:", "cuda:1,1", "cuda:a"}) {
    StatusOr<std::vector<std::string>> devices = ParseDevices(bad);
    ASSERT_FALSE(devices.ok()) << bad;
    EXPECT_NE(devices.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << devices.status().message();
  }
}

TEST(TrainConfigTest, TorchScriptFileMembersTrainAndNeedLogits) {
  testing::TempDir dir;
  BuildZooModel("mlp", 9).value().save(dir.Path("start.pt"));
  torch::jit::Module no_logits("NoLogits");
  no_logits.define("def forward(self, x):\n    return x\n");
  no_logits.save(dir.Path("no_logits.pt"));

  StatusOr<TrainConfig> config = LoadText(dir, "members:\n  - {name: f, torchscript: start.pt}\n");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->members[0].torchscript, dir.Path("start.pt"));  // resolved from the config's folder
  config->data.dataset = "synthetic";
  config->data.synthetic_train_rows = 256;
  config->optim.batch_size = 32;
  RunRanks(1, *config, 2, [&](std::vector<Rank>& ranks, int) {
    Rank& me = ranks[0];
    const at::Tensor before = FlatParameters(*me.trainer);
    me.loader->StartEpoch(0);
    std::optional<Batch> batch = NextBatch(*me.loader);
    ASSERT_TRUE(batch.has_value());
    ASSERT_TRUE(me.trainer->Step(batch->images, batch->labels).ok());
    EXPECT_GT((FlatParameters(*me.trainer) - before).abs().max().item<double>(), 0.0);
  });

  StatusOr<TrainConfig> bad = LoadText(dir, "members:\n  - {name: g, torchscript: no_logits.pt}\n");
  ASSERT_TRUE(bad.ok());
  auto trainer = EnsembleTrainer::Create(*bad, c10::intrusive_ptr<CollectiveGroup>(), 1);
  ASSERT_FALSE(trainer.ok());
  EXPECT_NE(trainer.status().message().find("member 'g'"), std::string::npos);
  EXPECT_NE(trainer.status().message().find("must define logits(x)"), std::string::npos)
      << trainer.status().message();
}

// ---- schedule and combination ---------------------------------------------

TEST(LearningRateTest, OneCycleWarmsUpThenDecays) {
  OptimSpec spec;
  spec.learning_rate = 0.003;
  spec.schedule = "one_cycle";
  EXPECT_NEAR(LearningRateAt(spec, 0, 1000), 0.003 / 25, 1e-12);
  EXPECT_NEAR(LearningRateAt(spec, 300, 1000), 0.003, 1e-9);
  EXPECT_LT(LearningRateAt(spec, 150, 1000), 0.003);
  EXPECT_GT(LearningRateAt(spec, 150, 1000), 0.003 / 25);
  EXPECT_NEAR(LearningRateAt(spec, 999, 1000), 0.003 / 25 / 1e4, 1e-12);
  spec.schedule = "constant";
  EXPECT_EQ(LearningRateAt(spec, 999, 1000), 0.003);
}

TEST(CombineTest, MeanAndMajorityVote) {
  const at::Tensor a = torch::tensor({{0.6f, 0.4f}, {0.2f, 0.8f}});
  const at::Tensor b = torch::tensor({{0.9f, 0.1f}, {0.6f, 0.4f}});
  const at::Tensor c = torch::tensor({{0.3f, 0.7f}, {0.4f, 0.6f}});
  EXPECT_TRUE(CombineMembers({a, b}, "mean").allclose(torch::tensor({{0.75f, 0.25f}, {0.4f, 0.6f}})));
  EXPECT_TRUE(CombineMembers({a, b, c}, "majority_vote")
                  .allclose(torch::tensor({{2 / 3.f, 1 / 3.f}, {1 / 3.f, 2 / 3.f}})));
}

// ---- checkpoints -------------------------------------------------------------

TEST(CheckpointTest, ResumedTrainerContinuesExactlyWhereTheOriginalWas) {
  torch::set_num_threads(1);
  testing::TempDir dir;
  const std::string path = dir.Path("latest.pt");
  constexpr int kStop = 4;
  constexpr int kSteps = 8;
  for (const char* optimizer : {"adam", "sgd"}) {
    const TrainConfig config = SmallConfig(optimizer, 25.0);
    at::Tensor continued;
    RunRanks(1, config, kSteps,
             [&](std::vector<Rank>& ranks, int) { continued = TrainWithCheckpointAt(ranks[0], kSteps, kStop, path); });

    at::Tensor resumed;
    at::Tensor fresh;
    RunRanks(1, config, kSteps, [&](std::vector<Rank>& ranks, int) {
      Rank& me = ranks[0];
      fresh = FlatParameters(*me.trainer);
      StatusOr<CheckpointData> saved = ReadCheckpoint(path);
      ASSERT_TRUE(saved.ok()) << saved.status().ToString();
      EXPECT_EQ(saved->step, kStop);
      EXPECT_EQ(saved->epoch, 0);
      EXPECT_EQ(saved->batch_in_epoch, kStop);
      std::map<std::string, at::Tensor> tensors(saved->tensors.begin(), saved->tensors.end());
      ASSERT_TRUE(me.trainer->Restore(tensors, saved->step).ok());
      me.loader->StartEpoch(saved->epoch, saved->batch_in_epoch);
      while (std::optional<Batch> batch = NextBatch(*me.loader)) {
        if (me.trainer->step() == kSteps) break;
        ASSERT_TRUE(me.trainer->Step(batch->images, batch->labels).ok());
      }
      EXPECT_EQ(me.trainer->step(), kSteps);
      resumed = FlatParameters(*me.trainer);
    });
    ASSERT_TRUE(continued.defined() && resumed.defined());
    EXPECT_GT((continued - fresh).abs().max().item<double>(), 1e-3) << optimizer;
    // Same data, same state, one thread: the very same numbers.
    EXPECT_EQ((continued - resumed).abs().max().item<double>(), 0.0) << optimizer;
  }
}

TEST(CheckpointTest, MismatchedOrMissingCheckpointsAreClearErrors) {
  testing::TempDir dir;
  StatusOr<CheckpointData> missing = ReadCheckpoint(dir.Path("none.pt"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("none.pt"), std::string::npos);

  const std::string garbage = dir.Write("garbage.pt", "not a checkpoint");
  StatusOr<CheckpointData> corrupt = ReadCheckpoint(garbage);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(corrupt.status().message().find("garbage.pt"), std::string::npos);

  // A checkpoint of other members does not restore silently.
  TrainConfig config = SmallConfig("adam", 25.0);
  RunRanks(1, config, 1, [&](std::vector<Rank>& ranks, int) {
    std::map<std::string, at::Tensor> other{{"param/x/fc1_w", torch::zeros({2, 2})}};
    Status status = ranks[0].trainer->Restore(other, 3);
    ASSERT_FALSE(status.ok());
    EXPECT_NE(status.message().find("does not match this config"), std::string::npos)
        << status.message();
  });
}

TEST(CheckpointTest, AtMostOneWriteInFlight) {
  testing::TempDir dir;
  CheckpointWriter writer(dir.Path("big.pt"));
  // Big enough that the first write is still going when the rest arrive.
  CheckpointData big{.step = 1, .tensors = {{"t", torch::rand({64, 1024, 1024})}}};
  int accepted = 0;
  for (int i = 0; i < 5; ++i) accepted += writer.Submit(big, /*wait=*/false) ? 1 : 0;
  ASSERT_TRUE(writer.Flush().ok());
  EXPECT_EQ(writer.written() + writer.skipped(), 5);
  EXPECT_EQ(writer.written(), accepted);
  EXPECT_GE(writer.skipped(), 1) << "256 MiB written 5 times back to back never overlapped?";
  EXPECT_FALSE(std::filesystem::exists(dir.Path("big.pt.tmp")));
  StatusOr<CheckpointData> read = ReadCheckpoint(dir.Path("big.pt"));
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->step, 1);
}

// A write that fails (here: the folder is missing) comes back as a Status
// naming the checkpoint; the writer counts it and Flush() returns it.
TEST(CheckpointTest, AFailedWriteIsAStatusNamingTheCheckpoint) {
  testing::TempDir dir;
  auto at_step = [](int64_t step) {
    CheckpointData data;
    data.step = step;
    return data;
  };
  const std::string path = dir.Path("missing/latest.pt");
  const Status status = WriteCheckpointFile(path, at_step(1));
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("writing checkpoint " + path), std::string::npos) << status.message();

  CheckpointWriter writer(path);
  ASSERT_TRUE(writer.Submit(at_step(2), /*wait=*/true));
  const Status flushed = writer.Flush();
  EXPECT_FALSE(flushed.ok());
  EXPECT_NE(flushed.message().find(path), std::string::npos) << flushed.message();
  EXPECT_EQ(writer.failed(), 1);
  EXPECT_EQ(writer.written(), 0);

  ASSERT_TRUE(WriteCheckpointFile(dir.Path("latest.pt"), at_step(3)).ok());
  StatusOr<CheckpointData> read = ReadCheckpoint(dir.Path("latest.pt"));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->step, 3);
}

// ---- served config ---------------------------------------------------------

TEST(ServedConfigTest, WriteTextFileSaysWhichFileItCouldNotWrite) {
  testing::TempDir dir;
  ASSERT_TRUE(WriteTextFile(dir.Path("config.yaml"), "platform: torchscript\n").ok());
  const std::string missing = dir.Path("no/such/folder/config.yaml");
  const Status status = WriteTextFile(missing, "x");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInternal);
  EXPECT_NE(status.message().find(missing), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("No such file or directory"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace es::training_test
