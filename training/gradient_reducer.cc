#include "training/gradient_reducer.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <exception>

#include "common/steady_clock.h"

namespace es {
namespace {

Status CollectiveError(const char* what, const std::exception& e) {
  return Status::Unavailable(std::string(what) +
                             " failed (a peer rank died, or a collective passed its timeout): " +
                             e.what());
}

}  // namespace

GradientReducer::GradientReducer(c10::intrusive_ptr<CollectiveGroup> group,
                                 std::vector<at::Tensor> parameters, int64_t bucket_bytes,
                                 std::chrono::milliseconds timeout)
    : group_(std::move(group)), parameters_(std::move(parameters)), timeout_(timeout) {
  slots_.resize(parameters_.size());
  // Reverse registration order: the last layers' gradients come first.
  int64_t filled = 0;
  for (int i = static_cast<int>(parameters_.size()) - 1; i >= 0; --i) {
    const int64_t bytes = parameters_[i].numel() * static_cast<int64_t>(sizeof(float));
    if (buckets_.empty() || (filled > 0 && filled + bytes > bucket_bytes)) {
      buckets_.emplace_back();
      filled = 0;
    }
    Bucket& bucket = buckets_.back();
    slots_[i] = {static_cast<int>(buckets_.size()) - 1, filled / static_cast<int64_t>(sizeof(float))};
    bucket.parameters.push_back(i);
    filled += bytes;
  }
  for (Bucket& bucket : buckets_) {
    int64_t elements = 0;
    for (int i : bucket.parameters) elements += parameters_[i].numel();
    bucket.flat = at::zeros({elements}, parameters_[bucket.parameters[0]].options());
  }
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const int index = static_cast<int>(i);
    hooks_.push_back(parameters_[i].register_hook(
        [this, index](const at::Tensor& grad) { OnGradient(index, grad); }));
  }
}

GradientReducer::~GradientReducer() {
  for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].remove_hook(hooks_[i]);
}

void GradientReducer::PrepareForBackward() {
  for (Bucket& bucket : buckets_) {
    bucket.flat.zero_();
    bucket.pending = static_cast<int>(bucket.parameters.size());
    bucket.work.reset();
  }
  next_launch_ = 0;
}

void GradientReducer::OnGradient(int parameter, const at::Tensor& grad) {
  const Slot& slot = slots_[parameter];
  Bucket& bucket = buckets_[slot.bucket];
  if (bucket.pending == 0) return;  // already complete (a second backward through it)
  bucket.flat.narrow(0, slot.offset, grad.numel()).copy_(grad.reshape({-1}));
  if (--bucket.pending == 0) LaunchReadyInOrder();
}

// Collectives are matched across ranks by the order they are issued in, and
// the order hooks fire can differ between ranks (a parameter one rank's data
// leaves unused): buckets go out strictly by index, each as soon as it and
// all before it are full, as DDP's reducer does.
void GradientReducer::LaunchReadyInOrder() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Launch(buckets_[next_launch_++]);
  }
}

void GradientReducer::Launch(Bucket& bucket) {
  std::vector<at::Tensor> tensors{bucket.flat};
  bucket.work = group_->allreduce(tensors);  // SUM
}

Status GradientReducer::Finish() {
  const SteadyClock::time_point start = SteadyClock::now();
  try {
    for (Bucket& bucket : buckets_) bucket.pending = 0;  // unused parameters: their zeros take part
    LaunchReadyInOrder();
    const double world = static_cast<double>(group_->getSize());
    for (Bucket& bucket : buckets_) {
      bucket.work->wait(timeout_);
      bucket.flat.div_(world);
      for (int i : bucket.parameters) {
        at::Tensor& param = parameters_[i];
        at::Tensor averaged =
            bucket.flat.narrow(0, slots_[i].offset, param.numel()).view(param.sizes());
        if (param.grad().defined()) {
          param.mutable_grad().copy_(averaged);
        } else {
          param.mutable_grad() = averaged.clone();
        }
      }
    }
  } catch (const std::exception& e) {
    return CollectiveError("gradient all-reduce", e);
  }
  last_wait_seconds_ = SecondsSince(start);
  return Status::Ok();
}

at::Tensor GradientReducer::FlattenParameters() const {
  std::vector<at::Tensor> flat;
  flat.reserve(parameters_.size());
  for (const at::Tensor& p : parameters_) flat.push_back(p.detach().reshape({-1}));
  return at::cat(flat);
}

Status GradientReducer::BroadcastParameters() {
  try {
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> tensors{FlattenParameters()};
    group_->broadcast(tensors)->wait(timeout_);
    int64_t offset = 0;
    for (at::Tensor& p : parameters_) {
      p.detach().copy_(tensors[0].narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  } catch (const std::exception& e) {
    return CollectiveError("parameter broadcast", e);
  }
  return Status::Ok();
}

StatusOr<double> GradientReducer::ParameterDivergence() {
  try {
    std::vector<at::Tensor> high{FlattenParameters()};
    std::vector<at::Tensor> low{high[0].clone()};
    c10d::AllreduceOptions max_options;
    max_options.reduceOp = c10d::ReduceOp::MAX;
    c10d::AllreduceOptions min_options;
    min_options.reduceOp = c10d::ReduceOp::MIN;
    group_->allreduce(high, max_options)->wait(timeout_);
    group_->allreduce(low, min_options)->wait(timeout_);
    return (high[0] - low[0]).max().item<double>();
  } catch (const std::exception& e) {
    return CollectiveError("parameter divergence check", e);
  }
}

}  // namespace es
