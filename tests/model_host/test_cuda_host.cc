// The host's CUDA path: device set-up, the arena registered with CUDA, each
// executor thread on its own stream, inputs copied to the GPU straight from
// the arena and outputs back into it. Checked against the same models on the
// CPU. Where this LibTorch has no CUDA (Debian's) the GPU tests skip and the
// CPU-side contracts (clear errors, no-ops) are what is tested.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ipc/channel.h"
#include "model_host/device_setup.h"
#include "model_host/model_runner.h"
#include "torch_utils/model_zoo.h"
#include "model_host/request_executor.h"
#include "tests/common/temp_dir.h"

namespace es {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kClasses = 10;
constexpr int64_t kPixels = 28 * 28;
// GPU vs CPU probabilities: cuDNN convolutions use TF32 by default (LibTorch's
// allow_tf32 for cuDNN), about 1e-3 relative on the logits; wrong data is off
// by far more.
constexpr float kTolerance = 2e-3f;

bool HaveGpu() { return torch::cuda::is_available(); }

#define ES_SKIP_WITHOUT_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "this LibTorch sees no CUDA device"

HostConfig Host(const std::string& device) {
  HostConfig host;
  host.name = "h";
  host.device = device;
  return host;
}

ModelConfig MnistConfig(const std::string& name, const fs::path& repo) {
  ModelConfig config;
  config.name = name;
  config.platform = "torchscript";
  config.directory = (repo / name).string();
  config.max_batch_size = 256;
  config.inputs = {{"input", DataType::kFp32, {1, 28, 28}}};
  config.outputs = {{"probabilities", DataType::kFp32, {kClasses}}};
  config.versions = {1};
  config.hosts = {"h"};
  return config;
}

ModelConfig SaveZoo(const std::string& architecture, const fs::path& repo) {
  const ModelConfig config = MnistConfig(architecture, repo);
  fs::create_directories(fs::path(config.directory) / "1");
  BuildZooModel(architecture, 11).value().save(config.directory + "/1/model.pt");
  return config;
}

std::vector<float> RandomImages(int64_t batch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> data(static_cast<size_t>(batch * kPixels));
  for (float& x : data) x = pixel(rng);
  return data;
}

// The model on the CPU, straight through LibTorch: the reference answers.
std::vector<float> CpuReference(const ModelConfig& config, std::vector<float> images) {
  torch::jit::Module module = torch::jit::load(config.directory + "/1/model.pt");
  module.eval();
  c10::InferenceMode guard;
  const auto batch = static_cast<int64_t>(images.size()) / kPixels;
  torch::Tensor out = module.forward({torch::from_blob(images.data(), {batch, 1, 28, 28})}).toTensor();
  out = out.contiguous();
  return {out.data_ptr<float>(), out.data_ptr<float>() + out.numel()};
}

// --- Everywhere ---------------------------------------------------------------

TEST(CudaHostSetup, CudaDeviceWithoutCudaIsAClearError) {
  if (HaveGpu()) GTEST_SKIP() << "a GPU is visible: the no-GPU error does not apply";
  const Status s = SetUpDevice(Host("cuda:0"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("cuda:0"), std::string::npos) << s.message();
}

TEST(CudaHostSetup, CpuHostsNeitherRegisterNorTakeStreams) {
  ipc::ChannelOptions options;
  options.arena_bytes = 1 << 20;
  auto channel = ipc::Channel::Create(options);
  ASSERT_TRUE(channel.ok());
  std::string note;
  const ArenaRegistration arena = ArenaRegistration::ForHost(Host("cpu"), &*channel, &note);
  EXPECT_FALSE(arena.registered());
  EXPECT_NE(note.find("CPU host"), std::string::npos) << note;
  std::string stream_note;
  { ExecutorDeviceScope scope("cpu", &stream_note); }
  EXPECT_TRUE(stream_note.empty()) << stream_note;
  EXPECT_TRUE(SetUpDevice(Host("cpu")).ok());
}

// --- On a GPU -----------------------------------------------------------------

// A host's data path in-process: a channel whose arena is registered as a
// CUDA host registers it, models loaded on cuda:0, requests executed by
// executor threads each inside its ExecutorDeviceScope.
class CudaHostPath : public ::testing::Test {
 protected:
  void SetUp() override {
    ES_SKIP_WITHOUT_GPU();
    ASSERT_TRUE(SetUpDevice(Host("cuda:0")).ok());
    ipc::ChannelOptions options;
    options.arena_bytes = 64 << 20;
    auto channel = ipc::Channel::Create(options);
    ASSERT_TRUE(channel.ok()) << channel.status().message();
    channel_ = std::move(channel).value();
    std::string note;
    arena_ = ArenaRegistration::ForHost(Host("cuda:0"), &channel_, &note);
    registered_ = arena_.registered();
    RecordProperty("arena", note);
    executor_ = std::make_unique<RequestExecutor>(&channel_);
    for (const char* architecture : {"mlp", "cnn"}) {
      configs_.push_back(SaveZoo(architecture, repo_.path()));
      auto runner = ModelRunner::Load(configs_.back(), 1, "cuda:0");
      ASSERT_TRUE(runner.ok()) << runner.status().message();
      executor_->AddModel(std::move(runner).value());
    }
  }

  // Writes `images` into the arena at `slot` (each slot 1 MiB of input plus
  // 64 KiB of output) and runs `model` on them; returns the probabilities.
  std::vector<float> Infer(const std::string& model, const std::vector<float>& images, size_t slot,
                           ipc::CompletionDesc* completion) {
    const uint64_t base = slot * kSlotBytes;
    const uint64_t bytes = images.size() * sizeof(float);
    std::memcpy(channel_.arena() + base, images.data(), bytes);
    ipc::RequestDesc request{};
    request.request_id = slot + 1;
    request.version = 1;
    std::strncpy(request.model, model.c_str(), sizeof(request.model) - 1);
    request.num_inputs = 1;
    const auto batch = static_cast<int64_t>(images.size()) / kPixels;
    request.inputs[0] = {base, bytes, static_cast<uint32_t>(DataType::kFp32), 4, {batch, 1, 28, 28}};
    request.output_offset = base + kInputBytes;
    request.output_capacity = kSlotBytes - kInputBytes;
    executor_->Execute(request, completion);
    if (completion->status_code != 0 || completion->num_outputs != 1) return {};
    const ipc::TensorDesc& out = completion->outputs[0];
    const auto* p = reinterpret_cast<const float*>(channel_.arena() + out.offset);
    return {p, p + out.bytes / sizeof(float)};
  }

  static void ExpectNear(const std::vector<float>& actual, const std::vector<float>& expected) {
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) ASSERT_NEAR(actual[i], expected[i], kTolerance) << "element " << i;
  }

  static constexpr uint64_t kInputBytes = 1 << 20;
  static constexpr uint64_t kSlotBytes = kInputBytes + (64 << 10);
  es::testing::TempDir repo_;
  ipc::Channel channel_;
  ArenaRegistration arena_;
  bool registered_ = false;
  std::vector<ModelConfig> configs_;
  std::unique_ptr<RequestExecutor> executor_;
};

TEST_F(CudaHostPath, ArenaIsRegistered) { EXPECT_TRUE(registered_); }

TEST_F(CudaHostPath, AnswersEqualTheCpuAndLandInTheOutputRegion) {
  ExecutorDeviceScope scope("cuda:0");
  for (const ModelConfig& config : configs_) {
    for (int64_t batch : {1, 7, 64, 256}) {
      const std::vector<float> images = RandomImages(batch, static_cast<uint32_t>(batch));
      ipc::CompletionDesc completion{};
      const std::vector<float> probs = Infer(config.name, images, 0, &completion);
      ASSERT_EQ(completion.status_code, 0u) << completion.message;
      EXPECT_EQ(completion.outputs[0].offset, kInputBytes);  // in the region the router reserved
      EXPECT_EQ(completion.outputs[0].dims[0], batch);
      ExpectNear(probs, CpuReference(config, images));
    }
  }
}

TEST_F(CudaHostPath, ExecutorsOnTheirOwnStreamsAgreeWithTheCpu) {
  const std::vector<float> images = RandomImages(32, 5);
  const std::vector<float> expected = CpuReference(configs_[1], images);
  constexpr int kThreads = 4;
  std::vector<int> agreed(kThreads, 0);
  std::vector<std::string> notes(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ExecutorDeviceScope scope("cuda:0", &notes[static_cast<size_t>(t)]);
      for (int i = 0; i < 25; ++i) {
        ipc::CompletionDesc completion{};
        const std::vector<float> probs = Infer("cnn", images, static_cast<size_t>(t + 1), &completion);
        bool same = completion.status_code == 0 && probs.size() == expected.size();
        for (size_t k = 0; same && k < probs.size(); ++k) same = std::abs(probs[k] - expected[k]) < kTolerance;
        agreed[static_cast<size_t>(t)] += same ? 1 : 0;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(agreed[static_cast<size_t>(t)], 25) << "thread " << t;
    EXPECT_NE(notes[static_cast<size_t>(t)].find("executor stream"), std::string::npos) << notes[static_cast<size_t>(t)];
  }
}

TEST_F(CudaHostPath, AFailedRequestLeavesTheStreamUsable) {
  ExecutorDeviceScope scope("cuda:0");
  // 28x27 images: the model's reshape/linear fails on the GPU.
  std::vector<float> bad(static_cast<size_t>(2 * 28 * 27), 0.5f);
  std::memcpy(channel_.arena(), bad.data(), bad.size() * sizeof(float));
  ipc::RequestDesc request{};
  request.request_id = 9;
  request.version = 1;
  std::strcpy(request.model, "mlp");
  request.num_inputs = 1;
  request.inputs[0] = {0, bad.size() * sizeof(float), static_cast<uint32_t>(DataType::kFp32), 4, {2, 1, 28, 27}};
  request.output_offset = kInputBytes;
  request.output_capacity = 64 << 10;
  ipc::CompletionDesc failed{};
  executor_->Execute(request, &failed);
  EXPECT_EQ(failed.status_code, static_cast<uint32_t>(StatusCode::kInternal)) << failed.message;

  const std::vector<float> images = RandomImages(3, 1);
  ipc::CompletionDesc completion{};
  const std::vector<float> probs = Infer("mlp", images, 0, &completion);
  ASSERT_EQ(completion.status_code, 0u) << completion.message;
  ExpectNear(probs, CpuReference(configs_[0], images));
}

TEST(CudaHostPathUnregistered, StagingThroughTheDriverGivesTheSameAnswers) {
  ES_SKIP_WITHOUT_GPU();
  ASSERT_EQ(setenv("ES_CUDA_REGISTER_ARENA", "0", 1), 0);
  ipc::ChannelOptions options;
  options.arena_bytes = 4 << 20;
  auto channel = ipc::Channel::Create(options);
  ASSERT_TRUE(channel.ok());
  std::string note;
  const ArenaRegistration arena = ArenaRegistration::ForHost(Host("cuda:0"), &*channel, &note);
  unsetenv("ES_CUDA_REGISTER_ARENA");
  EXPECT_FALSE(arena.registered()) << note;

  es::testing::TempDir repo;
  const ModelConfig config = SaveZoo("wide_mlp", repo.path());
  RequestExecutor executor(&*channel);
  auto runner = ModelRunner::Load(config, 1, "cuda:0");
  ASSERT_TRUE(runner.ok()) << runner.status().message();
  executor.AddModel(std::move(runner).value());
  ExecutorDeviceScope scope("cuda:0");
  const std::vector<float> images = RandomImages(16, 3);
  std::memcpy(channel->arena(), images.data(), images.size() * sizeof(float));
  ipc::RequestDesc request{};
  request.request_id = 1;
  request.version = 1;
  std::strcpy(request.model, "wide_mlp");
  request.num_inputs = 1;
  request.inputs[0] = {0, images.size() * sizeof(float), static_cast<uint32_t>(DataType::kFp32), 4, {16, 1, 28, 28}};
  request.output_offset = 1 << 20;
  request.output_capacity = 64 << 10;
  ipc::CompletionDesc completion{};
  executor.Execute(request, &completion);
  ASSERT_EQ(completion.status_code, 0u) << completion.message;
  const auto* p = reinterpret_cast<const float*>(channel->arena() + completion.outputs[0].offset);
  const std::vector<float> probs(p, p + completion.outputs[0].bytes / sizeof(float));
  const std::vector<float> expected = CpuReference(config, images);
  ASSERT_EQ(probs.size(), expected.size());
  for (size_t i = 0; i < probs.size(); ++i) EXPECT_NEAR(probs[i], expected[i], kTolerance);
}

}  // namespace
}  // namespace es
