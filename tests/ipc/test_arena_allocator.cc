#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "ipc/arena_allocator.h"

// Heap allocations counted, for the test that the allocator makes none in
// the steady state: this binary's operator new is replaced (not under the
// sanitizers, which bring their own).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ES_COUNTS_NEW 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ES_COUNTS_NEW 0
#endif
#endif
#ifndef ES_COUNTS_NEW
#define ES_COUNTS_NEW 1
#endif

#if ES_COUNTS_NEW
namespace {
std::atomic<uint64_t> g_news{0};
}  // namespace
void* operator new(std::size_t bytes) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

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

// An Allocate/Free pair runs for every member call the router makes: once
// the allocator has seen a pattern of regions, repeating it must not touch
// the heap (the maps' nodes are reused, not freed and made again).
TEST(ArenaAllocatorTest, SteadyStateMakesNoHeapAllocation) {
#if !ES_COUNTS_NEW
  GTEST_SKIP() << "operator new is the sanitizer's here";
#else
  ArenaAllocator arena(1 << 20);
  // Interleaved lifetimes, as requests in flight: two held while others come and go.
  auto round = [&arena] {
    const auto a = arena.Allocate(3000);
    const auto b = arena.Allocate(100);
    const auto c = arena.Allocate(70000);
    ASSERT_TRUE(a && b && c);
    arena.Free(*b);
    const auto d = arena.Allocate(64);
    ASSERT_TRUE(d);
    arena.Free(*a);
    arena.Free(*c);
    arena.Free(*d);
  };
  round();  // the nodes this pattern needs are made once
  const uint64_t before = g_news.load();
  for (int i = 0; i < 100; ++i) round();
  EXPECT_EQ(g_news.load() - before, 0u) << "heap allocations in 100 rounds of the same pattern";
  EXPECT_EQ(arena.used_bytes(), 0u);
  EXPECT_EQ(arena.largest_free_block(), uint64_t{1} << 20);
#endif
}

// The same for bursts: an ensemble's member calls on one host, many in
// flight at once, answered in another order than they were made. Once the
// arena has held a burst, the next ones must not touch the heap either.
TEST(ArenaAllocatorTest, BurstsAfterTheFirstMakeNoHeapAllocation) {
#if !ES_COUNTS_NEW
  GTEST_SKIP() << "operator new is the sanitizer's here";
#else
  ArenaAllocator arena(1 << 24);
  std::vector<size_t> order(128);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  std::vector<uint64_t> regions;
  regions.reserve(order.size());
  auto burst = [&] {
    regions.clear();
    for (size_t i = 0; i < order.size(); ++i) {
      const auto r = arena.Allocate(256 + 64 * (i % 5));
      if (!r) return false;
      regions.push_back(*r);
    }
    for (size_t i : order) arena.Free(regions[i]);
    return true;
  };
  ASSERT_TRUE(burst());  // the nodes a burst needs are made once
  const uint64_t before = g_news.load();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(burst());
  EXPECT_EQ(g_news.load() - before, 0u) << "heap allocations in 20 bursts of 128 regions";
  EXPECT_EQ(arena.used_bytes(), 0u);
#endif
}

}  // namespace
}  // namespace es::ipc
