// The model zoo: small TorchScript architectures built in C++ (no Python),
// used by the demo-repository tool and, later, by the training command, so
// what is trained is exactly what is served.
//
// Every architecture takes FP32 input [B, 1, 28, 28] (Fashion-MNIST shaped)
// and defines two methods:
//   logits(x)  -> [B, 10] raw scores (what training optimises)
//   forward(x) -> [B, 10] softmax probabilities (what serving returns)
// Weights are initialised deterministically from `seed`.
//
// Each architecture is written down once, as data (ZooDescription: its
// layers in order); the plain builder here and the packer
// (packed_model.h, M members in one module) both generate their TorchScript
// from that description, so they cannot drift apart.
//
// Thread safety: pure functions; the descriptions are immutable.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace at {
class Tensor;
}
namespace torch::jit {
struct Module;
}

namespace es {

// The architecture names the zoo knows: "mlp", "wide_mlp", "cnn" (tiny, for
// serving tests), "convnet" and "convnet_wide" (the ones worth training, see
// model_zoo.cc). A module is built in eval mode; train() switches it to
// training mode (dropout, where an architecture has it, follows the mode).
std::vector<std::string> ZooArchitectures();

// Builds a fresh module. InvalidArgument (listing the known names) for an
// unknown architecture; Internal, naming the architecture, when LibTorch
// fails to build it.
StatusOr<torch::jit::Module> BuildZooModel(const std::string& architecture, uint64_t seed);

// ---- The architectures as data, for the builders (here and packed_model.h) ----

// One step of logits(), applied to `x` in the order of ZooDescription::layers.
struct ZooLayer {
  enum class Kind {
    kNormalize,  // (x - 0.2860) / 0.3530: Fashion-MNIST's mean and std, so clients send plain pixels
    kConv,       // 3x3 convolution (stride 1, padding 1), 2x2 max pool, relu (ZooConvSource)
    kFlatten,    // [B, C, H, W] -> [B, C*H*W]
    kLinear,     // x W^T + b, then relu if `relu`
    kDropout,    // drops `dropout` of the units while `self.training`
  };
  Kind kind = Kind::kFlatten;
  std::string name;  // kConv, kLinear: the parameters are "<name>_w" and "<name>_b"
  int64_t out = 0;   // kConv: output channels; kLinear: output features
  int64_t in = 0;    // kConv: input channels; kLinear: input features
  bool relu = false;
  double dropout = 0.0;

  bool HasParameters() const { return kind == Kind::kConv || kind == Kind::kLinear; }
  // kConv: {out, in, 3, 3}; kLinear: {out, in}. The bias is always {out}.
  std::vector<int64_t> WeightShape() const;
};

struct ZooDescription {
  std::string architecture;  // BuildZooModel's name, e.g. "convnet"
  std::string type_name;     // the module's TorchScript type name, e.g. "ConvNet"
  std::vector<ZooLayer> layers;
};

// Every architecture's description, in ZooArchitectures()'s order.
const std::vector<ZooDescription>& ZooDescriptions();

// The TorchScript lines (4-space indented, reading and assigning `x`) of one
// layer in a plain zoo module, and the whole plain logits() method.
std::string ZooLayerSource(const ZooLayer& layer);
// A kConv layer's lines around `conv` (a conv2d call): the 2x2 max pool of
// its answer, then relu; the same values as relu-then-max_pool2d (relu is
// monotone, so it commutes with the max exactly, and runs on a quarter of
// the values). In eval mode (serving) the pool is two strided maxima, of
// the even and odd rows, then of the result's even and odd columns (the
// zoo's convolutions see even sides, 28 and 14), which LibTorch 1.13
// computes about 10x faster on a CPU than max_pool2d, and faster than the
// maximum of the four strided quarters (half the reads of scattered
// elements, two temporaries fewer with relu in place: in process a
// convnet's forward 7-11% faster); in train mode it stays max_pool2d, whose
// backward is the faster one, on the convolution's answer made channels-last
// first (memory_format=2: the C++ script compiler has no torch.channels_last):
// LibTorch 1.13's CPU max_pool2d is vectorised for that layout only, 4-6x
// faster forward and backward, and the next convolution then runs
// channels-last too (the packed models' grouped one as well). The same
// values (bit for bit where we compared) and the same gradients up to float
// rounding; the recipe's step about 20% faster. Serving keeps the default
// layout, where the strided maxima are faster.
std::string ZooConvSource(const std::string& conv);
std::string ZooLogitsSource(const ZooDescription& description);

// The one way zoo-shaped modules are put together: a module of type
// `type_name` holding `parameters` (registered in order, detached and with
// requires_grad on, as training needs), a bool `training` attribute (which
// train() and eval() switch, and dropout reads), logits() from
// `logits_source` and forward(x) = softmax(logits(x), softmax_dim); returned
// in eval mode. Throws c10::Error when LibTorch refuses the source.
torch::jit::Module AssembleZooModule(const std::string& type_name,
                                     const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                                     const std::string& logits_source, int64_t softmax_dim);

}  // namespace es
