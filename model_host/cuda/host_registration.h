// HostRegistration: page-locks an existing range of host memory for the CUDA
// driver (cudaHostRegister), so that copies between it and the GPU are DMA
// transfers straight from and into it, asynchronous on a stream, with no
// staging copy through the driver's own pinned bounce buffers.
//
// What it is for: the host registers its channel's tensor arena (a MAP_SHARED
// memfd mapping) once at start-up; inputs then go host-to-device from the very
// bytes the router wrote, and outputs come back device-to-host into the
// region the router reserved. bench-h2d measures this against pinned staging
// and plain pageable copies.
//
// Ownership: move-only; the destructor unregisters (cudaHostUnregister). The
// memory itself is not owned and must stay mapped for the object's life.
// Registering costs milliseconds per hundred MiB (the driver pins every page),
// so it is done once, never per request.
//
// Thread safety: Register() and the destructor may run on any thread; the
// registration is process-wide (portable: every context, device and stream).
#pragma once

#include <cstddef>

#include "common/status.h"

namespace es::cuda {

class HostRegistration {
 public:
  // Registers [data, data + bytes). INVALID_ARGUMENT for a null or empty range
  // or memory already registered; FAILED_PRECONDITION without a device.
  static StatusOr<HostRegistration> Register(void* data, size_t bytes);

  HostRegistration() = default;
  HostRegistration(HostRegistration&& other) noexcept;
  HostRegistration& operator=(HostRegistration&& other) noexcept;
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  ~HostRegistration();

  bool registered() const { return data_ != nullptr; }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

  // Unregisters now (the destructor's work), reporting a failure.
  Status Release();

 private:
  HostRegistration(void* data, size_t bytes) : data_(data), bytes_(bytes) {}

  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace es::cuda
