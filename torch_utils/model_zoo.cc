#include "torch_utils/model_zoo.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/script.h>

#include <cmath>
#include <string>

namespace es {
namespace {

ZooLayer Layer(ZooLayer::Kind kind, std::string name = "", int64_t out = 0, int64_t in = 0) {
  ZooLayer layer;
  layer.kind = kind;
  layer.name = std::move(name);
  layer.out = out;
  layer.in = in;
  return layer;
}
ZooLayer Normalize() { return Layer(ZooLayer::Kind::kNormalize); }
ZooLayer Conv(std::string name, int64_t out, int64_t in) {
  return Layer(ZooLayer::Kind::kConv, std::move(name), out, in);
}
ZooLayer Flatten() { return Layer(ZooLayer::Kind::kFlatten); }
ZooLayer Linear(std::string name, int64_t out, int64_t in, bool relu) {
  ZooLayer layer = Layer(ZooLayer::Kind::kLinear, std::move(name), out, in);
  layer.relu = relu;
  return layer;
}
ZooLayer Dropout(double p) {
  ZooLayer layer = Layer(ZooLayer::Kind::kDropout);
  layer.dropout = p;
  return layer;
}

// The zoo. The parameters are initialised in layer order (weight, then
// bias), which fixes what a seed gives: reordering layers here changes
// every model built from a seed.
//
// convnet and convnet_wide are the training-grade CNNs: they normalise plain
// [0, 1] pixels themselves, so clients send pixels and the served model sees
// exactly what it was trained on. 3x3 convolutions, each followed by a 2x2
// max pool (28 -> 14 -> 7), and a 128-unit hidden layer. convnet (16, 32,
// no dropout): about 92.4% test accuracy on Fashion-MNIST after 10 epochs,
// at ~8.5 s per epoch on two ranks. convnet_wide (32, 64, dropout 0.3):
// about 2.3x the compute for about 0.5 points more (92.8-93.1%), but in an
// ensemble four of them are no better than four convnets (93.45% both), so
// the training benchmark uses convnets.
std::vector<ZooDescription> MakeDescriptions() {
  return {
      {"mlp", "MLP", {Flatten(), Linear("fc1", 256, 784, true), Linear("fc2", 10, 256, false)}},
      {"wide_mlp",
       "WideMLP",
       {Flatten(), Linear("fc1", 512, 784, true), Linear("fc2", 256, 512, true), Linear("fc3", 10, 256, false)}},
      {"cnn", "CNN", {Conv("conv1", 8, 1), Conv("conv2", 16, 8), Flatten(), Linear("fc", 10, int64_t{16} * 7 * 7, false)}},
      {"convnet",
       "ConvNet",
       {Normalize(), Conv("conv1", 16, 1), Conv("conv2", 32, 16), Flatten(), Linear("fc1", 128, int64_t{32} * 7 * 7, true),
        Linear("fc2", 10, 128, false)}},
      {"convnet_wide",
       "ConvNetWide",
       {Normalize(), Conv("conv1", 32, 1), Conv("conv2", 64, 32), Flatten(), Linear("fc1", 128, int64_t{64} * 7 * 7, true),
        Dropout(0.3), Linear("fc2", 10, 128, false)}},
  };
}

// U(-bound, bound) from the module's own generator.
torch::Tensor Uniform(at::IntArrayRef shape, double bound, at::Generator& gen) {
  return torch::rand(shape, gen, torch::kFloat32) * (2.0 * bound) - bound;
}

// Initialised as torch.nn.Linear / Conv2d do by default: kaiming_uniform_(a=sqrt(5))
// on the weight and U(-1/sqrt(fan_in), 1/sqrt(fan_in)) on the bias, which
// both come down to the same bound.
std::vector<std::pair<std::string, torch::Tensor>> InitialParameters(const ZooDescription& description,
                                                                     at::Generator& gen) {
  std::vector<std::pair<std::string, torch::Tensor>> parameters;
  for (const ZooLayer& layer : description.layers) {
    if (!layer.HasParameters()) continue;
    const std::vector<int64_t> shape = layer.WeightShape();
    int64_t fan_in = 1;
    for (size_t i = 1; i < shape.size(); ++i) fan_in *= shape[i];
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    parameters.emplace_back(layer.name + "_w", Uniform(shape, bound, gen));
    parameters.emplace_back(layer.name + "_b", Uniform({layer.out}, bound, gen));
  }
  return parameters;
}

}  // namespace

std::vector<int64_t> ZooLayer::WeightShape() const {
  if (kind == Kind::kConv) return {out, in, 3, 3};
  return {out, in};
}

const std::vector<ZooDescription>& ZooDescriptions() {
  static const std::vector<ZooDescription> descriptions = MakeDescriptions();
  return descriptions;
}

std::vector<std::string> ZooArchitectures() {
  std::vector<std::string> names;
  for (const ZooDescription& description : ZooDescriptions()) names.push_back(description.architecture);
  return names;
}

std::string ZooLayerSource(const ZooLayer& layer) {
  const std::string w = "self." + layer.name + "_w", b = "self." + layer.name + "_b";
  switch (layer.kind) {
    case ZooLayer::Kind::kNormalize:
      return "    x = (x - 0.2860) / 0.3530\n";
    case ZooLayer::Kind::kConv:
      return ZooConvSource("torch.conv2d(x, " + w + ", " + b + ", [1, 1], [1, 1])");
    case ZooLayer::Kind::kFlatten:
      return "    x = torch.flatten(x, 1)\n";
    case ZooLayer::Kind::kLinear: {
      const std::string linear = "torch.linear(x, " + w + ", " + b + ")";
      return "    x = " + (layer.relu ? "torch.relu(" + linear + ")" : linear) + "\n";
    }
    case ZooLayer::Kind::kDropout:
      // `self.training`, which Module::train() and eval() switch; served
      // models are saved in eval mode, so serving is deterministic.
      return "    x = torch.dropout(x, " + std::to_string(layer.dropout) + ", self.training)\n";
  }
  return "";
}

// The script's `memory_format=2` (it has no name for the layout).
static_assert(static_cast<int>(c10::MemoryFormat::ChannelsLast) == 2, "ZooConvSource's memory_format=2");

std::string ZooConvSource(const std::string& conv) {
  return "    x = " + conv +
         "\n"
         "    if self.training:\n"
         "        x = x.contiguous(memory_format=2)\n"
         "        x = torch.relu(torch.max_pool2d(x, [2, 2]))\n"
         "    else:\n"
         "        x = torch.maximum(x[:, :, 0::2], x[:, :, 1::2])\n"
         "        x = torch.relu_(torch.maximum(x[:, :, :, 0::2], x[:, :, :, 1::2]))\n";
}

std::string ZooLogitsSource(const ZooDescription& description) {
  std::string source = "\ndef logits(self, x):\n";
  for (const ZooLayer& layer : description.layers) source += ZooLayerSource(layer);
  return source + "    return x\n";
}

torch::jit::Module AssembleZooModule(const std::string& type_name,
                                     const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                                     const std::string& logits_source, int64_t softmax_dim) {
  torch::jit::Module m(type_name);
  // register_parameter does not touch requires_grad; training needs it on
  // (and a leaf: detach, in case the caller computed the value with grad on).
  for (const auto& [name, value] : parameters) {
    m.register_parameter(name, value.detach().requires_grad_(true), /*is_buffer=*/false);
  }
  // A module made in C++ has no `training` attribute of its own (train() and
  // eval() then do nothing): give it one, so that dropout can follow it.
  m.register_attribute("training", c10::BoolType::get(), true);
  m.define(logits_source);
  // The serving entry point: probabilities over the 10 classes, so that
  // ensemble members can be averaged as they are.
  m.define("\ndef forward(self, x):\n    return torch.softmax(self.logits(x), " + std::to_string(softmax_dim) + ")\n");
  m.eval();
  return m;
}

StatusOr<torch::jit::Module> BuildZooModel(const std::string& architecture, uint64_t seed) {
  for (const ZooDescription& description : ZooDescriptions()) {
    if (description.architecture != architecture) continue;
    try {
      // A private generator rather than torch::manual_seed: building a model
      // must not reseed (or race on) the process-wide generator that training uses.
      at::Generator gen = at::detail::createCPUGenerator(seed);
      return AssembleZooModule(description.type_name, InitialParameters(description, gen), ZooLogitsSource(description),
                               /*softmax_dim=*/1);
    } catch (const c10::Error& e) {
      return Status::Internal("building zoo architecture '" + architecture + "': " + e.what_without_backtrace());
    }
  }
  std::string known;
  for (const std::string& name : ZooArchitectures()) known += (known.empty() ? "" : ", ") + name;
  return Status::InvalidArgument("unknown zoo architecture '" + architecture + "' (known: " + known + ")");
}

}  // namespace es
