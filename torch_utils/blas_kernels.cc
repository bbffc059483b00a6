#include "torch_utils/blas_kernels.h"

#include <pthread.h>
#include <sched.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/errno_text.h"

namespace es {

CpuFeatures DetectCpuFeatures() {
  __builtin_cpu_init();
  CpuFeatures cpu;
  cpu.avx = __builtin_cpu_supports("avx");
  cpu.avx2 = __builtin_cpu_supports("avx2");
  cpu.fma = __builtin_cpu_supports("fma");
  cpu.avx512f = __builtin_cpu_supports("avx512f");
  cpu.avx512bw = __builtin_cpu_supports("avx512bw");
  cpu.avx512dq = __builtin_cpu_supports("avx512dq");
  cpu.avx512vl = __builtin_cpu_supports("avx512vl");
  return cpu;
}

std::string BlasCoreTypeFor(const CpuFeatures& cpu) {
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512dq && cpu.avx512vl) return "SKYLAKEX";
  if (cpu.avx2 && cpu.fma) return "HASWELL";
  if (cpu.avx) return "SANDYBRIDGE";
  return "";
}

std::string LoadedBlasCoreName() {
  // Looked up at run time: the symbol exists only when OpenBLAS is the BLAS
  // that LibTorch loaded (Debian's alternatives may point elsewhere).
  using CoreName = char* (*)();
  auto core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (core_name == nullptr) return "";
  const char* name = core_name();
  return name != nullptr ? name : "";
}

namespace {

constexpr const char* kNoteVariable = "ES_BLAS_NOTE";

void Say(BlasNote how, const std::string& note) {
  if (how == BlasNote::kDeferred) {
    setenv(kNoteVariable, note.c_str(), 1);  // NOLINT(concurrency-mt-unsafe): before threads start
    return;
  }
  std::fprintf(stderr, "note: %s\n", note.c_str());
  std::fflush(stderr);
}

}  // namespace

void UseTheCpusBlasKernels(char** argv, BlasNote how) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  if (strcasecmp(LoadedBlasCoreName().c_str(), "Prescott") != 0) return;
  const std::string core = BlasCoreTypeFor(DetectCpuFeatures());
  if (core.empty()) return;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  const std::string why = "OpenBLAS does not know this CPU and picked its generic Prescott kernels; ";
  Say(how, why + "running again with OPENBLAS_CORETYPE=" + core + " (set OPENBLAS_CORETYPE to choose yourself)");
  // Exec the link's target, not the link: the process name (comm) is the last
  // part of the path exec'd, and tools and tests find hosts by that name.
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return;
  self[n] = '\0';
  // Started through the dynamic loader (ld-linux ./program args), the
  // executable is the loader, which would take argv[1] for the program.
  const char* base = std::strrchr(self, '/');
  if (std::strncmp(base != nullptr ? base + 1 : self, "ld-", 3) == 0) return;
  execv(self, argv);
  const int failed = errno;  // before the message's allocations
  Say(how, why + "could not run again with OPENBLAS_CORETYPE=" + core + " (" + ErrnoText(failed) +
               "); going on with the generic kernels");
}

std::string TakeBlasKernelsNote() {
  const char* note = std::getenv(kNoteVariable);  // NOLINT(concurrency-mt-unsafe): called before threads start
  if (note == nullptr) return "";
  std::string taken = note;
  unsetenv(kNoteVariable);  // NOLINT(concurrency-mt-unsafe): called before threads start
  return taken;
}

int LimitBlasThreads(int threads) {
  using SetThreads = void (*)(int);
  using GetThreads = int (*)();
  auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (set == nullptr || get == nullptr) return 0;
  set(threads);
  return get();
}

bool PinThisThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

}  // namespace es
