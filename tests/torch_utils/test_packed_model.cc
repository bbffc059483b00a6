// Packed models: M zoo members in one module answer as each member does, in
// one forward, before and after a trip through a file; train as the members
// do (gradients); give each member back (UnpackMember); and members that
// cannot be packed are refused with the reason.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <ostream>
#include <string>
#include <vector>

#include "tests/common/temp_dir.h"
#include "torch_utils/model_zoo.h"
#include "torch_utils/packed_model.h"

namespace es {
namespace {

// [B, 1, 28, 28] pixels in [0, 1], as clients send them.
torch::Tensor Images(int64_t batch) {
  return torch::rand({batch, 1, 28, 28}, at::detail::createCPUGenerator(5), torch::kFloat32);
}

std::vector<torch::jit::Module> Members(const std::string& architecture, int64_t count) {
  std::vector<torch::jit::Module> members;
  for (int64_t k = 0; k < count; ++k) members.push_back(BuildZooModel(architecture, 100 + k).value());
  return members;
}

torch::jit::Module Pack(const std::vector<torch::jit::Module>& members) {
  StatusOr<torch::jit::Module> packed = PackMembers(members);
  EXPECT_TRUE(packed.ok()) << packed.status().ToString();
  return std::move(packed).value();
}

std::string TypeName(const torch::jit::Module& m) { return m.type()->name()->name(); }

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a - b).abs().max().item<double>();
}

// Member k's share of a packed parameter, as packed_model.h lays them out:
// convolution filters (and their biases) concatenated along dim 0, linear
// weights [M, in, out] (the member's transposed), linear biases [M, 1, out].
torch::Tensor MemberSlice(const torch::Tensor& packed, const torch::Tensor& member, int64_t k) {
  if (packed.dim() == member.dim()) return packed.narrow(0, k * member.size(0), member.size(0));
  if (member.dim() == 2) return packed[k].t();
  return packed[k].reshape(member.sizes());
}

// Both methods of `packed`, member by member, within 1e-5 (max abs). 40
// rows: more than one chunk of rows for the convnets (twelve convnets take
// 13 rows at a time, three convnet_wide 27), so chunking is checked too.
void ExpectAnswersAsMembers(torch::jit::Module& packed, std::vector<torch::jit::Module>& members,
                            const std::string& context) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x = Images(40);
  const auto count = static_cast<int64_t>(members.size());
  const torch::Tensor probs = packed.forward({x}).toTensor();
  const torch::Tensor logits = packed.run_method("logits", x).toTensor();
  ASSERT_EQ(probs.sizes(), (std::vector<int64_t>{40, count, 10})) << context;
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{40, count, 10})) << context;
  for (int64_t k = 0; k < count; ++k) {
    EXPECT_LE(MaxAbsDiff(probs.select(1, k), members[k].forward({x}).toTensor()), 1e-5) << context << ", member " << k;
    EXPECT_LE(MaxAbsDiff(logits.select(1, k), members[k].run_method("logits", x).toTensor()), 1e-5)
        << context << ", member " << k;
  }
}

struct PackCase {
  std::string architecture;
  int64_t members;
};

void PrintTo(const PackCase& c, std::ostream* os) { *os << c.members << " " << c.architecture; }

std::vector<PackCase> Cases() {
  std::vector<PackCase> cases;
  for (const std::string& architecture : ZooArchitectures()) cases.push_back({architecture, 3});
  cases.push_back({"convnet", 12});
  return cases;
}

class PackedModelTest : public ::testing::TestWithParam<PackCase> {};

TEST_P(PackedModelTest, AnswersAsEachMemberAlsoAfterAFileRoundTrip) {
  std::vector<torch::jit::Module> members = Members(GetParam().architecture, GetParam().members);
  torch::jit::Module packed = Pack(members);
  const std::string type = TypeName(members[0]);
  EXPECT_EQ(TypeName(packed), "Packed" + type);
  EXPECT_FALSE(packed.attr("training").toBool()) << "packed modules are built for serving, in eval mode";
  ExpectAnswersAsMembers(packed, members, "built");

  es::testing::TempDir dir;
  const std::string path = dir.Path("packed.pt");
  packed.save(path);
  torch::jit::Module loaded = torch::jit::load(path);
  EXPECT_EQ(TypeName(loaded), "Packed" + type);
  EXPECT_EQ(loaded.attr("packed_members").toInt(), GetParam().members);
  EXPECT_EQ(loaded.attr("packed_architecture").toStringRef(), type);
  EXPECT_FALSE(loaded.attr("training").toBool());
  ExpectAnswersAsMembers(loaded, members, "loaded");
}

