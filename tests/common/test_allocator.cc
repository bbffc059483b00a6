// KeepFreedMemory and ConfigureAllocator (common/allocator.h) under glibc's
// malloc, as a build without tcmalloc runs the router, the hosts and the
// trainer (this test binary links the C library's malloc): after them, a
// tensor-sized block comes from the heap rather than its own mmap, and once
// freed it stays mapped for the next one. ctest runs each test in a process
// of its own, so each starts from glibc's defaults (a 128 KiB mmap
// threshold, under which the 8 MiB block below would be mapped on its own).
#include "common/allocator.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

// The tests change the environment: one thread, the test's own process.
// NOLINTBEGIN(concurrency-mt-unsafe)
namespace es {
namespace {

constexpr size_t kBlock = size_t{8} << 20;  // a batch-64 activation of the Fashion-MNIST CNNs is 3.2 MiB

// Maps, fills and frees kBlock; says whether it came from a heap and its
// memory stayed there, free for the next block, once freed.
void ExpectBlockKeptInTheHeap() {
  const size_t mapped_before = mallinfo2().hblks;
  void* block = std::malloc(kBlock);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBlock);  // faulted in, as a tensor's memory is
  EXPECT_EQ(mallinfo2().hblks, mapped_before) << "the block got its own mmap";
  std::free(block);
  // Still in the heap, free for the next block: not handed back (trimmed).
  EXPECT_GE(mallinfo2().fordblks, kBlock);
}

TEST(Allocator, KeptFreedMemoryComesFromTheHeapAndStaysMapped) {
  ::unsetenv("GLIBC_TUNABLES");
  ASSERT_EQ(AllocatorInUse().rfind("glibc malloc ", 0), 0U) << AllocatorInUse();
  ASSERT_TRUE(KeepFreedMemory());
  ExpectBlockKeptInTheHeap();
}

TEST(Allocator, ConfigureAllocatorKeepsFreedMemoryUnderGlibcAndSaysSo) {
  ::unsetenv("GLIBC_TUNABLES");
  EXPECT_EQ(AllocatorInUse().find("kept"), std::string::npos) << AllocatorInUse();
  ConfigureAllocator();
  ExpectBlockKeptInTheHeap();
  EXPECT_NE(AllocatorInUse().find("(freed memory kept: mmap threshold 32 MiB, trim threshold 256 MiB)"),
            std::string::npos)
      << AllocatorInUse();
}

TEST(Allocator, GlibcTunablesForMallocAreTheUsersChoice) {
  ::setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=4096", 1);
  EXPECT_FALSE(KeepFreedMemory());
  ConfigureAllocator();
  // Nothing was set: a large block is still mapped on its own.
  const size_t mapped_before = mallinfo2().hblks;
  void* block = std::malloc(kBlock);
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(mallinfo2().hblks, mapped_before + 1);
  std::free(block);
  EXPECT_EQ(AllocatorInUse().find("kept"), std::string::npos) << AllocatorInUse();
  ::unsetenv("GLIBC_TUNABLES");
}

}  // namespace
}  // namespace es
// NOLINTEND(concurrency-mt-unsafe)
