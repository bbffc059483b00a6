// ensemble-make-demo as a user runs it: files written, exit codes, and a
// written member that ModelRunner loads and runs.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "model_host/model_runner.h"
#include "tests/common/temp_dir.h"
#include "tests/common/test_paths.h"

namespace es {
namespace {

namespace fs = std::filesystem;

// Runs the tool with `args`, output discarded; returns its exit code.
int MakeDemo(const std::string& args) {
  const std::string command = std::string(es::test_paths::kMakeDemoBin) + " " + args + " >/dev/null 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string Slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(MakeDemoTest, WritesTheRepository) {
  es::testing::TempDir tmp;
  const fs::path repo = tmp.path() / "repo";
  ASSERT_EQ(MakeDemo("--out " + repo.string() + " --seed 3 --train-steps 0"), 0);
  for (const char* name : {"mlp", "wide_mlp", "cnn"}) {
    EXPECT_TRUE(fs::is_regular_file(repo / name / "1" / "model.pt")) << name;
  }
  EXPECT_EQ(Slurp(repo / "cnn" / "config.yaml"),
            "platform: torchscript\n"
            "max_batch_size: 64\n"
            "inputs:\n"
            "  - {name: input, datatype: FP32, dims: [1, 28, 28]}\n"
            "outputs:\n"
            "  - {name: probabilities, datatype: FP32, dims: [10]}\n"
            "hosts: [cpu1]\n");
  EXPECT_NE(Slurp(repo / "mlp" / "config.yaml").find("hosts: [cpu0]"), std::string::npos);
  EXPECT_NE(Slurp(repo / "wide_mlp" / "config.yaml").find("hosts: [cpu0]"), std::string::npos);
  EXPECT_EQ(Slurp(repo / "demo_ensemble" / "config.yaml"),
            "platform: ensemble\n"
            "max_batch_size: 64\n"
            "inputs:\n"
            "  - {name: input, datatype: FP32, dims: [1, 28, 28]}\n"
            "outputs:\n"
            "  - {name: probabilities, datatype: FP32, dims: [10]}\n"
            "ensemble:\n"
            "  combine: mean\n"
            "  members:\n"
            "    - {model: mlp}\n"
            "    - {model: wide_mlp}\n"
            "    - {model: cnn}\n");
}

TEST(MakeDemoTest, WrittenMemberServes) {
  es::testing::TempDir tmp;
  ASSERT_EQ(MakeDemo("--out " + tmp.path().string() + " --train-steps 0"), 0);
  ModelConfig config;
  config.name = "wide_mlp";
  config.platform = "torchscript";
  config.directory = (tmp.path() / "wide_mlp").string();
  config.max_batch_size = 64;
  config.inputs = {{"input", DataType::kFp32, {1, 28, 28}}};
  config.outputs = {{"probabilities", DataType::kFp32, {10}}};
  config.versions = {1};
  auto runner = ModelRunner::Load(config, 1, "cpu");
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  std::vector<float> image(28 * 28, 0.5f);
  std::vector<float> probs(10);
  const Status status = (*runner)->Run(
      {{DataType::kFp32, {1, 1, 28, 28}, image.data(), image.size() * sizeof(float)}},
      [&](size_t, DataType, const std::vector<int64_t>&, size_t bytes, Status*) -> void* {
        return bytes == probs.size() * sizeof(float) ? probs.data() : nullptr;
      });
  ASSERT_TRUE(status.ok()) << status.ToString();
  float sum = 0;
  for (float p : probs) sum += p;
  EXPECT_NEAR(sum, 1.0f, 1e-5f);
}

// Runs the tool with `args`; returns its exit code and what it printed.
int MakeDemoOutput(const std::string& args, std::string* output) {
  const std::string command = std::string(es::test_paths::kMakeDemoBin) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  output->clear();
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) *output += buffer;
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// By default the members are trained briefly on Debian's Fashion-MNIST: each
// says so, with its test accuracy, which must be far above chance (10%).
TEST(MakeDemoTest, MembersAreTrainedByDefault) {
  es::testing::TempDir tmp;
  std::string output;
  ASSERT_EQ(MakeDemoOutput("--out " + tmp.path().string(), &output), 0) << output;
  for (const std::string member : {"mlp", "wide_mlp", "cnn"}) {
    const std::string prefix = "trained " + member + ": 300 steps in ";
    const size_t at = output.find(prefix);
    ASSERT_NE(at, std::string::npos) << output;
    const size_t accuracy = output.find("test accuracy ", at);
    ASSERT_NE(accuracy, std::string::npos) << output;
    const double percent = std::atof(output.c_str() + accuracy + 14);
    EXPECT_GT(percent, 60.0) << member << ": " << output;
  }
}

TEST(MakeDemoTest, MissingDataIsOneClearError) {
  es::testing::TempDir tmp;
  std::string output;
  EXPECT_EQ(MakeDemoOutput("--out " + (tmp.path() / "repo").string() + " --data /nonexistent", &output), 1);
  EXPECT_NE(output.find("/nonexistent/train-images-idx3-ubyte.gz"), std::string::npos) << output;
  EXPECT_NE(output.find("--train-steps 0"), std::string::npos) << output;
}

TEST(MakeDemoTest, RefusesANonEmptyDirectoryWithoutForce) {
  es::testing::TempDir tmp;
  std::ofstream(tmp.path() / "keep.txt") << "mine";
  EXPECT_EQ(MakeDemo("--out " + tmp.path().string() + " --train-steps 0"), 1);
  EXPECT_FALSE(fs::exists(tmp.path() / "mlp"));
  EXPECT_EQ(MakeDemo("--out " + tmp.path().string() + " --force --train-steps 0"), 0);
  EXPECT_TRUE(fs::exists(tmp.path() / "mlp" / "1" / "model.pt"));
  EXPECT_TRUE(fs::exists(tmp.path() / "keep.txt"));  // --force replaces only its own folders
}

TEST(MakeDemoTest, UsageErrorsExitTwoAndHelpExitsZero) {
  EXPECT_EQ(MakeDemo("--help"), 0);
  EXPECT_EQ(MakeDemo(""), 2);                         // --out is required
  EXPECT_EQ(MakeDemo("--out /tmp/x --bogus"), 2);     // unknown flag
  EXPECT_EQ(MakeDemo("--out /tmp/x --seed abc"), 2);  // not a number
  EXPECT_EQ(MakeDemo("stray"), 2);                    // positional argument
}

}  // namespace
}  // namespace es
