#include "training/demo/demo_training.h"

#include <torch/torch.h>

#include <algorithm>
#include <vector>

namespace es {
namespace {

constexpr int64_t kBatch = 64;

}  // namespace

void TrainDemoMember(torch::jit::Module& module, const Dataset& train, int64_t steps, uint64_t seed) {
  module.train();
  std::vector<at::Tensor> parameters;
  for (at::Tensor p : module.parameters()) {
    p.requires_grad_(true);
    parameters.push_back(p);
  }
  torch::optim::Adam optimizer(parameters, torch::optim::AdamOptions(1e-3));
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (int64_t step = 0; step < steps; ++step) {
    const at::Tensor rows = torch::randint(train.size(), {kBatch}, generator, torch::kLong);
    const at::Tensor images = train.images.index_select(0, rows);
    const at::Tensor labels = train.labels.index_select(0, rows);
    const at::Tensor logits = module.get_method("logits")({images}).toTensor();
    const at::Tensor loss = torch::nn::functional::cross_entropy(logits, labels);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
  for (at::Tensor p : parameters) p.requires_grad_(false);
  module.eval();
}

double DemoAccuracy(torch::jit::Module& module, const Dataset& test, int64_t rows) {
  const int64_t n = std::min(rows, test.size());
  if (n <= 0) return 0;
  torch::NoGradGuard no_grad;
  const at::Tensor probabilities = module.forward({test.images.slice(0, 0, n)}).toTensor();
  return probabilities.argmax(1).eq(test.labels.slice(0, 0, n)).sum().item<int64_t>() / static_cast<double>(n);
}

}  // namespace es
