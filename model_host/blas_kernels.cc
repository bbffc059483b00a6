#include "model_host/blas_kernels.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

void UseTheCpusBlasKernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  if (strcasecmp(LoadedBlasCoreName().c_str(), "Prescott") != 0) return;
  const std::string core = BlasCoreTypeFor(DetectCpuFeatures());
  if (core.empty()) return;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  std::fprintf(stderr,
               "note: OpenBLAS does not know this CPU and picked its generic Prescott kernels; "
               "running again with OPENBLAS_CORETYPE=%s (set OPENBLAS_CORETYPE to choose yourself)\n",
               core.c_str());
  std::fflush(stderr);
  // The program's own path, not /proc/self/exe: the process name (comm) comes
  // from the path's last part, and tools find hosts by it.
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    execv(self, argv);
  }
  std::fprintf(stderr, "note: could not run again (%s); going on with the generic kernels\n", std::strerror(errno));
}

}  // namespace es
