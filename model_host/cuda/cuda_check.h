// CUDA runtime errors as es::Status, and how many devices this process sees.
//
// Header free of CUDA's own headers (error codes travel as int), so callers
// that only want a Status need not compile against the toolkit.
//
// Every failed call's error is also cleared from the runtime's per-thread
// "last error" (cudaGetLastError), so that LibTorch, which checks it after
// its kernel launches, never blames one of its kernels for our failure.
//
// Thread safety: free functions, safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace es::cuda {

// OK for cudaSuccess; otherwise a Status naming `what` and the runtime's
// message, e.g. "cudaHostRegister of 268435456 bytes: invalid argument
// (cudaErrorInvalidValue)". No device or no driver is FAILED_PRECONDITION,
// out of memory RESOURCE_EXHAUSTED, a bad argument INVALID_ARGUMENT, the rest
// INTERNAL.
Status CheckCuda(int error, std::string_view what);

// Devices visible to the CUDA runtime; 0 when there is no driver or no device
// (then `*why`, when given, says which, in the runtime's words).
int VisibleDeviceCount(std::string* why = nullptr);

}  // namespace es::cuda
