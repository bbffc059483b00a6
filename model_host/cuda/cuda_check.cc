#include "model_host/cuda/cuda_check.h"

#include <cuda_runtime_api.h>

namespace es::cuda {

Status CheckCuda(int error, std::string_view what) {
  const auto code = static_cast<cudaError_t>(error);
  if (code == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();  // not sticky: clear it for whoever checks next
  const std::string message = std::string(what) + ": " + cudaGetErrorString(code) + " (" +
                              cudaGetErrorName(code) + ")";
  switch (code) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorNotSupported:
      return Status::FailedPrecondition(message);
    case cudaErrorMemoryAllocation:
      return Status::ResourceExhausted(message);
    case cudaErrorInvalidValue:
    case cudaErrorHostMemoryAlreadyRegistered:
    case cudaErrorHostMemoryNotRegistered:
      return Status::InvalidArgument(message);
    default:
      return Status::Internal(message);
  }
}

int VisibleDeviceCount(std::string* why) {
  int count = 0;
  const Status status = CheckCuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (!status.ok()) {
    if (why != nullptr) *why = status.message();
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "the CUDA runtime sees no device";
  return count;
}

}  // namespace es::cuda
