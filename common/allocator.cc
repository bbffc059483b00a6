#include "common/allocator.h"

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace es {
namespace {

// gperftools' C entry points, looked up rather than linked: present only when
// its library is loaded, so one common library serves builds with either
// malloc.
template <typename Fn>
Fn Lookup(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

bool TcmallocInUse() {
  // Loaded and linked ahead of the C library, tcmalloc's malloc is the one
  // every call reaches: dlsym(RTLD_DEFAULT, "malloc") then names the same
  // function as tc_malloc (its alias).
  void* const tc_malloc = dlsym(RTLD_DEFAULT, "tc_malloc");
  return tc_malloc != nullptr && dlsym(RTLD_DEFAULT, "malloc") == tc_malloc;
}

// Set once KeepFreedMemory's settings took: mallopt's settings cannot be
// read back, and AllocatorInUse names them.
std::atomic<bool> freed_memory_kept{false};

}  // namespace

std::string AllocatorInUse() {
  using Version = const char* (*)(int*, int*, const char**);
  const auto version = Lookup<Version>("tc_version");
  if (version != nullptr && TcmallocInUse()) {
    int major = 0, minor = 0;
    const char* patch = nullptr;
    std::string text = std::string("tcmalloc (") + version(&major, &minor, &patch);
    using GetProperty = int (*)(const char*, size_t*);
    size_t bytes = 0;
    if (const auto get = Lookup<GetProperty>("MallocExtension_GetNumericProperty");
        get != nullptr && get("tcmalloc.max_total_thread_cache_bytes", &bytes) != 0) {
      text += "; thread caches " + std::to_string(bytes >> 10) + " KiB";
    }
    return text + ")";
  }
  // Not tcmalloc: name the object whose malloc runs. The C library's is
  // libc.so.6; a preloaded allocator (jemalloc) or a sanitizer's runtime,
  // linked into the executable, is something else and is named as it is.
  Dl_info where{};
  if (dladdr(dlsym(RTLD_DEFAULT, "malloc"), &where) != 0 && where.dli_fname != nullptr) {
    const std::string file = where.dli_fname;
    const std::string name = file.substr(file.find_last_of('/') + 1);
    if (name.rfind("libc.so", 0) != 0) return "malloc of " + name;
  }
  std::string text = std::string("glibc malloc ") + gnu_get_libc_version();
  if (freed_memory_kept.load(std::memory_order_relaxed)) {
    text += " (freed memory kept: mmap threshold " + std::to_string(kKeptMmapThreshold >> 20) +
            " MiB, trim threshold " + std::to_string(kKeptTrimThreshold >> 20) + " MiB)";
  }
  return text;
}

void ConfigureAllocator() {
  if (!TcmallocInUse()) {
    KeepFreedMemory();
    return;
  }
  // NOLINTNEXTLINE(concurrency-mt-unsafe): called before the program starts threads of its own (see the header)
  if (std::getenv("TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES") != nullptr) return;
  using SetProperty = int (*)(const char*, size_t);
  if (const auto set = Lookup<SetProperty>("MallocExtension_SetNumericProperty")) {
    set("tcmalloc.max_total_thread_cache_bytes", kThreadCacheBytes);
  }
}

bool KeepFreedMemory() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): called before the program starts threads of its own (see the header)
  if (const char* tunables = std::getenv("GLIBC_TUNABLES"); tunables && std::strstr(tunables, "malloc.")) {
    return false;
  }
  // Setting either turns off glibc's adaptive thresholds, so both are set.
  // NOLINTBEGIN(concurrency-mt-unsafe): mallopt takes malloc's own lock; called before threads of our own
  const bool kept = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kKeptMmapThreshold)) == 1 &&
                    mallopt(M_TRIM_THRESHOLD, static_cast<int>(kKeptTrimThreshold)) == 1;
  // NOLINTEND(concurrency-mt-unsafe)
  if (kept) freed_memory_kept.store(true, std::memory_order_relaxed);
  return kept;
}

}  // namespace es
