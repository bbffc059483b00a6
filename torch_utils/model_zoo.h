// The model zoo: small TorchScript architectures built in C++ (no Python),
// used by the demo-repository tool and, later, by the training command, so
// what is trained is exactly what is served.
//
// Every architecture takes FP32 input [B, 1, 28, 28] (Fashion-MNIST shaped)
// and defines two methods:
//   logits(x)  -> [B, 10] raw scores (what training optimises)
//   forward(x) -> [B, 10] softmax probabilities (what serving returns)
// Weights are initialised deterministically from `seed`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

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

}  // namespace es
