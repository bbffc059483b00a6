#include "common/allocator.h"

#include <dlfcn.h>
#include <gnu/libc-version.h>

#include <cstdlib>

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
  return std::string("glibc malloc ") + gnu_get_libc_version();
}

void ConfigureAllocator() {
  if (!TcmallocInUse()) return;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): called before the program starts threads of its own (see the header)
  if (std::getenv("TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES") != nullptr) return;
  using SetProperty = int (*)(const char*, size_t);
  if (const auto set = Lookup<SetProperty>("MallocExtension_SetNumericProperty")) {
    set("tcmalloc.max_total_thread_cache_bytes", kThreadCacheBytes);
  }
}

}  // namespace es
