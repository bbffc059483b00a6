// Checkpoints of ensemble-train: where training stands (step, epoch, batch
// within the epoch) plus named tensors (parameters and optimizer state, see
// EnsembleTrainer::Snapshot), written by a background thread.
//
// The training thread only copies tensors (Snapshot) and hands them over;
// serialising and writing happen on the writer's thread, into
// "<path>.tmp", fsync'ed, then renamed onto <path>: a crash mid-write leaves
// the previous checkpoint intact, never a torn one. At most one write is in
// flight: Submit() while one is running skips that checkpoint (and counts
// it) rather than queueing copies without bound. A failed write is logged
// when it happens and training goes on (the previous checkpoint stays).
//
// Thread safety: Submit/Flush/counters from the training thread; the writer
// thread is private.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "common/mutex.h"
#include "common/status.h"

namespace es {

struct CheckpointData {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // epoch to continue in
  int64_t batch_in_epoch = 0;  // first batch of `epoch` not yet trained on
  // What the position means: a resume with another schedule length, batch
  // or data order would silently train something else, so it is refused.
  int64_t total_steps = 0;
  int64_t global_batch = 0;
  int64_t seed = 0;
  // The run's time so far, over every resume, so that the report of a
  // resumed run is the whole run's (older checkpoints lack them: 0).
  double train_seconds = 0;
  double step_seconds_sum = 0;       // over the steps timed
  double allreduce_seconds_sum = 0;  // over the steps timed
  int64_t steps_timed = 0;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
};

// Writes `data` to "<path>.tmp", fsyncs it, renames it onto `path` and
// fsyncs the folder. An error (unwritable folder, full disk) names the
// checkpoint and the step that failed; `path` then still holds the previous
// checkpoint, if any.
Status WriteCheckpointFile(const std::string& path, const CheckpointData& data);
// NotFound when there is no file at `path`, DataLoss when it is unreadable.
StatusOr<CheckpointData> ReadCheckpoint(const std::string& path);

class CheckpointWriter {
 public:
  explicit CheckpointWriter(std::string path);
  ~CheckpointWriter();  // finishes the write in flight, then joins
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Queues `data` for writing. With `wait` false a write still in flight
  // makes this return false and drop `data`; with `wait` true it waits.
  bool Submit(CheckpointData data, bool wait);
  // Waits until nothing is in flight; the first write error so far, if any.
  Status Flush();

  const std::string& path() const { return path_; }
  int64_t written() const;
  int64_t skipped() const;
  int64_t failed() const;  // writes that failed (each logged when it happened)

 private:
  void Run();

  const std::string path_;
  mutable Mutex mu_;
  CondVar cv_;
  std::optional<CheckpointData> pending_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t skipped_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts after the rest is built
};

}  // namespace es
