// Dataset: an in-memory classification data set for ensemble-train, the
// common currency of the Fashion-MNIST reader, the synthetic generator, the
// batch loader and the evaluation code.
//
// Invariants (every producer in this folder guarantees them):
//   images  [N, 1, 28, 28] float32, contiguous, pixel values in [0, 1]. Not
//           normalised: the trained models normalise inside their forward(),
//           so the served models take plain pixels, the same as this tensor.
//   labels  [N] int64, contiguous, each in [0, kNumClasses).
//
// Thread safety: a value of tensor handles. Copies share storage; readers on
// many threads are fine as long as nobody writes into the tensors in place.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace es {

inline constexpr int64_t kNumClasses = 10;
inline constexpr int64_t kImageSide = 28;

struct Dataset {
  at::Tensor images;  // [N, 1, 28, 28] float32 in [0, 1]
  at::Tensor labels;  // [N] int64 in [0, 10)

  // N; 0 for a default-constructed (empty) Dataset.
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

}  // namespace es
