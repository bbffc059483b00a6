// PinnedBuffer: page-locked host memory from the CUDA driver (cudaHostAlloc),
// the classic staging buffer: bytes are memcpy'd into it from pageable memory
// and DMA'd to the GPU from there. The alternative to registering the arena
// (HostRegistration) that bench-h2d measures it against, and the fallback
// where registration is refused.
//
// Ownership: move-only; the destructor frees (cudaFreeHost).
// Thread safety: none of its own; one owner uses it at a time.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace es::cuda {

class PinnedBuffer {
 public:
  // INVALID_ARGUMENT for 0 bytes; FAILED_PRECONDITION without a device;
  // RESOURCE_EXHAUSTED when the driver cannot pin that much.
  static StatusOr<PinnedBuffer> Allocate(size_t bytes);

  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  PinnedBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  void Free();

  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace es::cuda
