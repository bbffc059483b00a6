// BatchLoader: the sharded, shuffling, prefetching data loader of one
// ensemble-train rank.
//
// Order contract (what makes 1 rank and W ranks train on the same data):
//   - Epoch e visits the rows in EpochPermutation(N, seed, e): one permutation
//     of all N rows, a pure function of (seed, e), identical on every rank.
//   - Global batch b is permutation positions [b*G, (b+1)*G), G = global_batch;
//     the N % G rows at the end are dropped, so every rank does
//     batches_per_epoch() = floor(N / G) steps.
//   - Rank r's share of batch b is the contiguous slice
//     [b*G + r*L, b*G + (r+1)*L), L = G / world_size. Concatenating batch b of
//     ranks 0..W-1 gives exactly the 1-rank batch b, rows and order.
//
// Background threads gather each batch (index_select) into new contiguous
// tensors, augmented (ShardSpec::augment, augmentation.h) by each row's
// position in the epoch's global order, at most `prefetch` batches ahead of the consumer; Next() hands them
// out strictly in batch order whatever the number of threads.
//
// Thread safety: the loader's own threads synchronise with the consumer under
// one mutex (mu_) and two condition variables, no polling. StartEpoch() and
// Next() are meant for one consumer thread; calling them from several threads
// is safe but the interleaving of batches is then theirs to define. The
// Dataset's tensors are shared, not copied: nobody may write into them in
// place while a loader lives.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "training/augmentation.h"
#include "training/dataset.h"

namespace es {

struct ShardSpec {
  int rank = 0;
  int world_size = 1;
  int64_t global_batch = 64;  // rows per step across all ranks; divisible by world_size
  uint64_t seed = 1;          // data order (and the augmentation's draws)
  Augmentation augment;       // applied to each gathered batch (none by default)
};

struct Batch {
  at::Tensor images;  // [G / world_size, 1, 28, 28], a new contiguous tensor
  at::Tensor labels;  // [G / world_size]
  int64_t index = 0;  // batch index within the epoch
};

// The row order of epoch `epoch`: a permutation of [0, rows), int64.
at::Tensor EpochPermutation(int64_t rows, uint64_t seed, int64_t epoch);

// OK when a loader can be built for (data, shard): 0 <= rank < world_size,
// global_batch > 0 and divisible by world_size, images and labels defined with
// the same row count, and at least one global batch of rows. For the trainer
// to report a bad configuration before it builds anything.
Status ValidateShardSpec(const Dataset& data, const ShardSpec& shard);

class BatchLoader {
 public:
  // threads >= 1 background loader threads, prefetch >= 1 batches queued
  // ahead (smaller values are taken as 1). Nothing is loaded before the first
  // StartEpoch(). Errors: InvalidArgument with ValidateShardSpec's message
  // when (data, shard) is not a valid pair; ResourceExhausted when a thread
  // cannot be started.
  static StatusOr<std::unique_ptr<BatchLoader>> Create(const Dataset& data, ShardSpec shard, int threads,
                                                       int prefetch);
  // Stops and joins the threads, even mid-epoch; a batch being gathered is
  // finished and dropped.
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // floor(N / global_batch): the last partial batch is dropped so that every
  // rank does the same number of steps.
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  int64_t rows_per_batch() const { return rows_per_batch_; }  // global_batch / world_size

  // Starts epoch `epoch` at batch `first_batch` (to resume mid-epoch; clamped
  // to [0, batches_per_epoch()]); discards anything prefetched before.
  void StartEpoch(int64_t epoch, int64_t first_batch = 0);

  // The next batch of this rank, in order; an empty optional at the end of
  // the epoch and before the first StartEpoch(). Blocks while the batch is
  // being gathered. An error when gathering it failed (out of memory, a
  // dataset the augmentation cannot take), naming the batch and the epoch;
  // the batch after it can still be asked for.
  StatusOr<std::optional<Batch>> Next();

 private:
  BatchLoader(const Dataset& data, ShardSpec shard, int prefetch);
  Status StartThreads(int threads);
  void StopAndJoin();
  void WorkerLoop();
  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // LibTorch's exceptions end here, as a Status naming the batch.
  StatusOr<Batch> Gather(const at::Tensor& permutation, int64_t epoch, int64_t index) const;

  const Dataset data_;
  const ShardSpec shard_;
  const int prefetch_;
  const int64_t rows_per_batch_;
  const int64_t batches_per_epoch_;

  Mutex mu_;
  CondVar work_cv_;   // workers: a batch to claim, or stop
  CondVar ready_cv_;  // consumer: a batch landed, or stop
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by StartEpoch; late batches of older ones are dropped
  at::Tensor permutation_ ABSL_GUARDED_BY(mu_);   // of the current epoch
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_to_claim_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_to_return_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, Batch> ready_ ABSL_GUARDED_BY(mu_);    // gathered, by batch index
  std::map<int64_t, Status> failed_ ABSL_GUARDED_BY(mu_);  // gathering failed, by batch index

  std::vector<std::thread> threads_;  // last member: started after everything above exists
};

}  // namespace es
