#include "training/ensemble_trainer.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "common/steady_clock.h"
#include "torch_utils/model_zoo.h"
#include "torch_utils/packed_model.h"
#include "training/gradient_reducer.h"

namespace es {
namespace {

constexpr double kOneCycleWarmup = 0.3;    // share of steps warming up
constexpr double kOneCycleStartDiv = 25;   // initial rate = peak / 25
constexpr double kOneCycleFinalDiv = 1e4;  // final rate = peak / 1e4

StatusOr<torch::jit::Module> LoadMember(const MemberSpec& spec, const c10::Device& device) {
  std::optional<torch::jit::Module> built;
  if (!spec.architecture.empty()) {
    StatusOr<torch::jit::Module> zoo = BuildZooModel(spec.architecture, spec.seed);
    if (!zoo.ok()) {
      return Status(zoo.status().code(), "member '" + spec.name + "': " + zoo.status().message());
    }
    built = std::move(zoo).value();
  }
  try {
    torch::jit::Module module = built ? std::move(*built) : torch::jit::load(spec.torchscript);
    if (!device.is_cpu()) module.to(device);  // parameters keep their identity (set_data)
    if (!module.find_method("logits") || !module.find_method("forward")) {
      return Status::InvalidArgument(
          "member '" + spec.name + "': " + spec.torchscript +
          " must define logits(x) (raw class scores, what training optimises) and forward(x) "
          "(probabilities, what is served)");
    }
    module.train();
    for (at::Tensor p : module.parameters()) p.requires_grad_(true);
    return module;
  } catch (const c10::Error& e) {
    return Status::InvalidArgument("member '" + spec.name + "': cannot load " + spec.torchscript +
                                   ": " + e.what_without_backtrace());
  }
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const OptimSpec& spec,
                                                       std::vector<at::Tensor> params) {
  if (spec.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        std::move(params), torch::optim::SGDOptions(spec.learning_rate)
                               .momentum(0.9)
                               .weight_decay(spec.weight_decay));
  }
  return std::make_unique<torch::optim::Adam>(
      std::move(params),
      torch::optim::AdamOptions(spec.learning_rate).weight_decay(spec.weight_decay));
}

// The optimizer's per-parameter state is keyed by the tensor's identity: in
// LibTorch 1.13 by the TensorImpl pointer printed as a string (what
// c10::guts::to_string gives), in 2.x by the pointer itself.
using OptimizerStateKey = std::remove_cv_t<std::remove_reference_t<
    decltype(std::declval<torch::optim::Optimizer&>().state())>>::key_type;

// (A template so that only the branch of the LibTorch at hand is compiled.)
template <typename Key = OptimizerStateKey>
Key StateKey(const at::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;
    key << param.unsafeGetTensorImpl();
    return key.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

// The name a packed unit's parameters are saved under in checkpoints:
// "packed:<member>+<member>+..." in packing order (no member name has ':' or
// '+'), so that a resume whose members were renamed or reordered finds no
// such key and says so, rather than handing one member's weights to another.
std::string PackedUnitName(const TrainConfig& config, const std::vector<size_t>& members) {
  std::string name = "packed:";
  for (size_t i = 0; i < members.size(); ++i) name += (i ? "+" : "") + config.members[members[i]].name;
  return name;
}

// A CPU copy (checkpoints and evaluations leave the device).
at::Tensor CpuCopy(const at::Tensor& t) { return t.is_cpu() ? t.clone() : t.to(at::kCPU); }

}  // namespace

at::Tensor CombineMembers(const std::vector<at::Tensor>& members, const std::string& combine) {
  at::Tensor stacked = at::stack(members);  // [M, N, C]
  if (combine == "majority_vote") {
    const int64_t classes = stacked.size(2);
    at::Tensor votes = at::one_hot(stacked.argmax(2), classes).to(at::kFloat);  // [M, N, C]
    return votes.mean(0);
  }
  return stacked.mean(0);
}

double LearningRateAt(const OptimSpec& spec, int64_t step, int64_t total_steps) {
  const double peak = spec.learning_rate;
  if (spec.schedule == "constant" || total_steps <= 1) return peak;
  const double warmup_steps = kOneCycleWarmup * static_cast<double>(total_steps);
  const double s = static_cast<double>(step);
  const double start = peak / kOneCycleStartDiv;
  if (s < warmup_steps) return start + (peak - start) * s / warmup_steps;
  const double end = start / kOneCycleFinalDiv;
  const double progress =
      std::min(1.0, (s - warmup_steps) / std::max(1.0, total_steps - 1 - warmup_steps));
  return end + (peak - end) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

EnsembleTrainer::EnsembleTrainer(const TrainConfig& config, int64_t total_steps,
                                 const c10::Device& device)
    : config_(config), total_steps_(total_steps), device_(device) {}

EnsembleTrainer::~EnsembleTrainer() = default;

StatusOr<std::unique_ptr<EnsembleTrainer>> EnsembleTrainer::Create(
    const TrainConfig& config, c10::intrusive_ptr<CollectiveGroup> group, int64_t total_steps,
    const c10::Device& device) {
  std::unique_ptr<EnsembleTrainer> trainer(new EnsembleTrainer(config, total_steps, device));
  for (const MemberSpec& spec : config.members) {
    ES_ASSIGN_OR_RETURN(torch::jit::Module module, LoadMember(spec, device));
    trainer->modules_.push_back(std::move(module));
  }
  ES_RETURN_IF_ERROR(trainer->BuildUnits());
  std::vector<at::Tensor> all;
  for (const Unit& unit : trainer->units_) {
    const std::string prefix =
        unit.packed ? PackedUnitName(config, unit.members) : config.members[unit.members[0]].name;
    for (const auto& named : unit.module.named_parameters()) {
      trainer->parameters_.push_back({prefix + "/" + named.name, named.value});
      all.push_back(named.value);
    }
  }
  trainer->optimizer_ = MakeOptimizer(config.optim, all);
  const auto bucket_bytes = static_cast<int64_t>(config.distributed.bucket_mb * 1024 * 1024);
  trainer->reducer_ = std::make_unique<GradientReducer>(
      std::move(group), std::move(all), std::max<int64_t>(1, bucket_bytes),
      std::chrono::milliseconds(config.distributed.collective_timeout_ms));
  return trainer;
}

Status EnsembleTrainer::BuildUnits() {
  std::vector<bool> packed(modules_.size(), false);
  for (const auto& [architecture, members] : MembersByArchitecture(config_)) {
    if (!config_.ensemble.pack_training || members.size() < 2) continue;
    std::vector<torch::jit::Module> group;
    for (size_t i : members) group.push_back(modules_[i]);
    StatusOr<torch::jit::Module> module = PackMembers(group);
    if (!module.ok()) {
      return Status(module.status().code(),
                    "packing the " + architecture + " members for training: " + module.status().message());
    }
    try {
      module->train();
      for (at::Tensor p : module->parameters()) p.requires_grad_(true);
    } catch (const c10::Error& e) {
      return Status::Internal("packing the " + architecture + " members for training: " + e.what_without_backtrace());
    }
    for (size_t i : members) packed[i] = true;
    units_.push_back({std::move(module).value(), members, true});
  }
  for (size_t i = 0; i < modules_.size(); ++i) {
    if (!packed[i]) units_.push_back({modules_[i], {i}, false});
  }
  return Status::Ok();
}

void EnsembleTrainer::SyncMembers() {
  if (synced_step_ == step_) return;  // nothing trained since the last copy
  torch::NoGradGuard no_grad;
  for (const Unit& unit : units_) {
    if (!unit.packed) continue;
    for (size_t k = 0; k < unit.members.size(); ++k) {
      // UnpackMember copies member k's weights out in the member's own layout.
      StatusOr<torch::jit::Module> member = UnpackMember(unit.module, static_cast<int64_t>(k));
      // Fails only for a module PackMembers did not build; the rank's runner
      // catches the exception and fails the rank, naming it.
      if (!member.ok()) throw std::runtime_error("unpacking a trained member: " + member.status().message());
      torch::jit::Module& target = modules_[unit.members[k]];
      for (const auto& named : member->named_parameters()) target.attr(named.name).toTensor().copy_(named.value);
    }
  }
  synced_step_ = step_;
}

std::vector<std::string> EnsembleTrainer::PackedGroups() const {
  std::vector<std::string> groups;
  for (const Unit& unit : units_) {
    if (unit.packed) {
      groups.push_back(config_.members[unit.members[0]].architecture + " (" + std::to_string(unit.members.size()) +
                       " members)");
    }
  }
  return groups;
}

std::vector<torch::jit::Module>& EnsembleTrainer::modules() {
  SyncMembers();
  return modules_;
}

Status EnsembleTrainer::SyncInitialParameters() {
  synced_step_ = -1;  // the broadcast changes the packed parameters
  return reducer_->BroadcastParameters();
}

StatusOr<StepStats> EnsembleTrainer::Step(const at::Tensor& host_images, const at::Tensor& host_labels) {
  const SteadyClock::time_point start = SteadyClock::now();
  StepStats stats;
  stats.rows = host_images.size(0);
  stats.learning_rate = LearningRateAt(config_.optim, step_, total_steps_);
  try {
    const at::Tensor images = device_.is_cpu() ? host_images : host_images.to(device_);
    const at::Tensor labels = device_.is_cpu() ? host_labels : host_labels.to(device_);
    optimizer_->zero_grad();
    reducer_->PrepareForBackward();
    at::Tensor total;
    stats.members.resize(modules_.size());
    for (Unit& unit : units_) {
      at::Tensor logits = unit.module.get_method("logits")({images}).toTensor();  // packed: [B, M, classes]
      for (size_t k = 0; k < unit.members.size(); ++k) {
        const at::Tensor mine = unit.packed ? logits.select(1, static_cast<int64_t>(k)) : logits;
        at::Tensor loss = torch::nn::functional::cross_entropy(mine, labels);
        total = total.defined() ? total + loss : loss;
        stats.members[unit.members[k]] = {loss.item<double>(), mine.argmax(1).eq(labels).sum().item<int64_t>()};
      }
    }
    total.backward();
  } catch (const c10::Error& e) {
    return Status::Internal("training step " + std::to_string(step_) + ": " +
                            e.what_without_backtrace());
  }
  ES_RETURN_IF_ERROR(reducer_->Finish());
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(stats.learning_rate);
  optimizer_->step();
  ++step_;
  stats.allreduce_seconds = reducer_->last_wait_seconds();
  stats.step_seconds = SecondsSince(start);
  return stats;
}

double Median(std::vector<double> times) {
  if (times.empty()) return 0;
  std::sort(times.begin(), times.end());
  const size_t mid = times.size() / 2;
  return times.size() % 2 == 1 ? times[mid] : (times[mid - 1] + times[mid]) / 2;
}

Evaluation EnsembleTrainer::Evaluate(const at::Tensor& images, int64_t batch_rows) {
  SyncMembers();
  torch::NoGradGuard no_grad;
  Evaluation result;
  for (torch::jit::Module& module : modules_) {
    module.eval();
    std::vector<at::Tensor> parts;
    std::vector<double> full, all;  // seconds per row of each batch
    for (int64_t begin = 0; begin < images.size(0); begin += batch_rows) {
      const int64_t n = std::min(batch_rows, images.size(0) - begin);
      at::Tensor rows = images.narrow(0, begin, n);
      if (!device_.is_cpu()) rows = rows.to(device_);
      if (begin == 0) module.forward({rows});  // warm-up, untimed
      const SteadyClock::time_point start = SteadyClock::now();
      at::Tensor probs = module.forward({rows}).toTensor();  // the served entry point
      parts.push_back(probs.is_cpu() ? probs : probs.to(at::kCPU));  // (the copy waits for a GPU)
      const double per_row = SecondsSince(start) / static_cast<double>(n);
      all.push_back(per_row);
      if (n == batch_rows) full.push_back(per_row);
    }
    module.train();
    result.members.push_back(parts.empty() ? at::empty({0, 0}) : at::cat(parts));
    result.member_seconds_per_row.push_back(Median(full.empty() ? all : full));
  }
  result.ensemble = CombineMembers(result.members, config_.ensemble.combine);
  return result;
}

void EnsembleTrainer::MoveToCpu() {
  if (device_.is_cpu()) return;
  SyncMembers();
  for (torch::jit::Module& module : modules_) module.to(at::kCPU);
  for (Unit& unit : units_) {
    if (unit.packed) unit.module.to(at::kCPU);
  }
  device_ = c10::Device(c10::DeviceType::CPU);
}

std::vector<std::pair<std::string, at::Tensor>> EnsembleTrainer::Snapshot() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const Named& p : parameters_) {
    out.emplace_back("param/" + p.key, CpuCopy(p.tensor.detach()));
    auto it = optimizer_->state().find(StateKey(p.tensor));
    if (it == optimizer_->state().end()) continue;  // before the first step
    if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) {
      out.emplace_back("adam/" + p.key + "/exp_avg", CpuCopy(adam->exp_avg()));
      out.emplace_back("adam/" + p.key + "/exp_avg_sq", CpuCopy(adam->exp_avg_sq()));
      out.emplace_back("adam/" + p.key + "/step", at::scalar_tensor(adam->step(), at::kLong));
    } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
      out.emplace_back("sgd/" + p.key + "/momentum", CpuCopy(sgd->momentum_buffer()));
    }
  }
  return out;
}

