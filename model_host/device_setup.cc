#include "model_host/device_setup.h"

#include <torch/torch.h>

namespace es {

Status SetUpDevice(const HostConfig& host) {
  try {
    torch::set_num_threads(std::max(1, host.threads));
    if (host.device.rfind("cuda", 0) == 0) {
      if (!torch::cuda::is_available()) {
        return Status::FailedPrecondition("host '" + host.name + "' wants device " + host.device +
                                          " but this LibTorch has no CUDA or no GPU is visible");
      }
    }
  } catch (const std::exception& e) {
    return Status::Internal("host '" + host.name + "': device setup failed: " + e.what());
  }
  return Status::Ok();
}

}  // namespace es
