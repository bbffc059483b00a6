#include "model_host/device_setup.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/torch.h>

#include <cstdlib>
#include <exception>
#include <optional>

#if defined(ES_TORCH_CUDA)
#include "model_host/cuda/host_registration.h"
#endif

namespace es {
namespace {

// The device-generic LibTorch interface (c10::impl::DeviceGuardImplInterface)
// serves for setting devices and taking streams: the same calls in LibTorch
// 1.13 and 2.x, and no CUDA headers needed to compile them.
const c10::impl::DeviceGuardImplInterface& CudaGuardImpl() {
  return *c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

bool IsCuda(const std::string& device) { return device.rfind("cuda", 0) == 0; }

bool RegistrationDisabledByEnvironment() {
  const char* value = std::getenv("ES_CUDA_REGISTER_ARENA");
  return value != nullptr && std::string(value) == "0";
}

}  // namespace

Status SetUpDevice(const HostConfig& host) {
  try {
    torch::set_num_threads(std::max(1, host.threads));
    if (IsCuda(host.device)) {
      if (!torch::cuda::is_available()) {
        return Status::FailedPrecondition("host '" + host.name + "' wants device " + host.device +
                                          " but this LibTorch has no CUDA or no GPU is visible");
      }
      const torch::Device device(host.device);
      const auto count = static_cast<int64_t>(torch::cuda::device_count());
      if (device.index() >= count) {
        return Status::FailedPrecondition("host '" + host.name + "' wants device " + host.device +
                                          " but only " + std::to_string(count) +
                                          " CUDA device(s) are visible");
      }
      // The main thread's current device: models load and warm up there, and
      // the CUDA context is created now, not on the first request.
      CudaGuardImpl().setDevice(torch::Device(c10::DeviceType::CUDA, std::max<c10::DeviceIndex>(0, device.index())));
    }
  } catch (const std::exception& e) {
    return Status::Internal("host '" + host.name + "': device setup failed: " + e.what());
  }
  return Status::Ok();
}

// --- ArenaRegistration ------------------------------------------------------

struct ArenaRegistration::Impl {
#if defined(ES_TORCH_CUDA)
  cuda::HostRegistration registration;
#endif
};

ArenaRegistration::ArenaRegistration() = default;
ArenaRegistration::ArenaRegistration(ArenaRegistration&&) noexcept = default;
ArenaRegistration& ArenaRegistration::operator=(ArenaRegistration&&) noexcept = default;
ArenaRegistration::~ArenaRegistration() = default;

bool ArenaRegistration::registered() const {
#if defined(ES_TORCH_CUDA)
  return impl_ != nullptr && impl_->registration.registered();
#else
  return false;
#endif
}

ArenaRegistration ArenaRegistration::ForHost(const HostConfig& host, ipc::Channel* channel,
                                             std::string* note) {
  ArenaRegistration result;
  if (!IsCuda(host.device)) {
    *note = "CPU host: the arena is read in place";
    return result;
  }
  if (RegistrationDisabledByEnvironment()) {
    *note = "arena not registered (ES_CUDA_REGISTER_ARENA=0): copies go through the driver's staging";
    return result;
  }
#if defined(ES_TORCH_CUDA)
  auto registration = cuda::HostRegistration::Register(channel->arena(), channel->arena_bytes());
  if (!registration.ok()) {
    *note = "arena not registered (" + registration.status().message() +
            "): copies go through the driver's staging";
    return result;
  }
  result.impl_ = std::make_unique<Impl>();
  result.impl_->registration = std::move(registration).value();
  *note = "arena registered with CUDA (" + std::to_string(channel->arena_bytes() >> 20) +
          " MiB page-locked): inputs and outputs cross by DMA, no staging copy";
#else
  (void)channel;
  *note = "this LibTorch has no CUDA";
#endif
  return result;
}

// --- ExecutorDeviceScope ----------------------------------------------------

struct ExecutorDeviceScope::Guard {
  std::optional<c10::StreamGuard> stream;
};

ExecutorDeviceScope::ExecutorDeviceScope(const std::string& device, std::string* note)
    : guard_(std::make_unique<Guard>()) {
  if (!IsCuda(device)) return;
  try {
    const torch::Device parsed(device);
    const torch::Device cuda(c10::DeviceType::CUDA, std::max<c10::DeviceIndex>(0, parsed.index()));
    // A low-priority stream from the pool (round-robin over 32 per device):
    // never the default stream, which would serialise the executors.
    guard_->stream.emplace(CudaGuardImpl().getStreamFromGlobalPool(cuda, /*isHighPriority=*/false));
    if (note != nullptr) *note = "executor stream " + std::to_string(guard_->stream->current_stream().id());
  } catch (const std::exception& e) {
    // The default stream still computes correctly, only without overlap.
    if (note != nullptr) *note = std::string("no stream of its own, using the default stream: ") + e.what();
  }
}

ExecutorDeviceScope::~ExecutorDeviceScope() = default;

}  // namespace es
