// blas_probe: a LibTorch program for test_blas_kernels. It calls
// UseTheCpusBlasKernels first, as the project's programs do, multiplies two
// matrices (so LibTorch and its BLAS really run), and prints what it saw:
//   core=<OpenBLAS kernels> coretype=<OPENBLAS_CORETYPE or -> args=<argv[1..]> sum=<product sum>
// With ES_PROBE_DEFERRED=1 in its environment it asks for the deferred note
// (as the model host does) and prints it after the rest, then whether the
// note's variable is gone:  note=<TakeBlasKernelsNote()> left=<ES_BLAS_NOTE or ->
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "torch_utils/blas_kernels.h"

int main(int argc, char** argv) {
  const bool deferred = std::getenv("ES_PROBE_DEFERRED") != nullptr;  // NOLINT(concurrency-mt-unsafe): one thread
  es::UseTheCpusBlasKernels(argv, deferred ? es::BlasNote::kDeferred : es::BlasNote::kStderr);
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
  if (deferred) {
    const std::string note = es::TakeBlasKernelsNote();
    const char* left = std::getenv("ES_BLAS_NOTE");  // NOLINT(concurrency-mt-unsafe): one thread
    std::printf("note=%s left=%s\n", note.c_str(), left != nullptr ? left : "-");
  }
  return 0;
}
