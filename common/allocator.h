// Which malloc this process runs, and its settings.
//
// AllocatorInUse(): "tcmalloc (gperftools 2.10; thread caches 4096 KiB)"
// (the bound ConfigureAllocator sets, below) when gperftools' tcmalloc
// has taken malloc's place (the build links it into the router, the model
// hosts and ensemble-train: cmake/EsAllocator.cmake), "glibc malloc 2.36"
// for the C library's (with its version; "glibc malloc 2.36 (freed memory
// kept: mmap threshold 32 MiB, trim threshold 256 MiB)" once
// KeepFreedMemory has set them), else "malloc of FILE" naming the
// object whose malloc runs (a preloaded libjemalloc.so.2, a sanitizer
// build's own executable). Asked of the running process, not of the build:
// a binary built for tcmalloc but run where the library's malloc did not
// take over says so.
// Safe from any thread.
//
// ConfigureAllocator(): under tcmalloc, bounds the memory its per-thread
// caches may hold together to kThreadCacheBytes, unless the environment sets
// TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES (gperftools' own variable, then left
// to it); under any other malloc, KeepFreedMemory(). Call it first thing in
// main, before the program starts threads of its own (it reads the
// environment; a library's threads started before main, OpenBLAS's, set
// none). A program that runs itself again (blas_kernels.h) calls it again:
// exec drops malloc's settings.
// gperftools' bound is soft: each new thread gets a minimal cache even when
// the others hold the whole bound, so with many threads the caches may hold
// somewhat more.
//
// KeepFreedMemory(): glibc's malloc serves large blocks (128 KiB at first)
// with their own mmap and gives freed memory at the top of a heap back to
// the kernel once more than the trim threshold is free. A training step or
// a batched forward allocates and frees the same few megabyte-sized
// activations every time, and a 64-row request through the router blocks of
// hundreds of KB, so each one was mapped, faulted in page by page (zeroed by
// the kernel) and unmapped again: ensemble-train's Fashion-MNIST recipe
// spent a third of its CPU time in the kernel and ran 2.5x slower (30 steps:
// 14.1 s against 5.5 s, AMD EPYC), and the router spent about twice the CPU
// per 64-row request of the demo ensemble (benchmarks/RESULTS.md,
// "Overhead"). It sets M_MMAP_THRESHOLD (kKeptMmapThreshold: blocks below
// it come from a heap) and M_TRIM_THRESHOLD (kKeptTrimThreshold: up to this
// much freed memory per heap stays mapped), and returns true; it does
// nothing and returns false when GLIBC_TUNABLES names a malloc setting (the
// user chose) or mallopt refuses. The price: a process keeps up to the trim
// threshold of freed memory per malloc arena (one per thread that
// allocates, at most eight per core) on top of what it uses. Under tcmalloc
// mallopt does nothing and says it succeeded; tcmalloc keeps freed memory of
// its own accord.
#pragma once

#include <cstddef>
#include <string>

namespace es {

// tcmalloc's default is 32 MiB: every thread the router starts (one per
// host incarnation, gRPC's) fills a cache of its own, so the router's
// resident memory rose in steps of about 1 MiB at host restarts and after
// a minute of faults sat 2 MiB higher, though nothing leaked; with 4 MiB it
// stayed flat, and the router's CPU per request stayed where tcmalloc put
// it at large batches (benchmarks/RESULTS.md, "Overhead").
inline constexpr size_t kThreadCacheBytes = size_t{4} << 20;

inline constexpr size_t kKeptMmapThreshold = size_t{32} << 20;  // glibc's own ceiling for its adaptive threshold
inline constexpr size_t kKeptTrimThreshold = size_t{256} << 20;

std::string AllocatorInUse();
void ConfigureAllocator();
bool KeepFreedMemory();

}  // namespace es
