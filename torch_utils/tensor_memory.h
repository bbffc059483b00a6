// Tensor memory: keeps the memory of freed tensors in the process for the
// next ones instead of handing it back to the kernel.
//
// glibc's malloc serves large blocks (128 KiB at first) with their own mmap
// and gives freed memory at the top of a heap back to the kernel once more
// than the trim threshold is free. A training step or a batched forward
// allocates and frees the same few megabyte-sized activations every time,
// so each one is mapped, faulted in page by page (zeroed by the kernel) and
// unmapped again. On the AMD EPYC VMs this project runs on, that made
// `ensemble-train`'s Fashion-MNIST recipe spend a third of its CPU time in
// the kernel, and run 2.5x slower than with the memory kept (30 steps:
// 14.1 s against 5.5 s, same losses).
//
// Contract: KeepFreedTensorMemory() is called early in main() of every
// program that computes with LibTorch on the CPU (after
// UseTheCpusBlasKernels, which may exec the program again). It sets
// M_MMAP_THRESHOLD (kTensorMmapThreshold: blocks below it come from the
// heap) and M_TRIM_THRESHOLD (kTensorTrimThreshold: up to this much freed
// memory per heap stays mapped), and returns true; it does nothing and
// returns false when GLIBC_TUNABLES names a malloc setting (the user chose)
// or mallopt refuses. The price: a process keeps up to the trim threshold
// of freed memory per malloc arena (one per thread that allocates, at most
// eight per core) on top of what it uses. Under tcmalloc (the model host's
// and the trainer's malloc where the build links it: common/allocator.h)
// mallopt does nothing and says it succeeded, and tcmalloc keeps freed
// memory of its own accord.
#pragma once

#include <cstddef>

namespace es {

inline constexpr size_t kTensorMmapThreshold = size_t{32} << 20;   // glibc's own ceiling for its adaptive threshold
inline constexpr size_t kTensorTrimThreshold = size_t{256} << 20;

bool KeepFreedTensorMemory();

}  // namespace es