Status EnsembleTrainer::Restore(const std::map<std::string, at::Tensor>& tensors, int64_t step) {
  auto find = [&](const std::string& key) -> const at::Tensor* {
    auto it = tensors.find(key);
    return it == tensors.end() ? nullptr : &it->second;
  };
  torch::NoGradGuard no_grad;
  // Optimizer state lives where its parameter does.
  auto on_device = [&](const at::Tensor& t) { return device_.is_cpu() ? t.clone() : t.to(device_); };
  for (const Named& p : parameters_) {
    const at::Tensor* saved = find("param/" + p.key);
    if (saved == nullptr || !saved->sizes().equals(p.tensor.sizes())) {
      return Status::InvalidArgument(
          "the checkpoint does not match this config: parameter '" + p.key +
          (saved ? "' has another shape" : "' is missing") +
          " (was it written for other members, or with packing otherwise: ensemble.pack_training / "
          "--pack-training?)");
    }
    p.tensor.detach().copy_(*saved);
    const OptimizerStateKey key = StateKey(p.tensor);
    if (const at::Tensor* avg = find("adam/" + p.key + "/exp_avg")) {
      const at::Tensor* avg_sq = find("adam/" + p.key + "/exp_avg_sq");
      const at::Tensor* steps = find("adam/" + p.key + "/step");
      if (avg_sq == nullptr || steps == nullptr) {
        return Status::InvalidArgument("the checkpoint's Adam state of '" + p.key +
                                       "' is incomplete");
      }
      auto state = std::make_unique<torch::optim::AdamParamState>();
      state->exp_avg(on_device(*avg));
      state->exp_avg_sq(on_device(*avg_sq));
      state->step(steps->item<int64_t>());
      optimizer_->state()[key] = std::move(state);
    } else if (const at::Tensor* momentum = find("sgd/" + p.key + "/momentum")) {
      auto state = std::make_unique<torch::optim::SGDParamState>();
      state->momentum_buffer(on_device(*momentum));
      optimizer_->state()[key] = std::move(state);
    }
  }
  step_ = step;
  synced_step_ = -1;
  return Status::Ok();
}

}  // namespace es
