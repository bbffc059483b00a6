// common/checked_math.h: every product and sum that could wrap is reported as
// nullopt (or false), at the exact edge where 64 bits stop being enough.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "common/checked_math.h"

namespace es {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
constexpr int64_t k2To32 = int64_t{1} << 32;
constexpr int64_t k2To62 = int64_t{1} << 62;

TEST(CheckedMathTest, MulAtTheEdge) {
  EXPECT_EQ(CheckedMul(0, kMax), 0u);
  EXPECT_EQ(CheckedMul(1, kMax), kMax);
  EXPECT_EQ(CheckedMul(uint64_t{1} << 32, (uint64_t{1} << 32) - 1), kMax - ((uint64_t{1} << 32) - 1));
  EXPECT_EQ(CheckedMul(uint64_t{1} << 32, uint64_t{1} << 32), std::nullopt);  // 2^64
  EXPECT_EQ(CheckedMul(kMax, 2), std::nullopt);
  EXPECT_EQ(CheckedMul(kMax / 3, 3), kMax);  // 2^64 - 1 is divisible by 3
  EXPECT_EQ(CheckedMul(kMax / 3 + 1, 3), std::nullopt);
}

TEST(CheckedMathTest, AddAtTheEdge) {
  EXPECT_EQ(CheckedAdd(kMax - 1, 1), kMax);
  EXPECT_EQ(CheckedAdd(kMax, 1), std::nullopt);
  EXPECT_EQ(CheckedAdd(kMax, 0), kMax);
  EXPECT_EQ(CheckedAdd(uint64_t{1} << 63, uint64_t{1} << 63), std::nullopt);
}

TEST(CheckedMathTest, ElementCount) {
  EXPECT_EQ(ElementCount(std::vector<int64_t>{}), 1u);  // a scalar
  EXPECT_EQ(ElementCount(std::vector<int64_t>{2, 3, 4}), 24u);
  EXPECT_EQ(ElementCount(std::vector<int64_t>{5, 0, 7}), 0u);
  EXPECT_EQ(ElementCount(std::vector<int64_t>{3, -1}), std::nullopt);
  EXPECT_EQ(ElementCount(std::vector<int64_t>{1, k2To32, k2To32}), std::nullopt);  // 2^64 wraps to 0 unchecked
  EXPECT_EQ(ElementCount(std::vector<int64_t>{k2To62, 4}), std::nullopt);          // 2^64 again
  EXPECT_EQ(ElementCount(std::vector<int64_t>{k2To62, 3}), uint64_t{3} << 62);     // still fits
  // A zero after an overflowing prefix does not rescue the product: the
  // running product overflowed first, which is what a caller must not trust.
  EXPECT_EQ(ElementCount(std::vector<int64_t>{k2To32, k2To32, 0}), std::nullopt);
  EXPECT_EQ(ElementCount(std::vector<int64_t>{std::numeric_limits<int64_t>::max(), 2}), kMax - 1);
}

TEST(CheckedMathTest, TensorBytes) {
  EXPECT_EQ(TensorBytes(std::vector<int64_t>{2, 3}, 4), 24u);
  EXPECT_EQ(TensorBytes(std::vector<int64_t>{}, 8), 8u);
  EXPECT_EQ(TensorBytes(std::vector<int64_t>{-2, 3}, 4), std::nullopt);
  // The element count fits (2^62) but times FP32's 4 bytes is 2^64, which an
  // unchecked product turns into 0 (and an empty payload would "match").
  EXPECT_EQ(TensorBytes(std::vector<int64_t>{k2To62}, 4), std::nullopt);
  // (2^62 + 4) * 4 = 2^64 + 16: unchecked, that is 16 bytes.
  EXPECT_EQ(TensorBytes(std::vector<int64_t>{k2To62 + 4}, 4), std::nullopt);
  EXPECT_EQ(TensorBytes(std::vector<int64_t>{k2To62 - 1}, 4), kMax - 3);  // 2^64 - 4: the last that fits
  EXPECT_EQ(TensorBytes(std::vector<int64_t>{1, k2To32, k2To32}, 4), std::nullopt);
  EXPECT_EQ(TensorBytes(std::vector<int64_t>{3}, 0), 0u);
}

TEST(CheckedMathTest, RangeInside) {
  // Region [100, 100 + 50).
  EXPECT_TRUE(RangeInside(100, 50, 100, 50));
  EXPECT_TRUE(RangeInside(120, 30, 100, 50));
  EXPECT_TRUE(RangeInside(150, 0, 100, 50));  // empty, at the end
  EXPECT_FALSE(RangeInside(120, 31, 100, 50));
  EXPECT_FALSE(RangeInside(99, 1, 100, 50));   // starts before
  EXPECT_FALSE(RangeInside(151, 0, 100, 50));  // starts past the end
  // Sums that would wrap: offset + bytes overflows to something small.
  EXPECT_FALSE(RangeInside(120, kMax - 10, 100, 50));
  EXPECT_FALSE(RangeInside(kMax, 2, 100, 50));
  EXPECT_TRUE(RangeInside(kMax - 1, 1, 0, kMax));
  EXPECT_FALSE(RangeInside(kMax, 1, 0, kMax));
}

}  // namespace
}  // namespace es
