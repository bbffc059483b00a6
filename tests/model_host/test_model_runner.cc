// ModelRunner over real TorchScript files: zoo models, and small hand-written
// modules that return odd outputs or throw.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "model_host/model_runner.h"
#include "torch_utils/model_zoo.h"
#include "tests/common/temp_dir.h"

namespace es {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kClasses = 10;

ModelConfig MnistConfig(const std::string& name, const fs::path& repo) {
  ModelConfig config;
  config.name = name;
  config.platform = "torchscript";
  config.directory = (repo / name).string();
  config.max_batch_size = 64;
  config.inputs = {{"input", DataType::kFp32, {1, 28, 28}}};
  config.outputs = {{"probabilities", DataType::kFp32, {kClasses}}};
  config.versions = {1};
  config.hosts = {"cpu0"};
  return config;
}

void Save(torch::jit::Module module, const ModelConfig& config) {
  fs::create_directories(fs::path(config.directory) / "1");
  module.save(config.directory + "/1/model.pt");
}

torch::jit::Module Scripted(const std::string& class_name, const std::string& source) {
  torch::jit::Module m(class_name);
  m.define(source);
  return m;
}

std::vector<float> RandomImages(int64_t batch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> data(static_cast<size_t>(batch * 28 * 28));
  for (float& x : data) x = pixel(rng);
  return data;
}

TensorView ImagesView(std::vector<float>& data) {
  const auto batch = static_cast<int64_t>(data.size() / (28 * 28));
  return {DataType::kFp32, {batch, 1, 28, 28}, data.data(), data.size() * sizeof(float)};
}

// Collects each output in its own buffer, as the arena would.
struct CapturedOutput {
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};

struct OutputSink {
  std::vector<CapturedOutput> outputs;

  OutputAllocator Allocator() {
    return [this](size_t index, DataType datatype, const std::vector<int64_t>& shape, size_t bytes,
                  Status*) -> void* {
      if (outputs.size() <= index) outputs.resize(index + 1);
      outputs[index] = {datatype, shape, std::vector<char>(bytes)};
      return outputs[index].bytes.data();
    };
  }
  std::vector<float> Floats(size_t index) const {
    std::vector<float> v(outputs[index].bytes.size() / sizeof(float));
    std::memcpy(v.data(), outputs[index].bytes.data(), outputs[index].bytes.size());
    return v;
  }
};

class ZooRunnerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooRunnerTest, RunsABatchLikeTheModuleItself) {
  es::testing::TempDir repo;
  const ModelConfig config = MnistConfig(GetParam(), repo.path());
  torch::jit::Module module = BuildZooModel(GetParam(), 7).value();
  Save(module, config);

  auto runner = ModelRunner::Load(config, 1, "cpu");
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  EXPECT_EQ((*runner)->version(), 1);
  EXPECT_EQ((*runner)->config().name, GetParam());

  std::vector<float> images = RandomImages(3, 42);
  OutputSink sink;
  ASSERT_TRUE((*runner)->Run({ImagesView(images)}, sink.Allocator()).ok());

  ASSERT_EQ(sink.outputs.size(), 1u);
  EXPECT_EQ(sink.outputs[0].datatype, DataType::kFp32);
  EXPECT_EQ(sink.outputs[0].shape, (std::vector<int64_t>{3, kClasses}));
  const std::vector<float> probs = sink.Floats(0);
  ASSERT_EQ(probs.size(), 3u * kClasses);

