#include "torch_utils/tensor_memory.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace es {

bool KeepFreedTensorMemory() {
  if (const char* tunables = std::getenv("GLIBC_TUNABLES"); tunables && std::strstr(tunables, "malloc.")) {
    return false;
  }
  // Setting either turns off glibc's adaptive thresholds, so both are set.
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(kTensorMmapThreshold)) == 1 &&
         mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTensorTrimThreshold)) == 1;
}

}  // namespace es
