// MakeSyntheticDataset: a Fashion-MNIST shaped stand-in for tests and for
// machines without the dataset-fashion-mnist package.
//
// Each class k has one fixed 28x28 prototype, drawn once from a constant seed,
// so every call (any rows, any seed) shares the same ten prototypes: a train
// set and a test set are two calls with different seeds. A row is
// clamp(prototype[label] + noise, 0, 1) with Gaussian noise (sigma 0.5) drawn
// from `seed`; prototypes are 0.5 +- 0.2 per pixel, close enough for the noise
// to matter (a small MLP reaches ~99% in about a hundred Adam steps, not at
// the first one) and far enough apart to be learnable.
//
// Guarantees: Dataset's invariants; labels are balanced (each class has
// floor(rows/10) or ceil(rows/10) rows) in a shuffled order; the result is a
// pure function of (rows, seed) for a given LibTorch version.
//
// Thread safety: uses only private generators; safe to call concurrently.
#pragma once

#include <cstdint>

#include "training/dataset.h"

namespace es {

// rows >= 0.
Dataset MakeSyntheticDataset(int64_t rows, uint64_t seed);

}  // namespace es
