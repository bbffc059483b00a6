#include "model_host/cuda/host_registration.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "model_host/cuda/cuda_check.h"

namespace es::cuda {

StatusOr<HostRegistration> HostRegistration::Register(void* data, size_t bytes) {
  if (data == nullptr || bytes == 0) {
    return Status::InvalidArgument("cudaHostRegister: an empty range cannot be registered");
  }
  // Portable: pinned for every CUDA context of the process, not only the one
  // current on this thread (LibTorch may carry a CUDA runtime of its own, with
  // its own idea of the current device). Device pointers equal host pointers
  // (unified addressing), so copies take the host pointer as it is.
  ES_RETURN_IF_ERROR(CheckCuda(cudaHostRegister(data, bytes, cudaHostRegisterPortable),
                               "cudaHostRegister of " + std::to_string(bytes) + " bytes"));
  return HostRegistration(data, bytes);
}

HostRegistration::HostRegistration(HostRegistration&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
  if (this != &other) {
    (void)Release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

HostRegistration::~HostRegistration() { (void)Release(); }

Status HostRegistration::Release() {
  if (data_ == nullptr) return Status::Ok();
  void* data = std::exchange(data_, nullptr);
  bytes_ = 0;
  return CheckCuda(cudaHostUnregister(data), "cudaHostUnregister");
}

}  // namespace es::cuda
