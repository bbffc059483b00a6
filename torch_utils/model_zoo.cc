#include "torch_utils/model_zoo.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/script.h>

#include <cmath>
#include <string>

namespace es {
namespace {

// Every model's serving entry point: probabilities over the 10 classes, so
// that ensemble members can be averaged as they are.
constexpr const char* kForwardSource = R"JIT(
def forward(self, x):
    return torch.softmax(self.logits(x), 1)
)JIT";

constexpr const char* kMlpLogits = R"JIT(
def logits(self, x):
    x = torch.flatten(x, 1)
    x = torch.relu(torch.linear(x, self.fc1_w, self.fc1_b))
    return torch.linear(x, self.fc2_w, self.fc2_b)
)JIT";

constexpr const char* kWideMlpLogits = R"JIT(
def logits(self, x):
    x = torch.flatten(x, 1)
    x = torch.relu(torch.linear(x, self.fc1_w, self.fc1_b))
    x = torch.relu(torch.linear(x, self.fc2_w, self.fc2_b))
    return torch.linear(x, self.fc3_w, self.fc3_b)
)JIT";

constexpr const char* kCnnLogits = R"JIT(
def logits(self, x):
    x = torch.relu(torch.conv2d(x, self.conv1_w, self.conv1_b, [1, 1], [1, 1]))
    x = torch.max_pool2d(x, [2, 2])
    x = torch.relu(torch.conv2d(x, self.conv2_w, self.conv2_b, [1, 1], [1, 1]))
    x = torch.max_pool2d(x, [2, 2])
    x = torch.flatten(x, 1)
    return torch.linear(x, self.fc_w, self.fc_b)
)JIT";

// The training-grade CNNs: normalise plain [0, 1] pixels themselves
// (Fashion-MNIST's mean and standard deviation), so clients send pixels and
// the served model sees exactly what it was trained on. With `dropout` > 0,
// that share of the hidden layer's units is dropped while training
// (`self.training`, which Module::train() and eval() switch; served models
// are saved in eval mode, so serving is deterministic).
std::string ConvNetLogits(size_t convs, double dropout) {
  std::string source = "\ndef logits(self, x):\n    x = (x - 0.2860) / 0.3530\n";
  for (size_t i = 1; i <= convs; ++i) {
    const std::string conv = "self.conv" + std::to_string(i);
    source += "    x = torch.relu(torch.conv2d(x, " + conv + "_w, " + conv + "_b, [1, 1], [1, 1]))\n" +
              "    x = torch.max_pool2d(x, [2, 2])\n";
  }
  source += "    x = torch.flatten(x, 1)\n    x = torch.relu(torch.linear(x, self.fc1_w, self.fc1_b))\n";
  if (dropout > 0) source += "    x = torch.dropout(x, " + std::to_string(dropout) + ", self.training)\n";
  return source + "    return torch.linear(x, self.fc2_w, self.fc2_b)\n";
}

// U(-bound, bound) from the module's own generator.
torch::Tensor Uniform(at::IntArrayRef shape, double bound, at::Generator& gen) {
  return torch::rand(shape, gen, torch::kFloat32) * (2.0 * bound) - bound;
}

// Registers "<prefix>_w" and "<prefix>_b" as trainable parameters, initialised
// as torch.nn.Linear / Conv2d do by default: kaiming_uniform_(a=sqrt(5)) on
// the weight and U(-1/sqrt(fan_in), 1/sqrt(fan_in)) on the bias, which both
// come down to the same bound.
void AddParameters(torch::jit::Module& m, const std::string& prefix, at::IntArrayRef weight_shape,
                   at::Generator& gen) {
  int64_t fan_in = 1;
  for (size_t i = 1; i < weight_shape.size(); ++i) fan_in *= weight_shape[i];
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  // register_parameter does not touch requires_grad; training needs it on.
  m.register_parameter(prefix + "_w", Uniform(weight_shape, bound, gen).requires_grad_(true),
                       /*is_buffer=*/false);
  m.register_parameter(prefix + "_b", Uniform({weight_shape[0]}, bound, gen).requires_grad_(true),
                       /*is_buffer=*/false);
}

