// The fuzz oracles' own size arithmetic, independent of the code under test
// (which uses common/checked_math.h): the exact product of dims times an item
// size in 128 bits. Exact means a zero dim anywhere makes it 0 even when the
// other dims alone would overflow 64 bits (the code under test may reject
// such a shape, but if it accepts one, 0 bytes is the right size).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace es::fuzz {

// product(dims[0..n)) * item, or nullopt when a dim is negative or the
// product is 2^64 or more.
inline std::optional<uint64_t> ExactBytes(const int64_t* dims, size_t n, uint64_t item) {
  for (size_t i = 0; i < n; ++i) {
    if (dims[i] < 0) return std::nullopt;
    if (dims[i] == 0) return 0;
  }
  unsigned __int128 bytes = item;
  for (size_t i = 0; i < n; ++i) {
    bytes *= static_cast<uint64_t>(dims[i]);  // < 2^64 * 2^63: no 128-bit overflow
    if (bytes >> 64) return std::nullopt;
  }
  return static_cast<uint64_t>(bytes);
}

}  // namespace es::fuzz
