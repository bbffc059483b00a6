// Checked size arithmetic: every product of dims and item sizes, and every
// sum of byte counts, that comes from outside the process (a client's shape,
// a host's completion, a config file) goes through these, so a wrapped
// product can never pass for a small one.
//
//   std::optional<uint64_t> bytes = es::TensorBytes(shape, DataTypeSize(type));
//   if (!bytes) return Status::InvalidArgument("shape ... overflows");
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>

namespace es {

// a * b, or nullopt when it does not fit in 64 bits.
inline std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a + b, or nullopt when it does not fit in 64 bits.
inline std::optional<uint64_t> CheckedAdd(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// The product of `dims` (the element count); nullopt when a dim is negative
// or the product does not fit in 64 bits. An empty shape is one element.
// `Dims` is any sequence of int64_t (std::vector, std::span, at::IntArrayRef):
// a template rather than std::span because the LibTorch sources that use it
// are parsed as C++17 by the thread-safety analysis
// (scripts/check_thread_safety.py says why).
template <typename Dims>
std::optional<uint64_t> ElementCount(const Dims& dims) {
  uint64_t n = 1;
  for (const int64_t d : dims) {
    if (d < 0) return std::nullopt;
    const auto next = CheckedMul(n, static_cast<uint64_t>(d));
    if (!next) return std::nullopt;
    n = *next;
  }
  return n;
}

// ElementCount(dims) * item_size, or nullopt on a negative dim or overflow.
template <typename Dims>
std::optional<uint64_t> TensorBytes(const Dims& dims, uint64_t item_size) {
  const auto n = ElementCount(dims);
  return n ? CheckedMul(*n, item_size) : std::nullopt;
}

// Whether [offset, offset + bytes) lies inside [region, region + capacity),
// without any sum that could wrap.
inline bool RangeInside(uint64_t offset, uint64_t bytes, uint64_t region, uint64_t capacity) {
  return offset >= region && offset - region <= capacity && bytes <= capacity - (offset - region);
}

}  // namespace es
