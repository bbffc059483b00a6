#include "server/ensemble/ensemble_combiner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace es {
namespace {

InferOutput Probs(const std::vector<float>& values, int64_t rows) {
  InferOutput out{"probabilities", DataType::kFp32, {rows, static_cast<int64_t>(values.size()) / rows}, {}};
  out.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return out;
}

std::vector<float> Floats(const InferOutput& out) {
  std::vector<float> v(out.data.size() / sizeof(float));
  std::memcpy(v.data(), out.data.data(), out.data.size());
  return v;
}

TEST(EnsembleCombinerTest, MeanAveragesElementwise) {
  InferOutput a = Probs({0.2f, 0.8f, 0.6f, 0.4f}, 2), b = Probs({0.4f, 0.6f, 0.0f, 1.0f}, 2);
  auto out = CombineOutputs({&a, &b}, {1, 1}, CombineRule::kMean);
  ASSERT_TRUE(out.ok());
  auto v = Floats(*out);
  EXPECT_FLOAT_EQ(v[0], 0.3f);
  EXPECT_FLOAT_EQ(v[1], 0.7f);
  EXPECT_FLOAT_EQ(v[2], 0.3f);
  EXPECT_FLOAT_EQ(v[3], 0.7f);
  EXPECT_EQ(out->shape, (std::vector<int64_t>{2, 2}));
}

TEST(EnsembleCombinerTest, WeightedMeanNormalisesWeights) {
  InferOutput a = Probs({1.0f, 0.0f}, 1), b = Probs({0.0f, 1.0f}, 1);
  auto out = CombineOutputs({&a, &b}, {3, 1}, CombineRule::kWeightedMean);
  ASSERT_TRUE(out.ok());
  auto v = Floats(*out);
  EXPECT_FLOAT_EQ(v[0], 0.75f);
  EXPECT_FLOAT_EQ(v[1], 0.25f);
}

TEST(EnsembleCombinerTest, MajorityVoteGivesVoteShares) {
  InferOutput a = Probs({0.9f, 0.1f, 0.0f}, 1), b = Probs({0.2f, 0.7f, 0.1f}, 1), c = Probs({0.6f, 0.3f, 0.1f}, 1);
  auto out = CombineOutputs({&a, &b, &c}, {1, 1, 1}, CombineRule::kMajorityVote);
  ASSERT_TRUE(out.ok());
  auto v = Floats(*out);
  EXPECT_NEAR(v[0], 2.0f / 3, 1e-6);
  EXPECT_NEAR(v[1], 1.0f / 3, 1e-6);
  EXPECT_NEAR(v[2], 0.0f, 1e-6);
}

TEST(EnsembleCombinerTest, UncertaintyEntropyAndDisagreement) {
  InferOutput a = Probs({0.9f, 0.1f, 0.5f, 0.5f}, 2), b = Probs({0.1f, 0.9f, 0.5f, 0.5f}, 2);
  auto mean = CombineOutputs({&a, &b}, {1, 1}, CombineRule::kMean);
  ASSERT_TRUE(mean.ok());
  auto u = ComputeUncertainty(*mean, {&a, &b});
  ASSERT_TRUE(u.ok());
  auto h = Floats(u->entropy), d = Floats(u->disagreement);
  EXPECT_NEAR(h[0], std::log(2.0), 1e-6);  // [0.5, 0.5]
  EXPECT_NEAR(d[0], 0.5, 1e-6);            // ensemble argmax 0 (tie -> lowest); b disagrees
  EXPECT_NEAR(d[1], 0.0, 1e-6);
  EXPECT_EQ(u->entropy.shape, (std::vector<int64_t>{2}));
}

TEST(EnsembleCombinerTest, RejectsNonFloatOutputs) {
  InferOutput a{"labels", DataType::kInt64, {1, 1}, std::string(8, '\0')};
  auto out = CombineOutputs({&a}, {1}, CombineRule::kMean);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("labels"), std::string::npos);
}

TEST(EnsembleCombinerTest, RejectsMembersThatDisagreeInShape) {
  InferOutput a = Probs({0.5f, 0.5f}, 1), b = Probs({0.2f, 0.3f, 0.5f}, 1);
  EXPECT_FALSE(CombineOutputs({&a, &b}, {1, 1}, CombineRule::kMean).ok());
}

// Members that agree with each other but whose data is not what their shape
// says (a lying host's answer, had it passed) are refused before any row is read.
TEST(EnsembleCombinerTest, RejectsDataThatDisagreesWithTheShape) {
  InferOutput a = Probs({0.5f, 0.5f}, 1), b = Probs({0.2f, 0.8f}, 1);
  a.shape = {4, 2};
  b.shape = {4, 2};  // 8 elements promised, 2 present
  auto combined = CombineOutputs({&a, &b}, {1, 1}, CombineRule::kMajorityVote);
  ASSERT_FALSE(combined.ok());
  EXPECT_NE(combined.status().message().find("not what its shape says"), std::string::npos);
  EXPECT_FALSE(ComputeUncertainty(a, {&a, &b}).ok());
  a.shape = {int64_t{1} << 62, 4};  // the byte count wraps
  b.shape = a.shape;
  EXPECT_FALSE(CombineOutputs({&a, &b}, {1, 1}, CombineRule::kMean).ok());
}

// An empty output (a variable dim of size 0) has nothing to vote on: the
// vote shares are empty too, and nothing is written past them.
TEST(EnsembleCombinerTest, MajorityVoteOnAnEmptyOutputIsEmpty) {
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{0}, std::vector<int64_t>{3, 0}}) {
    InferOutput a{"probabilities", DataType::kFp32, shape, {}}, b = a;
    auto combined = CombineOutputs({&a, &b}, {1, 1}, CombineRule::kMajorityVote);
    ASSERT_TRUE(combined.ok()) << combined.status().ToString();
    EXPECT_TRUE(combined->data.empty());
    EXPECT_EQ(combined->shape, shape);
  }
}

}  // namespace
}  // namespace es
