// KeepFreedTensorMemory (torch_utils/tensor_memory.h): after it, a
// tensor-sized block comes from the heap rather than its own mmap, and once
// freed it stays mapped for the next one. ctest runs each test in a process
// of its own, so each starts from glibc's defaults (a 128 KiB mmap
// threshold, under which the 8 MiB block below would be mapped on its own).
#include "torch_utils/tensor_memory.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace es {
namespace {

constexpr size_t kBlock = size_t{8} << 20;  // a batch-64 activation of the Fashion-MNIST CNNs is 3.2 MiB

TEST(TensorMemory, BlocksComeFromTheHeapAndStayMappedOnceFreed) {
  ::unsetenv("GLIBC_TUNABLES");
  ASSERT_TRUE(KeepFreedTensorMemory());
  const size_t mapped_before = mallinfo2().hblks;
  void* block = std::malloc(kBlock);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBlock);  // faulted in, as a tensor's memory is
  EXPECT_EQ(mallinfo2().hblks, mapped_before) << "the block got its own mmap";
  std::free(block);
  // Still in the heap, free for the next block: not handed back (trimmed).
  EXPECT_GE(mallinfo2().fordblks, kBlock);
}

TEST(TensorMemory, GlibcTunablesForMallocAreTheUsersChoice) {
  ::setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=4096", 1);
  EXPECT_FALSE(KeepFreedTensorMemory());
  // Nothing was set: a large block is still mapped on its own.
  const size_t mapped_before = mallinfo2().hblks;
  void* block = std::malloc(kBlock);
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(mallinfo2().hblks, mapped_before + 1);
  std::free(block);
  ::unsetenv("GLIBC_TUNABLES");
}

}  // namespace
}  // namespace es
