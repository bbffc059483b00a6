// The zoo: deterministic, trainable, and round-trips through a TorchScript file.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/script.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/common/temp_dir.h"
#include "torch_utils/model_zoo.h"

namespace es {
namespace {

torch::Tensor Images(int64_t batch) {
  return torch::rand({batch, 1, 28, 28}, at::detail::createCPUGenerator(5), torch::kFloat32);
}

bool SameParameters(const torch::jit::Module& a, const torch::jit::Module& b) {
  auto pa = a.named_parameters();
  auto pb = b.named_parameters();
  if (pa.size() != pb.size()) return false;
  for (auto ia = pa.begin(), ib = pb.begin(); ia != pa.end(); ++ia, ++ib) {
    if ((*ia).name != (*ib).name || !torch::equal((*ia).value, (*ib).value)) return false;
  }
  return true;
}

class ZooTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooTest, SameSeedSameWeightsOtherSeedOtherWeights) {
  const torch::jit::Module a = BuildZooModel(GetParam(), 11).value();
  EXPECT_TRUE(SameParameters(a, BuildZooModel(GetParam(), 11).value()));
  EXPECT_FALSE(SameParameters(a, BuildZooModel(GetParam(), 12).value()));
}

TEST_P(ZooTest, ParametersAreTrainable) {
  torch::jit::Module m = BuildZooModel(GetParam(), 1).value();
  size_t count = 0;
  for (const auto& p : m.named_parameters()) {
    EXPECT_TRUE(p.value.requires_grad()) << p.name;
    ++count;
  }
  EXPECT_GE(count, 4u);

  // logits is what training optimises: gradients must reach every parameter.
  const torch::Tensor logits = m.run_method("logits", Images(4)).toTensor();
  torch::Tensor loss = torch::nll_loss(torch::log_softmax(logits, 1), torch::arange(4));
  loss.backward();
  for (const auto& p : m.named_parameters()) {
    EXPECT_TRUE(p.value.grad().defined()) << p.name;
  }
}

TEST_P(ZooTest, ForwardIsSoftmaxOfLogits) {
  torch::jit::Module m = BuildZooModel(GetParam(), 2).value();
  torch::NoGradGuard no_grad;
  const torch::Tensor x = Images(3);
  const torch::Tensor probs = m.forward({x}).toTensor();
  EXPECT_EQ(probs.sizes(), (std::vector<int64_t>{3, 10}));
  EXPECT_TRUE(torch::allclose(probs.sum(1), torch::ones({3}), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(probs, torch::softmax(m.run_method("logits", x).toTensor(), 1)));
}

TEST_P(ZooTest, RoundTripsThroughAFile) {
  es::testing::TempDir dir;
  const std::string path = (dir.path() / "model.pt").string();
  torch::jit::Module m = BuildZooModel(GetParam(), 3).value();
  m.save(path);
  torch::jit::Module loaded = torch::jit::load(path);
  torch::NoGradGuard no_grad;
  const torch::Tensor x = Images(2);
  EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), loaded.forward({x}).toTensor()));
  EXPECT_TRUE(SameParameters(m, loaded));
}

const ZooDescription& DescriptionOf(const std::string& architecture) {
  for (const ZooDescription& d : ZooDescriptions()) {
    if (d.architecture == architecture) return d;
  }
  throw std::runtime_error("no zoo architecture " + architecture);
}

// The textbook layers on the module's own parameters; dropout only in train
// mode (with the global generator, as the zoo's: the same seed draws the
// same units).
torch::Tensor TextbookLogits(const torch::jit::Module& m, const ZooDescription& description, torch::Tensor x,
                             bool train) {
  for (const ZooLayer& layer : description.layers) {
    const auto weight = [&] { return m.attr(layer.name + "_w").toTensor(); };
    const auto bias = [&] { return m.attr(layer.name + "_b").toTensor(); };
    switch (layer.kind) {
      case ZooLayer::Kind::kNormalize:
        x = (x - 0.2860) / 0.3530;
        break;
      case ZooLayer::Kind::kConv:
        x = torch::max_pool2d(torch::relu(torch::conv2d(x, weight(), bias(), 1, 1)), {2, 2});
        break;
      case ZooLayer::Kind::kFlatten:
        x = torch::flatten(x, 1);
        break;
      case ZooLayer::Kind::kLinear:
        x = torch::linear(x, weight(), bias());
        if (layer.relu) x = torch::relu(x);
        break;
      case ZooLayer::Kind::kDropout:
        if (train) x = torch::dropout(x, layer.dropout, true);
        break;
    }
  }
  return x;
}

