#include "model_host/cuda/pinned_buffer.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "model_host/cuda/cuda_check.h"

namespace es::cuda {

StatusOr<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("cudaHostAlloc: a pinned buffer needs at least one byte");
  void* data = nullptr;
  ES_RETURN_IF_ERROR(CheckCuda(cudaHostAlloc(&data, bytes, cudaHostAllocDefault),
                               "cudaHostAlloc of " + std::to_string(bytes) + " bytes"));
  return PinnedBuffer(data, bytes);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    Free();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() { Free(); }

void PinnedBuffer::Free() {
  if (data_ == nullptr) return;
  (void)CheckCuda(cudaFreeHost(std::exchange(data_, nullptr)), "cudaFreeHost");
  bytes_ = 0;
}

}  // namespace es::cuda
