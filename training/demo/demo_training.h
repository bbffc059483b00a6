// A few hundred steps of training for the demo's members, so that what
// `scripts/demo.sh` shows means something (a real Fashion-MNIST image gets a
// plausible class) without the minutes a real run takes (ensemble-train).
//
// The members are zoo classifiers (model_zoo.h): logits(x) is what is
// trained (cross-entropy, Adam), forward(x) = softmax(logits(x)) is what the
// server runs, so the trained module is saved and served as it is.
//
// Thread safety: plain functions; LibTorch's own threads (one per
// --threads of the caller's choosing, default LibTorch's).
#pragma once

#include <torch/script.h>

#include <cstdint>

#include "training/dataset.h"

namespace es {

// `steps` Adam steps (learning rate 1e-3) on batches of 64 rows drawn from
// `train` with `seed`; leaves the module in eval mode.
void TrainDemoMember(torch::jit::Module& module, const Dataset& train, int64_t steps, uint64_t seed);

// The share of the first `rows` rows of `test` whose argmax of forward(x) is
// the label.
double DemoAccuracy(torch::jit::Module& module, const Dataset& test, int64_t rows);

}  // namespace es
