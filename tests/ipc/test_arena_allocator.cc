#include "ipc/arena_allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace es::ipc {
namespace {

TEST(ArenaAllocatorTest, AllocatesAlignedDisjointRegions) {
  ArenaAllocator arena(1 << 20);
  auto a = arena.Allocate(100);
  auto b = arena.Allocate(1);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a % ArenaAllocator::kAlignment, 0u);
  EXPECT_EQ(*b % ArenaAllocator::kAlignment, 0u);
  EXPECT_TRUE(*b >= *a + 100 || *a >= *b + 1);
  EXPECT_EQ(arena.used_bytes(), 128u + 64u);
}

TEST(ArenaAllocatorTest, FailsWhenFullAndRecoversAfterFree) {
  ArenaAllocator arena(4096);
  auto a = arena.Allocate(4096);
  ASSERT_TRUE(a);
  EXPECT_FALSE(arena.Allocate(1));
  EXPECT_FALSE(arena.Allocate(1 << 20));
  arena.Free(*a);
  EXPECT_TRUE(arena.Allocate(4096));
}

TEST(ArenaAllocatorTest, CoalescesFreedNeighbours) {
  ArenaAllocator arena(64 * 3);
  auto a = arena.Allocate(64), b = arena.Allocate(64), c = arena.Allocate(64);
  ASSERT_TRUE(a && b && c);
  arena.Free(*a);
  arena.Free(*c);
  EXPECT_EQ(arena.largest_free_block(), 64u);
  arena.Free(*b);  // joins both sides
  EXPECT_EQ(arena.largest_free_block(), 64u * 3);
}

TEST(ArenaAllocatorTest, FragmentationRunEndsWhole) {
  constexpr uint64_t kCapacity = 8 << 20;
  ArenaAllocator arena(kCapacity);
  std::mt19937_64 rng(42);
  std::vector<uint64_t> live;
  for (int i = 0; i < 100000; ++i) {
    if (!live.empty() && (rng() % 2 == 0 || live.size() > 500)) {
      const size_t k = rng() % live.size();
      arena.Free(live[k]);
      live[k] = live.back();
      live.pop_back();
    } else {
      const uint64_t size = (rng() % 4 == 0) ? rng() % (256 << 10) : rng() % 4096;
      if (auto off = arena.Allocate(size)) live.push_back(*off);
    }
  }
  for (uint64_t off : live) arena.Free(off);
  EXPECT_EQ(arena.used_bytes(), 0u);
  EXPECT_EQ(arena.largest_free_block(), kCapacity);
}

TEST(ArenaAllocatorTest, ClearFreesEverything) {
  ArenaAllocator arena(1 << 16);
  ASSERT_TRUE(arena.Allocate(1000));
  ASSERT_TRUE(arena.Allocate(2000));
  arena.Clear();
  EXPECT_EQ(arena.used_bytes(), 0u);
  EXPECT_EQ(arena.largest_free_block(), uint64_t{1} << 16);
}

}  // namespace
}  // namespace es::ipc