torch::jit::Module Finish(torch::jit::Module m, const std::string& logits_source) {
  // A module made in C++ has no `training` attribute of its own (train() and
  // eval() then do nothing): give it one, so that dropout can follow it.
  if (!m.hasattr("training")) m.register_attribute("training", c10::BoolType::get(), true);
  m.define(logits_source);
  m.define(kForwardSource);
  m.eval();
  return m;
}

torch::jit::Module BuildMlp(at::Generator& gen) {
  torch::jit::Module m("MLP");
  AddParameters(m, "fc1", {256, 784}, gen);
  AddParameters(m, "fc2", {10, 256}, gen);
  return Finish(std::move(m), kMlpLogits);
}

torch::jit::Module BuildWideMlp(at::Generator& gen) {
  torch::jit::Module m("WideMLP");
  AddParameters(m, "fc1", {512, 784}, gen);
  AddParameters(m, "fc2", {256, 512}, gen);
  AddParameters(m, "fc3", {10, 256}, gen);
  return Finish(std::move(m), kWideMlpLogits);
}

torch::jit::Module BuildCnn(at::Generator& gen) {
  torch::jit::Module m("CNN");
  AddParameters(m, "conv1", {8, 1, 3, 3}, gen);
  AddParameters(m, "conv2", {16, 8, 3, 3}, gen);
  AddParameters(m, "fc", {10, 16 * 7 * 7}, gen);
  return Finish(std::move(m), kCnnLogits);
}

// 3x3 convolutions with `channels` filters, each followed by a 2x2 max pool
// (28 -> 14 -> 7), and a 128-unit hidden layer. convnet (16, 32, no
// dropout): about 92.4% test accuracy on Fashion-MNIST after 10 epochs, at
// ~8.5 s per epoch on two ranks. convnet_wide (32, 64, dropout 0.3): about
// 2.3x the compute for about 0.5 points more (92.8-93.1%), but in an
// ensemble four of them are no better than four convnets (93.45% both), so
// the training benchmark uses convnets.
torch::jit::Module BuildConvNet(at::Generator& gen, const char* name, const std::vector<int64_t>& channels,
                                double dropout) {
  torch::jit::Module m(name);
  int64_t in = 1, side = 28;
  for (size_t i = 0; i < channels.size(); ++i) {
    AddParameters(m, "conv" + std::to_string(i + 1), {channels[i], in, 3, 3}, gen);
    in = channels[i];
    side /= 2;
  }
  AddParameters(m, "fc1", {128, in * side * side}, gen);
  AddParameters(m, "fc2", {10, 128}, gen);
  return Finish(std::move(m), ConvNetLogits(channels.size(), dropout));
}

}  // namespace

std::vector<std::string> ZooArchitectures() { return {"mlp", "wide_mlp", "cnn", "convnet", "convnet_wide"}; }

StatusOr<torch::jit::Module> BuildZooModel(const std::string& architecture, uint64_t seed) {
  try {
    // A private generator rather than torch::manual_seed: building a model must
    // not reseed (or race on) the process-wide generator that training uses.
    at::Generator gen = at::detail::createCPUGenerator(seed);
    if (architecture == "mlp") return BuildMlp(gen);
    if (architecture == "wide_mlp") return BuildWideMlp(gen);
    if (architecture == "cnn") return BuildCnn(gen);
    if (architecture == "convnet") return BuildConvNet(gen, "ConvNet", {16, 32}, 0.0);
    if (architecture == "convnet_wide") return BuildConvNet(gen, "ConvNetWide", {32, 64}, 0.3);
  } catch (const c10::Error& e) {
    return Status::Internal("building zoo architecture '" + architecture + "': " + e.what_without_backtrace());
  }
  std::string known;
  for (const std::string& name : ZooArchitectures()) known += (known.empty() ? "" : ", ") + name;
  return Status::InvalidArgument("unknown zoo architecture '" + architecture + "' (known: " + known + ")");
}

}  // namespace es
