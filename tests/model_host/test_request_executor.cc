// RequestExecutor reads descriptors written by another process, so it must
// distrust them: every corrupt offset, size, rank or count becomes an error
// completion for that request, never a read outside the arena. The model is a
// fake (a test seam behind the ModelRunner interface) that echoes its input.
#include "model_host/request_executor.h"

#include <gtest/gtest.h>

#include <cstring>

namespace es {
namespace {

class EchoRunner : public ModelRunner {
 public:
  explicit EchoRunner(ModelConfig config) : config_(std::move(config)) {}
  Status Run(const std::vector<TensorView>& inputs, const OutputAllocator& alloc) override {
    Status error;
    void* out = alloc(0, inputs[0].datatype, inputs[0].shape, inputs[0].bytes * scale_, &error);
    if (out == nullptr) return error;
    std::memcpy(out, inputs[0].data, inputs[0].bytes);
    return Status::Ok();
  }
  const ModelConfig& config() const override { return config_; }
  int64_t version() const override { return 1; }
  size_t scale_ = 1;  // >1 makes the output larger than the input

 private:
  ModelConfig config_;
};

class RequestExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ipc::ChannelOptions options;
    options.arena_bytes = 1 << 16;
    auto c = ipc::Channel::Create(options);
    ASSERT_TRUE(c.ok());
    channel_ = std::move(c).value();
    ModelConfig config;
    config.name = "echo";
    config.platform = "torchscript";
    config.max_batch_size = 8;
    config.inputs = {{"x", DataType::kFp32, {4}}};
    config.outputs = {{"y", DataType::kFp32, {4}}};
    config.versions = {1};
    auto runner = std::make_unique<EchoRunner>(config);
    runner_ = runner.get();
    executor_ = std::make_unique<RequestExecutor>(&channel_);
    executor_->AddModel(std::move(runner));
  }

  // A valid request: 2 rows of 4 floats at offset 0, output region at 4096.
  ipc::RequestDesc Valid() const {
    ipc::RequestDesc r{};
    r.request_id = 42;
    r.version = 1;
    std::strcpy(r.model, "echo");
    r.num_inputs = 1;
    r.inputs[0] = {0, 32, static_cast<uint32_t>(DataType::kFp32), 2, {2, 4}};
    r.output_offset = 4096;
    r.output_capacity = 64;
    return r;
  }

  ipc::CompletionDesc Execute(const ipc::RequestDesc& r) const {
    ipc::CompletionDesc c{};
    executor_->Execute(r, &c);
    return c;
  }

  void ExpectRejected(const ipc::RequestDesc& r, StatusCode code, const std::string& needle) const {
    const ipc::CompletionDesc c = Execute(r);
    EXPECT_EQ(c.request_id, r.request_id);
    EXPECT_EQ(c.status_code, static_cast<uint32_t>(code)) << c.message;
    EXPECT_EQ(c.num_outputs, 0u);
    EXPECT_NE(std::string(c.message).find(needle), std::string::npos) << c.message;
  }

  ipc::Channel channel_;
  EchoRunner* runner_ = nullptr;
  std::unique_ptr<RequestExecutor> executor_;
};

TEST_F(RequestExecutorTest, ValidRequestIsAnsweredInPlace) {
  const float in[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  std::memcpy(channel_.arena(), in, sizeof(in));
  const ipc::CompletionDesc c = Execute(Valid());
  ASSERT_EQ(c.status_code, 0u) << c.message;
  ASSERT_EQ(c.num_outputs, 1u);
  EXPECT_EQ(c.outputs[0].offset, 4096u);
  EXPECT_EQ(c.outputs[0].bytes, 32u);
  EXPECT_EQ(c.outputs[0].ndim, 2u);
  EXPECT_EQ(std::memcmp(channel_.arena() + 4096, in, sizeof(in)), 0);
}

TEST_F(RequestExecutorTest, InputOutsideTheArenaIsRejected) {
  auto r = Valid();
  r.inputs[0].offset = (1 << 16) - 16;  // starts inside, ends outside
  ExpectRejected(r, StatusCode::kInvalidArgument, "outside the arena");
  r.inputs[0].offset = UINT64_MAX - 8;  // would wrap around
  ExpectRejected(r, StatusCode::kInvalidArgument, "outside the arena");
}

TEST_F(RequestExecutorTest, SizeThatDisagreesWithTheShapeIsRejected) {
  auto r = Valid();
  r.inputs[0].bytes = 1 << 12;
  ExpectRejected(r, StatusCode::kInvalidArgument, "byte size disagrees");
  r = Valid();
  r.inputs[0].dims[0] = -3;
  ExpectRejected(r, StatusCode::kInvalidArgument, "negative or huge");
  r = Valid();
  r.inputs[0].dims[0] = INT64_MAX;
  ExpectRejected(r, StatusCode::kInvalidArgument, "negative or huge");
  // Dims whose byte size wraps to exactly the bytes the descriptor gives:
  // 2^62 * 4 elements * 4 bytes = 2^66, which wraps to 0.
  r = Valid();
  r.inputs[0].dims[0] = int64_t{1} << 62;
  r.inputs[0].dims[1] = 4;
  r.inputs[0].bytes = 0;
  ExpectRejected(r, StatusCode::kInvalidArgument, "negative or huge");
  // ... and to 32, the size of the valid [2, 4] FP32 input.
  r.inputs[0].dims[0] = (int64_t{1} << 62) + 2;
  r.inputs[0].bytes = 32;
  ExpectRejected(r, StatusCode::kInvalidArgument, "negative or huge");
}

TEST_F(RequestExecutorTest, BadRankCountTypeOrModelIsRejected) {
  auto r = Valid();
  r.inputs[0].ndim = 99;
  ExpectRejected(r, StatusCode::kInvalidArgument, "rank");
  r = Valid();
  r.num_inputs = 7;
  ExpectRejected(r, StatusCode::kInvalidArgument, "input count");
  r = Valid();
  r.inputs[0].datatype = 12345;
  ExpectRejected(r, StatusCode::kInvalidArgument, "datatype");
  r = Valid();
  std::memset(r.model, 'z', sizeof(r.model));  // no terminating NUL
  ExpectRejected(r, StatusCode::kNotFound, "is not loaded");
  r = Valid();
  r.version = 3;
  ExpectRejected(r, StatusCode::kNotFound, "version 3");
}

TEST_F(RequestExecutorTest, OutputRegionIsChecked) {
  auto r = Valid();
  r.output_offset = (1 << 16) - 8;
  ExpectRejected(r, StatusCode::kInvalidArgument, "output region");
  r = Valid();
  runner_->scale_ = 4;  // 128 bytes into a 64-byte reservation
  ExpectRejected(r, StatusCode::kResourceExhausted, "reserved");
}

}  // namespace
}  // namespace es
