// Shared helpers of the training tests: a small synthetic TrainConfig, and
// ranks run as threads of one process over one c10d HashStore, each with
// its own real ProcessGroupGloo (loopback TCP), so collectives are the real
// thing while the test can compare every rank's parameters directly.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "common/mutex.h"
#include "training/batch_loader.h"
#include "training/ensemble_trainer.h"
#include "training/train_config.h"

namespace es::training_test {

// Two members (mlp, cnn), synthetic data, constant learning rate.
TrainConfig SmallConfig(const std::string& optimizer, double bucket_mb);

// Every parameter of every member, flattened into one tensor (a copy): of
// a trainer, or of modules (e.g. the model.pt files a run wrote).
at::Tensor FlatParameters(EnsembleTrainer& trainer);
at::Tensor FlatParameters(const std::vector<torch::jit::Module>& modules);

// A rank of an in-process group.
struct Rank {
  int rank = 0;
  std::unique_ptr<EnsembleTrainer> trainer;
  std::unique_ptr<BatchLoader> loader;
};

// `loader`'s next batch. An error fails the calling test (a non-fatal
// failure, so that a rank does not strand the others) and reads as the end
// of the epoch.
std::optional<Batch> NextBatch(BatchLoader& loader);

// Trains `me` `steps` steps from the start of epoch 0, writing one
// checkpoint (its Snapshot) to `path` right after step `stop`; returns the
// members' parameters after the last step (FlatParameters). A failed step
// or write fails the calling test.
at::Tensor TrainWithCheckpointAt(Rank& me, int steps, int stop, const std::string& path);

// Builds `world` ranks over one store (each with its trainer and its shard's
// loader, parameters synced from rank 0), then runs `body(rank)` on one
// thread per rank and joins them. `body` sees the ranks' vector, so it can
// look at the others' state between barriers of its own.
void RunRanks(int world, const TrainConfig& config, int64_t total_steps,
              const std::function<void(std::vector<Rank>& ranks, int rank)>& body);

// A reusable barrier for the ranks' threads: ArriveAndWait returns once
// `parties` threads have arrived in the current round. (std::barrier would
// do, but this file's sources must also parse as C++17 for the thread-safety
// analysis, which LibTorch's headers need with Debian's clang.)
class RankBarrier {
 public:
  explicit RankBarrier(int parties) : parties_(parties) {}
  void ArriveAndWait() {
    MutexLock lock(&mu_);
    const int64_t round = round_;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      ++round_;
      cv_.NotifyAll();
      return;
    }
    cv_.Wait(&mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return round_ != round; });
  }

 private:
  const int parties_;
  Mutex mu_;
  CondVar cv_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t round_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace es::training_test
