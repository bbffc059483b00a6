// GradientReducer: averages gradients over all ranks, in flattened buckets,
// overlapping communication with the rest of backward (as DDP's Reducer does).
//
// Parameters are grouped into buckets of about `bucket_bytes`, in reverse
// order of registration (roughly the order in which backward produces their
// gradients). A hook on each parameter copies its gradient into the bucket's
// flat buffer as soon as autograd produces it; a full bucket is all-reduced
// (SUM) asynchronously while backward goes on, buckets strictly in index
// order (ranks must issue collectives in the same order). Finish() launches anything not yet launched (a parameter unused in this
// step contributes zeros), waits for every bucket, divides by the world size
// and writes the averages into each parameter's .grad.
//
// Contract: call PrepareForBackward() before each backward(), Finish() after
// it, on one thread. Every rank must register the same parameters in the
// same order (same shapes), or the collectives mismatch.
// Errors from the collectives (a peer died, a timeout) come back as a Status.
//
// Thread safety: hooks run on the autograd engine's thread during backward
// (the calling thread on CPU); nothing else may touch the reducer then.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>

#include "common/status.h"
#include "training/collective_group.h"

namespace c10d {
class Work;
}  // namespace c10d

namespace es {

class GradientReducer {
 public:
  GradientReducer(c10::intrusive_ptr<CollectiveGroup> group, std::vector<at::Tensor> parameters,
                  int64_t bucket_bytes, std::chrono::milliseconds timeout);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void PrepareForBackward();
  // Waits for the all-reduces and installs the averaged gradients.
  Status Finish();

  // Rank 0's parameters copied to every rank (one flattened broadcast), so
  // that all ranks start from the same point whatever they loaded.
  Status BroadcastParameters();
  // max over elements of (max over ranks - min over ranks): 0 when every
  // rank holds the same parameters. A collective: all ranks must call it.
  StatusOr<double> ParameterDivergence();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Seconds Finish() spent waiting for communication in the last step (the
  // part of the all-reduce that backward did not hide).
  double last_wait_seconds() const { return last_wait_seconds_; }

 private:
  struct Slot {
    int bucket = 0;
    int64_t offset = 0;  // in elements, within the bucket's flat buffer
  };
  struct Bucket {
    at::Tensor flat;
    std::vector<int> parameters;  // indices into parameters_
    int pending = 0;              // gradients not yet copied in this step
    c10::intrusive_ptr<c10d::Work> work;
  };

  void OnGradient(int parameter, const at::Tensor& grad);
  void Launch(Bucket& bucket);
  void LaunchReadyInOrder();
  at::Tensor FlattenParameters() const;

  c10::intrusive_ptr<CollectiveGroup> group_;
  std::vector<at::Tensor> parameters_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;  // buckets before it are launched this step
  std::vector<unsigned> hooks_;
  std::chrono::milliseconds timeout_;
  double last_wait_seconds_ = 0;
};

}  // namespace es