TEST_P(PackedModelTest, HoldsACopyOfEachMembersParameters) {
  std::vector<torch::jit::Module> members = Members(GetParam().architecture, GetParam().members);
  torch::jit::Module packed = Pack(members);
  EXPECT_EQ(packed.named_parameters().size(), members[0].named_parameters().size());
  for (const auto& p : packed.named_parameters()) {
    EXPECT_TRUE(p.value.requires_grad()) << p.name << ": trainable, as the zoo's parameters are";
    for (size_t k = 0; k < members.size(); ++k) {
      EXPECT_TRUE(
          torch::equal(MemberSlice(p.value, members[k].attr(p.name).toTensor(), k), members[k].attr(p.name).toTensor()))
          << p.name << ", member " << k;
    }
  }

  // Copies, not views: zeroing every member afterwards changes nothing.
  torch::NoGradGuard no_grad;
  const torch::Tensor x = Images(4);
  const torch::Tensor before = packed.forward({x}).toTensor();
  for (torch::jit::Module& member : members) {
    for (const auto& p : member.named_parameters()) p.value.zero_();
  }
  EXPECT_TRUE(torch::equal(packed.forward({x}).toTensor(), before));
}

TEST_P(PackedModelTest, UnpackedMemberIsThePlainMember) {
  std::vector<torch::jit::Module> members = Members(GetParam().architecture, GetParam().members);
  torch::jit::Module packed = Pack(members);
  torch::NoGradGuard no_grad;
  const torch::Tensor x = Images(8);
  std::vector<torch::jit::Module> unpacked;
  for (int64_t k = 0; k < GetParam().members; ++k) {
    StatusOr<torch::jit::Module> member = UnpackMember(packed, k);
    ASSERT_TRUE(member.ok()) << member.status().ToString();
    unpacked.push_back(member.value());
    EXPECT_EQ(TypeName(unpacked[k]), TypeName(members[k]));
    EXPECT_FALSE(unpacked[k].attr("training").toBool());
    EXPECT_LE(MaxAbsDiff(unpacked[k].forward({x}).toTensor(), members[k].forward({x}).toTensor()), 1e-6) << k;
    EXPECT_LE(MaxAbsDiff(unpacked[k].run_method("logits", x).toTensor(), members[k].run_method("logits", x).toTensor()),
              1e-6)
        << k;
    for (const auto& p : members[k].named_parameters()) {
      const torch::Tensor mine = unpacked[k].attr(p.name).toTensor();
      EXPECT_TRUE(torch::equal(mine, p.value) && mine.requires_grad()) << p.name << ", member " << k;
    }
  }

  // Copies, not views: zeroing the packed module afterwards changes nothing.
  const torch::Tensor before = unpacked[0].forward({x}).toTensor();
  for (const auto& p : packed.named_parameters()) p.value.zero_();
  EXPECT_TRUE(torch::equal(unpacked[0].forward({x}).toTensor(), before));
}

INSTANTIATE_TEST_SUITE_P(Zoo, PackedModelTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<PackCase>& test) {
                           return test.param.architecture + "_x" + std::to_string(test.param.members);
                         });

// Training the packed module trains each member as training it alone would:
// the gradient of sum(logits) reaches member k's slice of each parameter as
// it reaches the member's own parameter.
TEST(PackedModelTest, GradientsInTrainingModeAreEachMembersGradients) {
  std::vector<torch::jit::Module> members = Members("convnet", 3);
  torch::jit::Module packed = Pack(members);
  packed.train();
  const torch::Tensor x = Images(8);
  packed.run_method("logits", x).toTensor().sum().backward();
  for (torch::jit::Module& member : members) {
    member.train();
    member.run_method("logits", x).toTensor().sum().backward();
  }
  size_t count = 0;
  for (const auto& p : packed.named_parameters()) {
    ASSERT_TRUE(p.value.requires_grad()) << p.name;
    ASSERT_TRUE(p.value.grad().defined()) << p.name;
    for (size_t k = 0; k < members.size(); ++k) {
      const torch::Tensor mine = members[k].attr(p.name).toTensor();
      EXPECT_LE(MaxAbsDiff(MemberSlice(p.value.grad(), mine, k), mine.grad()), 1e-5) << p.name << ", member " << k;
    }
    ++count;
  }
  EXPECT_EQ(count, 8u);  // conv1, conv2, fc1, fc2: weight and bias each
}

