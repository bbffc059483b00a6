// model_host/cuda without LibTorch: CUDA errors as Status, registering the
// channel's arena with the driver, pinned staging buffers, and copies through
// both. The error paths run everywhere the toolkit is; the parts that need a
// GPU skip where the runtime sees none (no driver or no device).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "ipc/channel.h"
#include "model_host/cuda/cuda_check.h"
#include "model_host/cuda/host_registration.h"
#include "model_host/cuda/pinned_buffer.h"

namespace es::cuda {
namespace {

bool HaveDevice() { return VisibleDeviceCount() > 0; }

#define ES_SKIP_WITHOUT_GPU()                                       \
  do {                                                              \
    std::string why;                                                \
    if (VisibleDeviceCount(&why) == 0) GTEST_SKIP() << "no GPU: " << why; \
  } while (0)

TEST(CudaCheck, SuccessIsOk) { EXPECT_TRUE(CheckCuda(cudaSuccess, "anything").ok()); }

TEST(CudaCheck, ErrorsAreMappedAndNamed) {
  const Status no_device = CheckCuda(cudaErrorNoDevice, "cudaSetDevice(0)");
  EXPECT_EQ(no_device.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(no_device.message().find("cudaSetDevice(0): "), std::string::npos) << no_device.message();
  EXPECT_NE(no_device.message().find("cudaErrorNoDevice"), std::string::npos) << no_device.message();
  EXPECT_EQ(CheckCuda(cudaErrorInsufficientDriver, "x").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckCuda(cudaErrorMemoryAllocation, "x").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(CheckCuda(cudaErrorHostMemoryAlreadyRegistered, "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckCuda(cudaErrorLaunchFailure, "x").code(), StatusCode::kInternal);
}

TEST(CudaCheck, NoDeviceIsZeroWithAReason) {
  std::string why;
  const int count = VisibleDeviceCount(&why);
  EXPECT_GE(count, 0);
  if (count == 0) {
    EXPECT_FALSE(why.empty());
  }
}

TEST(HostRegistration, EmptyRangeIsRejectedWithoutCallingCuda) {
  auto none = HostRegistration::Register(nullptr, 4096);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  std::vector<char> bytes(16);
  auto empty = HostRegistration::Register(bytes.data(), 0);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
}

TEST(HostRegistration, WithoutAGpuRegistrationFailsCleanly) {
  if (HaveDevice()) GTEST_SKIP() << "a GPU is visible: the no-GPU path does not apply";
  std::vector<char> bytes(1 << 16);
  auto registration = HostRegistration::Register(bytes.data(), bytes.size());
  ASSERT_FALSE(registration.ok());
  EXPECT_NE(registration.status().message().find("cudaHostRegister of 65536 bytes"), std::string::npos)
      << registration.status().message();
  // (The runtime's last error stays set here: a missing driver is an
  // initialisation error, sticky by design. Errors that can be cleared are.)
}

TEST(HostRegistration, DefaultIsUnregisteredAndReleaseIsIdempotent) {
  HostRegistration none;
  EXPECT_FALSE(none.registered());
  EXPECT_TRUE(none.Release().ok());
}

TEST(PinnedBuffer, ZeroBytesIsRejected) {
  auto buffer = PinnedBuffer::Allocate(0);
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), StatusCode::kInvalidArgument);
}

TEST(PinnedBuffer, WithoutAGpuAllocationFailsCleanly) {
  if (HaveDevice()) GTEST_SKIP() << "a GPU is visible: the no-GPU path does not apply";
  auto buffer = PinnedBuffer::Allocate(1 << 20);
  ASSERT_FALSE(buffer.ok());
  EXPECT_NE(buffer.status().message().find("cudaHostAlloc"), std::string::npos);
}

// --- On a GPU ---------------------------------------------------------------

class ArenaOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    ES_SKIP_WITHOUT_GPU();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ipc::ChannelOptions options;
    options.arena_bytes = 8 << 20;
    auto channel = ipc::Channel::Create(options);
    ASSERT_TRUE(channel.ok()) << channel.status().message();
    channel_ = std::move(channel).value();
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&device_, kBytes), cudaSuccess);
  }
  void TearDown() override {
    if (device_ != nullptr) cudaFree(device_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Copies `bytes` at `src` to the GPU and back into `dst` on the test's stream.
  void RoundTrip(const void* src, void* dst, size_t bytes) {
    ASSERT_EQ(cudaMemcpyAsync(device_, src, bytes, cudaMemcpyHostToDevice, stream_), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(dst, device_, bytes, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  }

  static constexpr size_t kBytes = 1 << 20;
  ipc::Channel channel_;
  cudaStream_t stream_ = nullptr;
  void* device_ = nullptr;
};

TEST_F(ArenaOnGpu, RegisteredArenaCopiesBothWays) {
  auto registration = HostRegistration::Register(channel_.arena(), channel_.arena_bytes());
  ASSERT_TRUE(registration.ok()) << registration.status().message();
  EXPECT_TRUE(registration->registered());
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, channel_.arena()), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);  // page-locked, known to the driver

  auto* in = reinterpret_cast<uint32_t*>(channel_.arena());
  auto* out = reinterpret_cast<uint32_t*>(channel_.arena() + (4 << 20));
  std::iota(in, in + kBytes / 4, 7u);
  std::memset(out, 0, kBytes);
  RoundTrip(in, out, kBytes);
  EXPECT_EQ(std::memcmp(in, out, kBytes), 0);
}

TEST_F(ArenaOnGpu, RegisteringTwiceIsAnErrorAndMoveTransfersOwnership) {
  auto first = HostRegistration::Register(channel_.arena(), channel_.arena_bytes());
  ASSERT_TRUE(first.ok()) << first.status().message();
  auto second = HostRegistration::Register(channel_.arena(), channel_.arena_bytes());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kInvalidArgument) << second.status().message();

  HostRegistration moved = std::move(first).value();
  EXPECT_TRUE(moved.registered());
  ASSERT_TRUE(moved.Release().ok());
  EXPECT_FALSE(moved.registered());
  auto again = HostRegistration::Register(channel_.arena(), channel_.arena_bytes());
  EXPECT_TRUE(again.ok()) << again.status().message();  // released, so registrable again
}

TEST_F(ArenaOnGpu, PinnedStagingCopiesBothWays) {
  auto staging = PinnedBuffer::Allocate(kBytes);
  ASSERT_TRUE(staging.ok()) << staging.status().message();
  auto* in = reinterpret_cast<uint8_t*>(channel_.arena());
  for (size_t i = 0; i < kBytes; ++i) in[i] = static_cast<uint8_t>(i * 31);
  std::memcpy(staging->data(), in, kBytes);  // the staging copy
  std::vector<uint8_t> out(kBytes);
  RoundTrip(staging->data(), out.data(), kBytes);
  EXPECT_EQ(std::memcmp(in, out.data(), kBytes), 0);
}

}  // namespace
}  // namespace es::cuda
