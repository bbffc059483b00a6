#include "training/batch_loader.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/randperm.h>

#include <algorithm>
#include <new>
#include <string>
#include <system_error>
#include <utility>

#include "training/seed_mix.h"

namespace es {
namespace {

Status Invalid(const std::string& what) { return Status::InvalidArgument("batch loader: " + what); }

}  // namespace

at::Tensor EpochPermutation(int64_t rows, uint64_t seed, int64_t epoch) {
  at::Generator gen = at::detail::createCPUGenerator(MixSeed(MixSeed(seed) ^ static_cast<uint64_t>(epoch)));
  return at::randperm(rows, gen, at::kLong);
}

Status ValidateShardSpec(const Dataset& data, const ShardSpec& shard) {
  const std::string w = std::to_string(shard.world_size);
  if (shard.world_size < 1) return Invalid("world_size " + w + " must be at least 1");
  if (shard.rank < 0 || shard.rank >= shard.world_size) {
    return Invalid("rank " + std::to_string(shard.rank) + " is outside [0, " + w + ")");
  }
  const std::string g = std::to_string(shard.global_batch);
  if (shard.global_batch < 1) return Invalid("global_batch " + g + " must be at least 1");
  if (shard.global_batch % shard.world_size != 0) {
    return Invalid("global_batch " + g + " is not divisible by world_size " + w);
  }
  if (!data.images.defined() || !data.labels.defined()) return Invalid("the dataset has no tensors");
  if (data.images.dim() < 1 || data.labels.dim() != 1 || data.images.size(0) != data.labels.size(0)) {
    return Invalid("the dataset's images and labels do not have one row per example");
  }
  if (data.size() < shard.global_batch) {
    return Invalid("the dataset has " + std::to_string(data.size()) + " rows, fewer than one global batch of " + g);
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<BatchLoader>> BatchLoader::Create(const Dataset& data, ShardSpec shard, int threads,
                                                           int prefetch) {
  ES_RETURN_IF_ERROR(ValidateShardSpec(data, shard));
  std::unique_ptr<BatchLoader> loader(new BatchLoader(data, std::move(shard), prefetch));
  ES_RETURN_IF_ERROR(loader->StartThreads(threads));  // on error the destructor joins what did start
  return loader;
}

BatchLoader::BatchLoader(const Dataset& data, ShardSpec shard, int prefetch)
    : data_(data),
      shard_(std::move(shard)),
      prefetch_(std::max(1, prefetch)),
      rows_per_batch_(shard_.global_batch / shard_.world_size),
      batches_per_epoch_(data_.size() / shard_.global_batch) {}

Status BatchLoader::StartThreads(int threads) {
  try {
    for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { WorkerLoop(); });
  } catch (const std::system_error& e) {
    return Status::ResourceExhausted("batch loader: cannot start loader thread " + std::to_string(threads_.size() + 1) +
                                     " of " + std::to_string(std::max(1, threads)) + ": " + e.what());
  }
  return Status::Ok();
}

BatchLoader::~BatchLoader() { StopAndJoin(); }

void BatchLoader::StopAndJoin() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  work_cv_.NotifyAll();
  ready_cv_.NotifyAll();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void BatchLoader::StartEpoch(int64_t epoch, int64_t first_batch) {
  // Drawn outside the lock: the workers need not wait for it.
  at::Tensor permutation = EpochPermutation(data_.size(), shard_.seed, epoch);
  const int64_t first = std::clamp<int64_t>(first_batch, 0, batches_per_epoch_);
  std::map<int64_t, Batch> discarded;  // freed after the lock is released
  {
    MutexLock lock(&mu_);
    ++generation_;
    permutation_ = std::move(permutation);
    epoch_ = epoch;
    next_to_claim_ = first;
    next_to_return_ = first;
    discarded.swap(ready_);
    failed_.clear();
    started_ = true;
  }
  work_cv_.NotifyAll();
}

StatusOr<std::optional<Batch>> BatchLoader::Next() {
  MutexLock lock(&mu_);
  if (!started_ || next_to_return_ >= batches_per_epoch_) return std::optional<Batch>();
  const int64_t index = next_to_return_;
  while (!stop_ && ready_.count(index) == 0 && failed_.count(index) == 0) ready_cv_.Wait(&mu_);
  if (stop_) return std::optional<Batch>();
  ++next_to_return_;  // moves the prefetch window: a worker may claim one more
  work_cv_.NotifyAll();
  if (auto failed = failed_.extract(index)) return std::move(failed.mapped());
  auto node = ready_.extract(index);
  return std::optional<Batch>(std::move(node.mapped()));
}

bool BatchLoader::HasWorkLocked() const {
  return started_ && next_to_claim_ < batches_per_epoch_ && next_to_claim_ < next_to_return_ + prefetch_;
}

void BatchLoader::WorkerLoop() {
  MutexLock lock(&mu_);
  for (;;) {
    while (!stop_ && !HasWorkLocked()) work_cv_.Wait(&mu_);
    if (stop_) return;
    const int64_t index = next_to_claim_++;
    const uint64_t generation = generation_;
    const at::Tensor permutation = permutation_;
    const int64_t epoch = epoch_;
    lock.Unlock();
    // The gather runs unlocked, several batches at once with several threads.
    StatusOr<Batch> batch = Gather(permutation, epoch, index);
    lock.Lock();
    if (stop_) return;
    if (generation != generation_) continue;  // StartEpoch came in between: nobody wants it
    if (batch.ok()) {
      ready_.emplace(index, std::move(batch).value());
    } else {
      failed_.emplace(index, batch.status());
    }
    ready_cv_.NotifyAll();
  }
}

StatusOr<Batch> BatchLoader::Gather(const at::Tensor& permutation, int64_t epoch, int64_t index) const {
  const std::string what = "batch loader: gathering batch " + std::to_string(index) + " of epoch " +
                           std::to_string(epoch) + " (rank " + std::to_string(shard_.rank) + ")";
  try {
    const int64_t begin = index * shard_.global_batch + shard_.rank * rows_per_batch_;
    const at::Tensor rows = permutation.slice(0, begin, begin + rows_per_batch_);
    at::Tensor images = data_.images.index_select(0, rows);  // a new tensor: augmenting it leaves the dataset alone
    AugmentRows(images, shard_.augment, shard_.seed, epoch, begin);
    return Batch{std::move(images), data_.labels.index_select(0, rows), index};
  } catch (const c10::Error& e) {
    return Status::Internal(what + ": " + e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(what + ": out of memory");
  }
}

}  // namespace es
