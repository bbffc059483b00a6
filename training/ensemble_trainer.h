// EnsembleTrainer: trains every member of the ensemble, data-parallel, on
// this rank's shard of each global batch.
//
// Each member is a TorchScript module (zoo-built or loaded from a file) that
// defines logits(x) and forward(x) = softmax(logits(x)): training optimises
// logits with cross-entropy, and the very same module is what gets served,
// so there is no export step to get wrong. All members share one step: one
// backward over the sum of their losses, one GradientReducer (so their
// gradients share buckets), one optimizer (Adam or SGD with momentum; both
// per-parameter, so sharing is the same as one optimizer per member).
//
// Determinism: given the same members, data order and global batch, a step
// computes the mean gradient of the global batch whatever the world size, so
// 1 rank and N ranks follow the same trajectory up to float summation order.
//
// Packed training (config `ensemble.pack_training`): the zoo members of one
// architecture (two or more) train as one packed module
// (torch_utils/packed_model.h): one forward and one backward for all of
// them, each member's loss and statistics its own slice of the packed
// logits, the loss the same sum, each member's weights, gradients and
// optimizer state its own elements of the packed parameters (both
// optimizers are per element), so the trajectory is the unpacked one up to
// float rounding (dropout draws aside). Members of other architectures, and
// members from TorchScript files, train as they are. The member modules
// (modules(), Evaluate, what gets published) get the packed weights copied
// back whenever they are read; checkpoints hold the packed parameters (under
// the packed members' names) and resume only a run packed the same way.
//
// Device: the members live on the trainer's device (the CPU, or this rank's
// GPU); batches come in on the CPU and are moved there, and everything handed
// out (evaluations, snapshots) is on the CPU.
//
// Thread safety: one training thread. Snapshot() returns copies that another
// thread may serialise while training goes on.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/script.h>

#include "common/status.h"
#include "training/collective_group.h"
#include "training/train_config.h"

namespace torch::optim {
class Optimizer;
}

namespace es {

class GradientReducer;

struct MemberStep {
  double loss = 0;      // mean cross-entropy over this rank's rows
  int64_t correct = 0;  // rows of this rank's shard classified right
};

struct StepStats {
  std::vector<MemberStep> members;
  int64_t rows = 0;               // this rank's rows
  double learning_rate = 0;
  double step_seconds = 0;        // forward + backward + all-reduce + update
  double allreduce_seconds = 0;   // the all-reduce wait backward did not hide
};

// Class probabilities [N, classes] of each member and of the ensemble
// (combined as the server combines them), in the rows' order, and each
// member's forward time per row: the median over the evaluation's full-size
// batches (all batches when none is full) of the batch's wall time / rows,
// after one untimed warm-up batch (TorchScript's profiling executor
// optimises a method on its first calls). A median, so a burst of other work
// on the machine during one batch does not decide the cascade's order.
struct Evaluation {
  std::vector<at::Tensor> members;
  at::Tensor ensemble;
  std::vector<double> member_seconds_per_row;
};

// The median of `times` (the mean of the middle two for an even count); 0
// when empty. The evaluation's per-batch forward times are summed up by it.
double Median(std::vector<double> times);

// Combines member probabilities as the router's EnsembleCombiner does:
// "mean" averages, "majority_vote" gives each class its share of the votes
// (ties to the lowest index, as argmax does).
at::Tensor CombineMembers(const std::vector<at::Tensor>& members, const std::string& combine);

// The learning rate at `step` of `total_steps`: constant, or one-cycle
// (linear warm-up over the first 30% from peak/25, then cosine down to
// peak/25/1e4): OneCycleLR's rates with a linear rather than cosine warm-up,
// and no momentum cycling.
double LearningRateAt(const OptimSpec& spec, int64_t step, int64_t total_steps);

class EnsembleTrainer {
 public:
  // Builds (or loads) the members onto `device`; errors name the member and
  // the file.
  static StatusOr<std::unique_ptr<EnsembleTrainer>> Create(
      const TrainConfig& config, c10::intrusive_ptr<CollectiveGroup> group, int64_t total_steps,
      const c10::Device& device = c10::Device(c10::DeviceType::CPU));
  ~EnsembleTrainer();

  // Makes every rank start from rank 0's weights (a collective).
  Status SyncInitialParameters();

  // One step on this rank's rows of the global batch (a collective).
  StatusOr<StepStats> Step(const at::Tensor& images, const at::Tensor& labels);

  // Probabilities on the CPU, whatever the trainer's device.
  Evaluation Evaluate(const at::Tensor& images, int64_t batch_rows = 1000);

  // Moves the members to the CPU (after training, before they are saved: a
  // served repository must load on any host).
  void MoveToCpu();

  // Named copies of the parameters and the optimizer state, and the step
  // count, for checkpoints; Restore() takes them back (resume).
  std::vector<std::pair<std::string, at::Tensor>> Snapshot() const;
  Status Restore(const std::map<std::string, at::Tensor>& tensors, int64_t step);

  int64_t step() const { return step_; }
  const std::vector<MemberSpec>& specs() const { return config_.members; }
  // What trains packed, one entry per packed module: "convnet (12 members)".
  std::vector<std::string> PackedGroups() const;
  // The members, with their current weights (packed ones copied back first).
  std::vector<torch::jit::Module>& modules();
  GradientReducer& reducer() { return *reducer_; }

 private:
  EnsembleTrainer(const TrainConfig& config, int64_t total_steps, const c10::Device& device);

  struct Named {
    std::string key;  // "<member>/<parameter>"
    at::Tensor tensor;
  };

  // What one forward of the step runs: one member, or several packed.
  struct Unit {
    torch::jit::Module module;
    std::vector<size_t> members;  // indices into modules_: one, or the packed members in packing order
    bool packed = false;
  };
  // units_ from modules_: packed per architecture when the config says so.
  Status BuildUnits();
  // Copies each packed unit's weights into its members' own parameters.
  void SyncMembers();

  TrainConfig config_;
  int64_t total_steps_;
  c10::Device device_;
  int64_t step_ = 0;
  int64_t synced_step_ = -1;                 // step_ when SyncMembers last copied (a restore resets it)
  std::vector<torch::jit::Module> modules_;  // the members, config order
  std::vector<Unit> units_;                  // what trains: every member once
  std::vector<Named> parameters_;            // all units', registration order
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<GradientReducer> reducer_;
};

}  // namespace es
