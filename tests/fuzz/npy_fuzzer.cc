// Fuzz target: ensemble-cli's .npy reader (es::cli::ParseNpy, what ReadNpy
// runs on a file's bytes).
//
// Any bytes must give either an array or an error message; an array must be
// self-consistent: a supported dtype, no negative dim, and exactly
// product(shape) values (computed exactly, fuzz_math.h, so a shape whose
// product wraps cannot pass), each read from inside the buffer.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "clients/cli/input_source.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_math.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto array = es::cli::ParseNpy(bytes, "fuzz.npy");
  if (!array.ok()) {
    FUZZ_CHECK(!array.status().message().empty(), "no array and no error");
    return 0;
  }
  FUZZ_CHECK(array->descr.size() >= 3, "dtype '%s' accepted", array->descr.c_str());
  for (int64_t d : array->shape) FUZZ_CHECK(d >= 0, "dim %lld accepted", static_cast<long long>(d));
  const std::optional<uint64_t> count = es::fuzz::ExactBytes(array->shape.data(), array->shape.size(), 1);
  FUZZ_CHECK(count && *count == array->values.size(), "%zu values for a shape of %zu dims whose product is %s",
             array->values.size(), array->shape.size(), count ? std::to_string(*count).c_str() : "2^64 or more");
  FUZZ_CHECK(array->values.size() <= size, "%zu values from %zu bytes", array->values.size(), size);
  return 0;
}
