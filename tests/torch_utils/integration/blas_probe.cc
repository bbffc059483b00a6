// blas_probe: a LibTorch program for test_blas_kernels. It calls
// UseTheCpusBlasKernels first, as the project's programs do, multiplies two
// matrices (so LibTorch and its BLAS really run), and prints what it saw:
//   core=<OpenBLAS kernels> coretype=<OPENBLAS_CORETYPE or -> args=<argv[1..]> sum=<product sum>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "torch_utils/blas_kernels.h"

int main(int argc, char** argv) {
  es::UseTheCpusBlasKernels(argv);
  const torch::Tensor a = torch::ones({64, 64});
  const double sum = torch::mm(a, a).sum().item<double>();  // 64 * 64 * 64
  std::string args;
  for (int i = 1; i < argc; ++i) {
    if (i > 1) args += ' ';
    args += argv[i];
  }
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("core=%s coretype=%s args=%s sum=%.0f\n", es::LoadedBlasCoreName().c_str(),
              coretype != nullptr ? coretype : "-", args.c_str(), sum);
  return 0;
}
