#include "training/synthetic_data.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/randperm.h>

namespace es {
namespace {

// Fixed so that every data set ever made shares one set of prototypes.
constexpr uint64_t kPrototypeSeed = 0x5eed'0f'9a55'10a5ULL;
constexpr double kPrototypeAmplitude = 0.2;
constexpr double kNoiseSigma = 0.5;

// splitmix64: decorrelates nearby user seeds (1, 2, 3...) from each other and
// from kPrototypeSeed.
uint64_t MixSeed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

at::Tensor Prototypes() {
  at::Generator gen = at::detail::createCPUGenerator(kPrototypeSeed);
  const at::Tensor unit = at::rand({kNumClasses, 1, kImageSide, kImageSide}, gen, at::kFloat);
  return unit.sub(0.5).mul_(2.0 * kPrototypeAmplitude).add_(0.5);
}

}  // namespace

Dataset MakeSyntheticDataset(int64_t rows, uint64_t seed) {
  // Made once (thread-safe static init), read-only after; leaked so that no
  // tensor outlives LibTorch's allocator at exit.
  static const at::Tensor* const prototypes = new at::Tensor(Prototypes());
  at::Generator gen = at::detail::createCPUGenerator(MixSeed(seed));
  // A balanced label column, shuffled: arange % 10 in a random order.
  const at::Tensor order = at::randperm(rows, gen, at::kLong);
  at::Tensor labels = at::arange(rows, at::kLong).remainder_(kNumClasses).index_select(0, order);
  const at::Tensor noise = at::randn({rows, 1, kImageSide, kImageSide}, gen, at::kFloat);
  at::Tensor images = prototypes->index_select(0, labels).add_(noise, kNoiseSigma).clamp_(0.0, 1.0);
  return Dataset{std::move(images), std::move(labels)};
}

}  // namespace es
