// MixSeed: SplitMix64's finaliser, for the training data's pure functions
// of (seed, epoch, position): inputs that differ in one bit give unrelated
// outputs, so derived seeds and draws never correlate.
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>

namespace es {

inline uint64_t MixSeed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace es