// The zoo's logits() are the textbook layers on its parameters, in eval
// mode (serving) and in train mode (training, with the same dropout draws):
// in particular a convolution's relu then max_pool2d, which the
// zoo computes in another order and by other means (ZooConvSource: strided
// maxima when serving, a channels-last max_pool2d when training), to the
// very same values.
TEST_P(ZooTest, LogitsAreTheTextbookLayersOnTheParameters) {
  torch::jit::Module m = BuildZooModel(GetParam(), 4).value();
  const ZooDescription& description = DescriptionOf(GetParam());
  torch::NoGradGuard no_grad;
  const torch::Tensor images = Images(5);
  const torch::Tensor x = TextbookLogits(m, description, images, false);
  EXPECT_LE((m.run_method("logits", images).toTensor() - x).abs().max().item<double>(), 1e-6) << "eval mode";
  // The same seed before each, for the same dropout draws (the global
  // generator: the tests of this binary that draw seed it themselves).
  m.train();
  torch::manual_seed(21);
  const torch::Tensor train_mode = m.run_method("logits", images).toTensor();
  torch::manual_seed(21);
  const torch::Tensor textbook = TextbookLogits(m, description, images, true);
  const double scale = std::max(1.0, textbook.abs().max().item<double>());
  EXPECT_LE((train_mode - textbook).abs().max().item<double>(), 1e-6 * scale) << "train mode";
}

// What training optimises by: in train mode, every parameter's gradient of
// a loss on the zoo's logits is the textbook layers' (the same dropout
// draws), whatever memory layout the zoo computes in.
TEST_P(ZooTest, TrainModeGradientsAreTheTextbookLayers) {
  const ZooDescription& description = DescriptionOf(GetParam());
  torch::jit::Module m = BuildZooModel(GetParam(), 6).value();
  m.train();
  std::vector<torch::Tensor> parameters;
  for (const auto& p : m.named_parameters()) parameters.push_back(p.value);
  const torch::Tensor images = Images(6);
  const torch::Tensor mix = torch::rand({6, 10}, at::detail::createCPUGenerator(9), torch::kFloat32);
  const auto gradients = [&](const torch::Tensor& logits) {
    return torch::autograd::grad({(logits * mix).sum()}, parameters);
  };
  torch::manual_seed(22);
  const auto zoo = gradients(m.run_method("logits", images).toTensor());
  torch::manual_seed(22);
  const auto textbook = gradients(TextbookLogits(m, description, images, true));
  ASSERT_EQ(zoo.size(), textbook.size());
  for (size_t i = 0; i < zoo.size(); ++i) {
    const double scale = std::max(1.0, textbook[i].abs().max().item<double>());
    EXPECT_LE((zoo[i] - textbook[i]).abs().max().item<double>(), 1e-5 * scale) << "parameter " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooTest, ::testing::ValuesIn(ZooArchitectures()));

// Dropout (convnet_wide) follows the module's mode: active after train(),
// off after eval(), and what is saved after eval() (as ensemble-train saves
// a served member) answers the same every time. Every zoo model is built in
// eval mode, so a served model is deterministic whatever it holds.
TEST(ZooTest, DropoutFollowsTrainAndEvalAndSavedModelsAreDeterministic) {
  torch::jit::Module m = BuildZooModel("convnet_wide", 4).value();
  torch::NoGradGuard no_grad;
  const torch::Tensor x = Images(8);
  EXPECT_TRUE(torch::equal(m.run_method("logits", x).toTensor(), m.run_method("logits", x).toTensor()))
      << "a freshly built model must be in eval mode";
  m.train();
  torch::manual_seed(1);
  const torch::Tensor a = m.run_method("logits", x).toTensor();
  const torch::Tensor b = m.run_method("logits", x).toTensor();
  EXPECT_FALSE(torch::equal(a, b)) << "dropout must be active in training mode";
  m.eval();
  const torch::Tensor c = m.run_method("logits", x).toTensor();
  EXPECT_TRUE(torch::equal(c, m.run_method("logits", x).toTensor()));

  es::testing::TempDir dir;
  const std::string path = (dir.path() / "model.pt").string();
  m.save(path);
  torch::jit::Module loaded = torch::jit::load(path);
  EXPECT_TRUE(torch::equal(loaded.run_method("logits", x).toTensor(), c));
  EXPECT_TRUE(torch::equal(loaded.forward({x}).toTensor(), loaded.forward({x}).toTensor()));
}

TEST(ZooTest, UnknownArchitectureIsAnErrorNamingTheKnownOnes) {
  const StatusOr<torch::jit::Module> m = BuildZooModel("transformer", 1);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("unknown zoo architecture 'transformer'"), std::string::npos)
      << m.status().message();
  for (const std::string& known : ZooArchitectures()) {
    EXPECT_NE(m.status().message().find(known), std::string::npos) << m.status().message();
  }
}

}  // namespace
}  // namespace es
