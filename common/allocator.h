// Which malloc this process runs, and its settings.
//
// AllocatorInUse(): "tcmalloc (gperftools 2.10; thread caches 4096 KiB)"
// (the bound ConfigureAllocator sets, below) when gperftools' tcmalloc
// has taken malloc's place (the build links it into the router and the model
// hosts: cmake/EsAllocator.cmake), else "glibc malloc 2.36" (the C
// library's, with its version). Asked of the running process, not of the
// build: a binary built for tcmalloc but run where the library's malloc did
// not take over says so. Safe from any thread.
//
// ConfigureAllocator(): under tcmalloc, bounds the memory its per-thread
// caches may hold together to kThreadCacheBytes, unless the environment sets
// TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES (gperftools' own variable, then left
// to it); under glibc it does nothing. Call it first thing in main, before
// any other thread starts (it reads the environment).
#pragma once

#include <cstddef>
#include <string>

namespace es {

// tcmalloc's default is 32 MiB: every thread the router starts (one per
// host incarnation, gRPC's) fills a cache of its own, so the router's
// resident memory rose by a few MiB with each host restart and after a
// minute of faults sat 2 MiB higher, though nothing leaked; with 4 MiB it
// stayed flat, and the router's CPU per request stayed where tcmalloc put
// it at large batches (benchmarks/RESULTS.md, "Overhead").
inline constexpr size_t kThreadCacheBytes = size_t{4} << 20;

std::string AllocatorInUse();
void ConfigureAllocator();

}  // namespace es