// Dropout (convnet_wide) stands in the packed module as in its members and
// follows the packed module's mode: active after train(), off after eval().
TEST(PackedModelTest, DropoutFollowsTrainAndEval) {
  torch::jit::Module packed = Pack(Members("convnet_wide", 2));
  torch::NoGradGuard no_grad;
  const torch::Tensor x = Images(8);
  packed.train();
  torch::manual_seed(1);
  EXPECT_FALSE(torch::equal(packed.run_method("logits", x).toTensor(), packed.run_method("logits", x).toTensor()))
      << "dropout must be active in training mode";
  packed.eval();
  EXPECT_TRUE(torch::equal(packed.run_method("logits", x).toTensor(), packed.run_method("logits", x).toTensor()));
}

// A member served from a file (its type name then comes back qualified) packs
// as one built here does.
TEST(PackedModelTest, PacksMembersLoadedFromFiles) {
  std::vector<torch::jit::Module> members = Members("cnn", 2);
  es::testing::TempDir dir;
  members[1].save(dir.Path("member.pt"));
  members[1] = torch::jit::load(dir.Path("member.pt"));
  torch::jit::Module packed = Pack(members);
  EXPECT_EQ(packed.attr("packed_architecture").toStringRef(), "CNN");
  ExpectAnswersAsMembers(packed, members, "loaded member");
}

// The refusals: InvalidArgument with a message that says what is wrong.
void ExpectRefused(const std::vector<torch::jit::Module>& members, const std::vector<std::string>& message_parts) {
  const StatusOr<torch::jit::Module> packed = PackMembers(members);
  ASSERT_FALSE(packed.ok());
  EXPECT_EQ(packed.status().code(), StatusCode::kInvalidArgument) << packed.status().ToString();
  for (const std::string& part : message_parts) {
    EXPECT_NE(packed.status().message().find(part), std::string::npos)
        << "'" << part << "' not in: " << packed.status().message();
  }
}

TEST(PackedModelTest, RefusesFewerThanTwoMembers) {
  ExpectRefused({}, {"at least 2 members", "got 0"});
  ExpectRefused(Members("convnet", 1), {"at least 2 members", "got 1"});
}

TEST(PackedModelTest, RefusesMixedArchitectures) {
  std::vector<torch::jit::Module> members = Members("convnet", 3);
  members[1] = BuildZooModel("cnn", 1).value();
  ExpectRefused(members, {"member 1 is a CNN", "member 0 a ConvNet"});
  ExpectRefused({BuildZooModel("mlp", 1).value(), BuildZooModel("wide_mlp", 1).value()},
                {"member 1 is a WideMLP", "member 0 a MLP"});
}

TEST(PackedModelTest, RefusesAMemberWhoseParametersDiffer) {
  std::vector<torch::jit::Module> members = Members("convnet", 3);
  members[2].register_parameter("fc1_w", torch::zeros({64, 32 * 7 * 7}), /*is_buffer=*/false);
  ExpectRefused(members, {"member 2's parameter 'fc1_w'", "[64, 1568]", "[128, 1568]"});

  members = Members("convnet", 2);
  members[1].register_parameter("fc2_b", torch::zeros({10}, torch::kFloat64), /*is_buffer=*/false);
  ExpectRefused(members, {"member 1's parameter 'fc2_b'", "Double"});

  members = Members("convnet", 2);
  members[0].register_parameter("extra", torch::zeros({1}), /*is_buffer=*/false);
  ExpectRefused(members, {"member 0 has a parameter 'extra'"});

  // Same type name, parameters missing.
  torch::jit::Module bare("ConvNet");
  ExpectRefused({Members("convnet", 1)[0], bare}, {"member 1 has no parameter 'conv1_w'"});
}

TEST(PackedModelTest, RefusesAnArchitectureItDoesNotKnow) {
  torch::jit::Module a("Transformer"), b("Transformer");
  ExpectRefused({a, b}, {"'Transformer'", "does not know", "ConvNet"});
}

TEST(PackedModelTest, UnpackRefusesWhatIsNotThere) {
  const torch::jit::Module packed = Pack(Members("cnn", 3));
  for (int64_t k : {-1, 3}) {
    const StatusOr<torch::jit::Module> member = UnpackMember(packed, k);
    ASSERT_FALSE(member.ok()) << k;
    EXPECT_EQ(member.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(member.status().message().find("no member " + std::to_string(k)), std::string::npos)
        << member.status().message();
    EXPECT_NE(member.status().message().find("packs 3 CNN members"), std::string::npos) << member.status().message();
  }
  const StatusOr<torch::jit::Module> plain = UnpackMember(BuildZooModel("cnn", 1).value(), 0);
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plain.status().message().find("not a packed module"), std::string::npos) << plain.status().message();
}

}  // namespace
}  // namespace es
