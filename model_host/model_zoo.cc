#include "model_host/model_zoo.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/script.h>

#include <cmath>
#include <stdexcept>
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
std::string ConvNetLogits(double dropout) {
  std::string source = R"JIT(
def logits(self, x):
    x = (x - 0.2860) / 0.3530
    x = torch.relu(torch.conv2d(x, self.conv1_w, self.conv1_b, [1, 1], [1, 1]))
    x = torch.max_pool2d(x, [2, 2])
    x = torch.relu(torch.conv2d(x, self.conv2_w, self.conv2_b, [1, 1], [1, 1]))
    x = torch.max_pool2d(x, [2, 2])
    x = torch.flatten(x, 1)
    x = torch.relu(torch.linear(x, self.fc1_w, self.fc1_b))
)JIT";
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

// Two 3x3 convolutions (`c1`, `c2` filters, each followed by a 2x2 max
// pool) and a 128-unit hidden layer. convnet (16, 32, no dropout): about
// 92.5% test accuracy on Fashion-MNIST after 6 epochs, at ~20 s per epoch on
// one core. convnet_wide (32, 64, dropout 0.3): about 2.3x the compute for
// about 0.5 points more (92.9-93.1% after 10 epochs).
torch::jit::Module BuildConvNet(at::Generator& gen, const char* name, int64_t c1, int64_t c2, double dropout) {
  torch::jit::Module m(name);
  AddParameters(m, "conv1", {c1, 1, 3, 3}, gen);
  AddParameters(m, "conv2", {c2, c1, 3, 3}, gen);
  AddParameters(m, "fc1", {128, c2 * 7 * 7}, gen);
  AddParameters(m, "fc2", {10, 128}, gen);
  return Finish(std::move(m), ConvNetLogits(dropout));
}

}  // namespace

std::vector<std::string> ZooArchitectures() { return {"mlp", "wide_mlp", "cnn", "convnet", "convnet_wide"}; }

torch::jit::Module BuildZooModel(const std::string& architecture, uint64_t seed) {
  // A private generator rather than torch::manual_seed: building a model must
  // not reseed (or race on) the process-wide generator that training uses.
  at::Generator gen = at::detail::createCPUGenerator(seed);
  if (architecture == "mlp") return BuildMlp(gen);
  if (architecture == "wide_mlp") return BuildWideMlp(gen);
  if (architecture == "cnn") return BuildCnn(gen);
  if (architecture == "convnet") return BuildConvNet(gen, "ConvNet", 16, 32, 0.0);
  if (architecture == "convnet_wide") return BuildConvNet(gen, "ConvNetWide", 32, 64, 0.3);
  throw std::invalid_argument("unknown zoo architecture '" + architecture +
                              "' (known: mlp, wide_mlp, cnn, convnet, convnet_wide)");
}

}  // namespace es