  torch::Tensor expected =
      module.forward({torch::from_blob(images.data(), {3, 1, 28, 28}).clone()}).toTensor();
  for (int64_t row = 0; row < 3; ++row) {
    double sum = 0;
    for (int64_t c = 0; c < kClasses; ++c) {
      const float p = probs[static_cast<size_t>(row * kClasses + c)];
      sum += p;
      EXPECT_NEAR(p, expected[row][c].item<float>(), 1e-6) << "row " << row << " class " << c;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << row;
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooRunnerTest, ::testing::ValuesIn(ZooArchitectures()));

TEST(ModelRunnerTest, ConcurrentRunsAgree) {
  es::testing::TempDir repo;
  const ModelConfig config = MnistConfig("mlp", repo.path());
  Save(BuildZooModel("mlp", 3).value(), config);
  auto runner = ModelRunner::Load(config, 1, "cpu");
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();

  std::vector<float> reference_images = RandomImages(4, 9);
  OutputSink reference;
  ASSERT_TRUE((*runner)->Run({ImagesView(reference_images)}, reference.Allocator()).ok());

  std::vector<std::thread> threads;
  std::vector<int> agreed(4, 0);
  for (size_t t = 0; t < agreed.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        std::vector<float> images = RandomImages(4, 9);
        OutputSink sink;
        if ((*runner)->Run({ImagesView(images)}, sink.Allocator()).ok() &&
            sink.Floats(0) == reference.Floats(0)) {
          ++agreed[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int n : agreed) EXPECT_EQ(n, 20);
}

TEST(ModelRunnerTest, TupleOutputsMatchConfigOrder) {
  es::testing::TempDir repo;
  ModelConfig config = MnistConfig("pair", repo.path());
  config.outputs.push_back({"count", DataType::kInt64, {1}});
  Save(Scripted("Pair", R"JIT(
def forward(self, x):
    p = torch.softmax(torch.flatten(x, 1)[:, 0:10], 1)
    return p, torch.argmax(p, 1, True)
)JIT"),
       config);
  auto runner = ModelRunner::Load(config, 1, "cpu");
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();

  std::vector<float> images = RandomImages(2, 1);
  OutputSink sink;
  ASSERT_TRUE((*runner)->Run({ImagesView(images)}, sink.Allocator()).ok());
  ASSERT_EQ(sink.outputs.size(), 2u);
  EXPECT_EQ(sink.outputs[0].shape, (std::vector<int64_t>{2, kClasses}));
  EXPECT_EQ(sink.outputs[1].datatype, DataType::kInt64);
  EXPECT_EQ(sink.outputs[1].shape, (std::vector<int64_t>{2, 1}));
}

TEST(ModelRunnerTest, DictOutputsAreMatchedByName) {
  es::testing::TempDir repo;
  const ModelConfig config = MnistConfig("dict", repo.path());
  Save(Scripted("Dict", R"JIT(
def forward(self, x):
    return {"other": x, "probabilities": torch.softmax(torch.flatten(x, 1)[:, 0:10], 1)}
)JIT"),
       config);
  auto runner = ModelRunner::Load(config, 1, "cpu");
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();

  std::vector<float> images = RandomImages(2, 1);
  OutputSink sink;
  ASSERT_TRUE((*runner)->Run({ImagesView(images)}, sink.Allocator()).ok());
  EXPECT_EQ(sink.outputs[0].shape, (std::vector<int64_t>{2, kClasses}));
}

TEST(ModelRunnerTest, ThrowingForwardIsInternalAndNamesTheModel) {
  es::testing::TempDir repo;
  const ModelConfig config = MnistConfig("boomer", repo.path());
  // Throws only for batches over one, so that the warm-up passes.
  Save(Scripted("Boom", R"JIT(
def forward(self, x):
    assert x.size(0) < 2, "boom"
    return torch.softmax(torch.flatten(x, 1)[:, 0:10], 1)
)JIT"),
       config);
  auto runner = ModelRunner::Load(config, 1, "cpu");
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();

  std::vector<float> images = RandomImages(2, 1);
  OutputSink sink;
  const Status status = (*runner)->Run({ImagesView(images)}, sink.Allocator());
  EXPECT_EQ(status.code(), StatusCode::kInternal);
  EXPECT_NE(status.message().find("model 'boomer' version 1"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("boom"), std::string::npos) << status.message();
  EXPECT_EQ(status.message().find('\n'), std::string::npos) << status.message();
  EXPECT_TRUE(sink.outputs.empty());
}

TEST(ModelRunnerTest, OperatorErrorIsOneLine) {
  es::testing::TempDir repo;
  ModelConfig config = MnistConfig("mlp", repo.path());
  config.inputs[0].dims = {1, -1, 28};  // lets a wrong shape reach the module
  Save(BuildZooModel("mlp", 1).value(), config);
  auto runner = ModelRunner::Load(config, 1, "cpu");
  // Warm-up ran [1, 1, 1, 28] through a 784-wide layer.
  ASSERT_FALSE(runner.ok());
  EXPECT_EQ(runner.status().code(), StatusCode::kInternal);
  EXPECT_NE(runner.status().message().find("model 'mlp' version 1 warm-up"), std::string::npos)
      << runner.status().message();
  EXPECT_EQ(runner.status().message().find('\n'), std::string::npos) << runner.status().message();
  EXPECT_LE(runner.status().message().size(), 400u);
}

TEST(ModelRunnerTest, OutputDatatypeMismatchIsInvalidArgument) {
  es::testing::TempDir repo;
  ModelConfig config = MnistConfig("mlp", repo.path());
  config.outputs[0].datatype = DataType::kFp64;
  Save(BuildZooModel("mlp", 1).value(), config);
  auto runner = ModelRunner::Load(config, 1, "cpu");
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();

  std::vector<float> images = RandomImages(1, 1);
  OutputSink sink;
  const Status status = (*runner)->Run({ImagesView(images)}, sink.Allocator());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("'mlp'"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("'probabilities'"), std::string::npos) << status.message();
  EXPECT_TRUE(sink.outputs.empty());
}

TEST(ModelRunnerTest, OutputShapeMismatchIsInvalidArgument) {
  es::testing::TempDir repo;
  ModelConfig config = MnistConfig("mlp", repo.path());
  config.outputs[0].dims = {12};
  Save(BuildZooModel("mlp", 1).value(), config);
  auto runner = ModelRunner::Load(config, 1, "cpu");
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();

  std::vector<float> images = RandomImages(1, 1);
  OutputSink sink;
  const Status status = (*runner)->Run({ImagesView(images)}, sink.Allocator());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("[1, 10]"), std::string::npos) << status.message();
}

TEST(ModelRunnerTest, OutputCountMismatchIsInvalidArgument) {
  es::testing::TempDir repo;
  ModelConfig config = MnistConfig("mlp", repo.path());
  config.outputs.push_back({"extra", DataType::kFp32, {kClasses}});
  Save(BuildZooModel("mlp", 1).value(), config);
  auto runner = ModelRunner::Load(config, 1, "cpu");
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();

  std::vector<float> images = RandomImages(1, 1);
  OutputSink sink;
  EXPECT_EQ((*runner)->Run({ImagesView(images)}, sink.Allocator()).code(),
            StatusCode::kInvalidArgument);
}

TEST(ModelRunnerTest, RefusingAllocatorStatusIsReturned) {
  es::testing::TempDir repo;
  const ModelConfig config = MnistConfig("mlp", repo.path());
  Save(BuildZooModel("mlp", 1).value(), config);
  auto runner = ModelRunner::Load(config, 1, "cpu");
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();

  std::vector<float> images = RandomImages(2, 1);
  const OutputAllocator refuse = [](size_t, DataType, const std::vector<int64_t>&, size_t,
                                    Status* error) -> void* {
    *error = Status::ResourceExhausted("arena full");
    return nullptr;
  };
  const Status status = (*runner)->Run({ImagesView(images)}, refuse);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(), "arena full");
}

TEST(ModelRunnerTest, WrongInputsAreInvalidArgument) {
  es::testing::TempDir repo;
  const ModelConfig config = MnistConfig("mlp", repo.path());
  Save(BuildZooModel("mlp", 1).value(), config);
  auto runner = ModelRunner::Load(config, 1, "cpu");
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  OutputSink sink;

  EXPECT_EQ((*runner)->Run({}, sink.Allocator()).code(), StatusCode::kInvalidArgument);

  std::vector<float> images = RandomImages(2, 1);
  TensorView short_view = ImagesView(images);
  short_view.bytes -= sizeof(float);
  EXPECT_EQ((*runner)->Run({short_view}, sink.Allocator()).code(), StatusCode::kInvalidArgument);

  TensorView wrong_type = ImagesView(images);
  wrong_type.datatype = DataType::kInt32;
  EXPECT_EQ((*runner)->Run({wrong_type}, sink.Allocator()).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(sink.outputs.empty());
}

TEST(ModelRunnerTest, MissingFileNamesThePath) {
  es::testing::TempDir repo;
  const ModelConfig config = MnistConfig("ghost", repo.path());
  auto runner = ModelRunner::Load(config, 3, "cpu");
  ASSERT_FALSE(runner.ok());
  EXPECT_EQ(runner.status().code(), StatusCode::kNotFound);
  EXPECT_NE(runner.status().message().find(config.directory + "/3/model.pt"), std::string::npos)
      << runner.status().message();
}

TEST(ModelRunnerTest, CorruptFileIsInternal) {
  es::testing::TempDir repo;
  const ModelConfig config = MnistConfig("junk", repo.path());
  fs::create_directories(fs::path(config.directory) / "1");
  std::FILE* f = std::fopen((config.directory + "/1/model.pt").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("not a zip archive", f);
  std::fclose(f);
  auto runner = ModelRunner::Load(config, 1, "cpu");
  ASSERT_FALSE(runner.ok());
  EXPECT_EQ(runner.status().code(), StatusCode::kInternal);
  EXPECT_NE(runner.status().message().find("model 'junk' version 1"), std::string::npos);
}

TEST(ModelRunnerTest, BadDeviceIsAnError) {
  es::testing::TempDir repo;
  const ModelConfig config = MnistConfig("mlp", repo.path());
  Save(BuildZooModel("mlp", 1).value(), config);
  auto runner = ModelRunner::Load(config, 1, "abacus:0");
  EXPECT_EQ(runner.status().code(), StatusCode::kInvalidArgument);
  runner = ModelRunner::Load(config, 1, "cuda:99");  // none here, nor that many anywhere
  EXPECT_EQ(runner.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(runner.status().message().find("cuda:99"), std::string::npos);
}

TEST(ModelRunnerTest, EnsembleIsNotLoadable) {
  es::testing::TempDir repo;
  ModelConfig config = MnistConfig("ens", repo.path());
  config.platform = "ensemble";
  auto runner = ModelRunner::Load(config, 1, "cpu");
  EXPECT_EQ(runner.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace es
