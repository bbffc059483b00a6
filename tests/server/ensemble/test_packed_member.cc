// Packed members (EnsembleMember::packed): one call whose outputs hold
// several members' answers, [rows, M, ...]. SplitPacked's checks of what a
// host sent, and an EnsembleCall that counts a packed call as its members
// (combination, weights, quorum, member outputs) — driven by hand, no hosts.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "server/ensemble/ensemble_call.h"
#include "server/ensemble/ensemble_combiner.h"

namespace es {
namespace {

InferOutput Floats(std::vector<int64_t> shape, const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return {"p", DataType::kFp32, std::move(shape), std::move(bytes)};
}

std::vector<float> Values(const InferOutput& o) {
  std::vector<float> v(o.data.size() / sizeof(float));
  std::memcpy(v.data(), o.data.data(), o.data.size());
  return v;
}

TEST(SplitPackedTest, EachMemberGetsItsSliceOfEveryRow) {
  // 2 rows, 3 members, 2 classes: value = 100 * row + 10 * member + class.
  std::vector<float> v;
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 3; ++k)
      for (int c = 0; c < 2; ++c) v.push_back(static_cast<float>(100 * r + 10 * k + c));
  auto split = SplitPacked(Floats({2, 3, 2}, v), 3);
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  ASSERT_EQ(split->size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ((*split)[k].shape, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ((*split)[k].name, "p");
    EXPECT_EQ(Values((*split)[k]), (std::vector<float>{10.f * k, 10.f * k + 1, 100 + 10.f * k, 101 + 10.f * k}));
  }
}

TEST(SplitPackedTest, AnAnswerNotShapedAsPackedIsRefused) {
  const std::vector<float> six(6, 0.5f);
  EXPECT_FALSE(SplitPacked(Floats({3, 2}, six), 3).ok());        // the packed axis is 2, not 3
  EXPECT_FALSE(SplitPacked(Floats({6}, six), 3).ok());           // no packed axis
  EXPECT_FALSE(SplitPacked(Floats({2, 3, 2}, six), 3).ok());     // 12 values said, 6 sent
  EXPECT_FALSE(SplitPacked(Floats({int64_t{1} << 62, 3, 4}, six), 3).ok());  // a size that overflows
  auto bad = SplitPacked(Floats({3, 2}, six), 3);
  EXPECT_NE(bad.status().message().find("[rows, 3, ...]"), std::string::npos) << bad.status().ToString();
}

// An ensemble of a packed entry (two members, weights 1 and 3) and a plain
// member (weight 4), FP32 [2] output.
ModelConfig PackedEnsemble(CombineRule rule, int64_t min_members = 0) {
  ModelConfig c;
  c.name = "packed_trio";
  c.platform = "ensemble";
  c.max_batch_size = 4;
  c.outputs = {{"p", DataType::kFp32, {2}}};
  c.ensemble.members.resize(2);
  c.ensemble.members[0].model = "pack";
  c.ensemble.members[0].packed = {"m1", "m2"};
  c.ensemble.members[0].packed_weights = {1.0, 3.0};
  c.ensemble.members[1].model = "solo";
  c.ensemble.members[1].weight = 4.0;
  c.ensemble.combine = rule;
  c.ensemble.min_members = min_members;
  return c;
}

struct Outcome {
  int answers = 0;
  Status status;
  InferResponse response;
};

std::shared_ptr<EnsembleCall> Call(const ModelConfig& config, Outcome* out, bool member_outputs) {
  auto request = std::make_shared<InferRequest>();
  request->model = &config;
  request->return_member_outputs = member_outputs;
  return std::make_shared<EnsembleCall>(
      request,
      [out](const Status& s, InferResponse r) {
        ++out->answers;
        out->status = s;
        out->response = std::move(r);
      },
      [] {});
}

InferResponse Response(InferOutput output) {
  InferResponse r;
  r.outputs.push_back(std::move(output));
  return r;
}

TEST(PackedMemberTest, APackedCallCountsAsItsMembersWithTheirWeights) {
  const ModelConfig config = PackedEnsemble(CombineRule::kWeightedMean);
  EXPECT_EQ(config.ensemble.MemberCount(), 3u);
  Outcome out;
  auto call = Call(config, &out, /*member_outputs=*/true);
  call->MemberAnswered(0, 1, Status::Ok(), Response(Floats({1, 2, 2}, {1, 0, 0, 1})));  // m1: [1,0], m2: [0,1]
  EXPECT_EQ(out.answers, 0);
  call->MemberAnswered(1, 1, Status::Ok(), Response(Floats({1, 2}, {1, 0})));
  ASSERT_EQ(out.answers, 1);
  ASSERT_TRUE(out.status.ok()) << out.status.ToString();
  // (1 * [1,0] + 3 * [0,1] + 4 * [1,0]) / 8
  EXPECT_EQ(Values(out.response.outputs[0]), (std::vector<float>{5.f / 8, 3.f / 8}));
  std::vector<std::string> names;
  for (const InferOutput& o : out.response.outputs) names.push_back(o.name);
  EXPECT_EQ(names, (std::vector<std::string>{"p", "m1.p", "m2.p", "solo.p"}));
  EXPECT_EQ(Values(out.response.outputs[2]), (std::vector<float>{0, 1}));
  EXPECT_EQ(out.response.outputs[2].shape, (std::vector<int64_t>{1, 2}));
}

TEST(PackedMemberTest, TheQuorumCountsAPackedCallsMembers) {
  // min_members 2: the packed call alone (two members) is a quorum once the
  // plain member failed.
  const ModelConfig config = PackedEnsemble(CombineRule::kMean, 2);
  Outcome out;
  auto call = Call(config, &out, false);
  call->MemberAnswered(1, 0, Status::Unavailable("host gone"), {});
  EXPECT_EQ(out.answers, 0);
  call->MemberAnswered(0, 1, Status::Ok(), Response(Floats({1, 2, 2}, {1, 0, 0, 1})));
  ASSERT_EQ(out.answers, 1);
  ASSERT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_EQ(Values(out.response.outputs[0]), (std::vector<float>{0.5f, 0.5f}));

  // min_members 2 again: the packed call failing leaves one member of
  // three (decided when the last call answered: failures never answer early).
  Outcome failed;
  auto second = Call(config, &failed, false);
  second->MemberAnswered(0, 0, Status::Unavailable("host gone"), {});
  EXPECT_EQ(failed.answers, 0);
  second->MemberAnswered(1, 1, Status::Ok(), Response(Floats({1, 2}, {1, 0})));
  ASSERT_EQ(failed.answers, 1);
  EXPECT_FALSE(failed.status.ok());
  EXPECT_NE(failed.status.message().find("2 of 3 members failed"), std::string::npos) << failed.status.ToString();
}

TEST(PackedMemberTest, AMisshapenPackedAnswerFailsTheRequestNamingTheMember) {
  const ModelConfig config = PackedEnsemble(CombineRule::kMean);
  Outcome out;
  auto call = Call(config, &out, false);
  call->MemberAnswered(0, 1, Status::Ok(), Response(Floats({1, 3}, {1, 0, 0})));  // a packed axis of 3, not 2
  call->MemberAnswered(1, 1, Status::Ok(), Response(Floats({1, 2}, {1, 0})));
  ASSERT_EQ(out.answers, 1);
  EXPECT_EQ(out.status.code(), StatusCode::kInternal);
  EXPECT_NE(out.status.message().find("'pack'"), std::string::npos) << out.status.ToString();
}

}  // namespace
}  // namespace es
