// Which malloc this process runs, and its settings.
//
// AllocatorInUse(): "tcmalloc (gperftools 2.10; thread caches 4096 KiB)"
// (the bound ConfigureAllocator sets, below) when gperftools' tcmalloc
// has taken malloc's place (the build links it into the router, the model
// hosts and ensemble-train: cmake/EsAllocator.cmake), "glibc malloc 2.36"
// for the C library's (with its version), else "malloc of FILE" naming the
// object whose malloc runs (a preloaded libjemalloc.so.2, a sanitizer
// build's own executable). Asked of the running process, not of the build:
// a binary built for tcmalloc but run where the library's malloc did not
// take over says so.
// Safe from any thread.
//
// ConfigureAllocator(): under tcmalloc, bounds the memory its per-thread
// caches may hold together to kThreadCacheBytes, unless the environment sets
// TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES (gperftools' own variable, then left
// to it); under glibc it does nothing. Call it first thing in main, before
// the program starts threads of its own (it reads the environment; a
// library's threads started before main, OpenBLAS's, set none).
// gperftools' bound is soft: each new thread gets a minimal cache even when
// the others hold the whole bound, so with many threads the caches may hold
// somewhat more.
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

std::string AllocatorInUse();
void ConfigureAllocator();

}  // namespace es
