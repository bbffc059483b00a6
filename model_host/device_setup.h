// SetUpDevice: binds the host process to its device before models load:
// LibTorch's intra-op thread count from the host config, and on "cuda:N" the
// current CUDA device (an error when this LibTorch has no CUDA).
#pragma once

#include "config/server_config.h"
#include "config/status.h"

namespace es {

Status SetUpDevice(const HostConfig& host);

}  // namespace es
