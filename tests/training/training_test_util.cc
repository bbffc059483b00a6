#include "tests/training/training_test_util.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

#include "training/checkpoint.h"
#include "training/process_group.h"
#include "training/synthetic_data.h"

namespace es::training_test {

TrainConfig SmallConfig(const std::string& optimizer, double bucket_mb) {
  TrainConfig config;
  config.run = "test";
  config.data.dataset = "synthetic";
  config.data.synthetic_train_rows = 1024;
  config.optim.batch_size = 32;
  config.optim.optimizer = optimizer;
  config.optim.learning_rate = optimizer == "sgd" ? 0.05 : 0.002;
  config.optim.schedule = "constant";
  config.optim.seed = 5;
  config.distributed.bucket_mb = bucket_mb;
  config.distributed.collective_timeout_ms = 20000;
  config.members = {{"m", "mlp", "", 1}, {"c", "cnn", "", 2}};
  return config;
}

at::Tensor FlatParameters(EnsembleTrainer& trainer) { return FlatParameters(trainer.modules()); }

at::Tensor FlatParameters(const std::vector<torch::jit::Module>& modules) {
  std::vector<at::Tensor> parts;
  for (const torch::jit::Module& module : modules) {
    for (const at::Tensor& p : module.parameters()) parts.push_back(p.detach().reshape({-1}).clone());
  }
  return at::cat(parts);
}

at::Tensor TrainWithCheckpointAt(Rank& me, int steps, int stop, const std::string& path) {
  me.loader->StartEpoch(0);
  for (int i = 0; i < steps; ++i) {
    std::optional<Batch> batch = NextBatch(*me.loader);
    EXPECT_TRUE(batch.has_value());
    if (!batch) return {};
    const StatusOr<StepStats> stats = me.trainer->Step(batch->images, batch->labels);
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    if (i + 1 == stop) {
      CheckpointData data;  // (no designated initializers: this file also parses as C++17)
      data.step = me.trainer->step();
      data.batch_in_epoch = stop;
      data.tensors = me.trainer->Snapshot();
      CheckpointWriter writer(path);
      EXPECT_TRUE(writer.Submit(std::move(data), /*wait=*/false));
      EXPECT_TRUE(writer.Flush().ok());
      EXPECT_EQ(writer.written(), 1);
    }
  }
  return FlatParameters(*me.trainer);
}

std::optional<Batch> NextBatch(BatchLoader& loader) {
  StatusOr<std::optional<Batch>> batch = loader.Next();
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  if (!batch.ok()) return std::nullopt;
  return std::move(batch).value();
}

void RunRanks(int world, const TrainConfig& config, int64_t total_steps,
              const std::function<void(std::vector<Rank>& ranks, int rank)>& body) {
  auto base = c10::make_intrusive<c10d::HashStore>();
  const Dataset data = MakeSyntheticDataset(config.data.synthetic_train_rows, config.optim.seed);
  std::vector<Rank> ranks(world);
  std::vector<std::thread> threads;
  std::atomic<int> built{0};
  std::atomic<bool> failed{false};
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      // A rank that fails to set up must not leave the others waiting.
      struct FailGuard {
        std::atomic<bool>& failed;
        bool done = false;
        ~FailGuard() { if (!done) failed.store(true); }
      } guard{failed};
      // Groups of one run share a prefix, as Rendezvous() gives them.
      c10::intrusive_ptr<c10d::Store> store = base;
      auto group = MakeProcessGroup(store, r, world, "cpu", "127.0.0.1",
                                    std::chrono::milliseconds(config.distributed.collective_timeout_ms));
      ASSERT_TRUE(group.ok()) << group.status().ToString();
      auto trainer = EnsembleTrainer::Create(config, std::move(group).value(), total_steps);
      ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
      ranks[r].rank = r;
      ranks[r].trainer = std::move(trainer).value();
      ShardSpec shard;
      shard.rank = r;
      shard.world_size = world;
      shard.global_batch = config.optim.batch_size;
      shard.seed = config.optim.seed;
      auto loader = BatchLoader::Create(data, shard, 1, 2);
      ASSERT_TRUE(loader.ok()) << loader.status().ToString();
      ranks[r].loader = std::move(loader).value();
      ASSERT_TRUE(ranks[r].trainer->SyncInitialParameters().ok());
      built.fetch_add(1);
      while (built.load() < world) {
        ASSERT_FALSE(failed.load()) << "another rank failed to start";
        std::this_thread::yield();
      }
      guard.done = true;
      body(ranks, r);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace es::training_test
