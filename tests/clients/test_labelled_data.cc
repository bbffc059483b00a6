// ensemble-loadgen's labelled data (clients/loadgen/labelled_data.h): the
// requests built from an .npy of rows (one per --batch rows, in order, the
// remainder dropped), the labels' checks, and CheckAnswer on answers good,
// wrong and malformed (an answer is untrusted: a missing output, a short
// byte count, a row count other than the labels', an overflowing shape).
#include "clients/loadgen/labelled_data.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "clients/cli/input_source.h"

namespace es::loadgen {
namespace {

inference::ModelInferResponse Answer(const std::vector<int64_t>& shape, const std::vector<float>& values,
                                     const std::string& served_by = "") {
  inference::ModelInferResponse answer;
  auto* out = answer.add_outputs();
  out->set_name("probabilities");
  out->set_datatype("FP32");
  for (int64_t d : shape) out->add_shape(d);
  answer.add_raw_output_contents(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  if (!served_by.empty()) (*answer.mutable_parameters())["served_by"].set_string_param(served_by);
  return answer;
}

TEST(LabelledAnswer, CountsTheRowsWhoseLargestElementIsTheLabel) {
  // Row 0's largest is class 2, row 1's class 0, row 2's class 1.
  const auto answer = Answer({3, 3}, {0.1F, 0.2F, 0.7F, 0.9F, 0.05F, 0.05F, 0.3F, 0.6F, 0.1F}, "ens_cascade");
  AnswerCheck c = CheckAnswer(answer, "probabilities", {2, 0, 1});
  EXPECT_TRUE(c.readable);
  EXPECT_EQ(c.rows, 3u);
  EXPECT_EQ(c.correct, 3u);
  EXPECT_EQ(c.served_by, "ens_cascade");
  c = CheckAnswer(answer, "probabilities", {2, 1, 0});
  EXPECT_TRUE(c.readable);
  EXPECT_EQ(c.correct, 1u);
  // A row's elements are taken together whatever the shape ([rows, 1, 3]).
  c = CheckAnswer(Answer({1, 1, 3}, {0.0F, 0.0F, 1.0F}), "probabilities", {2});
  EXPECT_TRUE(c.readable);
  EXPECT_EQ(c.correct, 1u);
  EXPECT_EQ(c.served_by, "");
}

TEST(LabelledAnswer, AMalformedAnswerIsUnreadableNotWrong) {
  const std::vector<float> six = {1, 0, 0, 0, 1, 0};
  EXPECT_FALSE(CheckAnswer(Answer({2, 3}, six), "other", {0, 1}).readable) << "no such output";
  EXPECT_FALSE(CheckAnswer(Answer({3, 2}, six), "probabilities", {0, 1}).readable) << "3 rows for 2 labels";
  EXPECT_FALSE(CheckAnswer(Answer({2, 4}, six), "probabilities", {0, 1}).readable) << "6 values for [2, 4]";
  EXPECT_FALSE(CheckAnswer(Answer({2, int64_t{1} << 62}, six), "probabilities", {0, 1}).readable) << "overflow";
  EXPECT_FALSE(CheckAnswer(Answer({2, -3}, six), "probabilities", {0, 1}).readable) << "negative dim";
  inference::ModelInferResponse no_contents = Answer({2, 3}, six);
  no_contents.clear_raw_output_contents();
  EXPECT_FALSE(CheckAnswer(no_contents, "probabilities", {0, 1}).readable) << "no raw contents";
  inference::ModelInferResponse half = Answer({2, 3}, six);
  half.mutable_outputs(0)->set_datatype("FP16");
  EXPECT_FALSE(CheckAnswer(half, "probabilities", {0, 1}).readable) << "FP16 is not read";
}

class LabelledRequestsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("es_labelled_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    base_.request.set_model_name("m");
    base_.request.set_model_version("2");
    base_.inputs = {{"x", "FP32", {2, 3}, 24}};
    base_.rows = 2;
    base_.first_output = "probabilities";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Npy(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values) {
    std::string path = (dir_ / name).string();
    EXPECT_TRUE(es::cli::WriteNpyFloat32(path, shape, values).ok());
    return path;
  }

  std::filesystem::path dir_;
  PreparedRequest base_;
};

TEST_F(LabelledRequestsTest, OneRequestPerBatchOfRowsInOrderWithTheirLabels) {
  std::vector<float> rows(15);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);  // 5 rows of 3
  const std::string inputs = Npy("x.npy", {5, 3}, rows);
  const std::string labels = Npy("y.npy", {5}, {0, 1, 2, 1, 0});
  auto set = LoadLabelledRequests({inputs, labels, ""}, base_);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->requests.size(), 2u) << "5 rows make two requests of 2; the last row is dropped";
  ASSERT_EQ(set->labels.size(), 2u);
  EXPECT_EQ(set->labels[1], (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(set->output, "probabilities");
  inference::ModelInferRequest second;
  ASSERT_TRUE(second.ParseFromString(set->requests[1]));
  EXPECT_EQ(second.model_name(), "m");
  EXPECT_EQ(second.model_version(), "2");
  ASSERT_EQ(second.inputs_size(), 1);
  EXPECT_EQ(second.inputs(0).name(), "x");
  EXPECT_EQ(std::vector<int64_t>(second.inputs(0).shape().begin(), second.inputs(0).shape().end()),
            (std::vector<int64_t>{2, 3}));
  std::vector<float> values(6);
  ASSERT_EQ(second.raw_input_contents(0).size(), 24u);
  std::memcpy(values.data(), second.raw_input_contents(0).data(), 24);
  EXPECT_EQ(values, (std::vector<float>{6, 7, 8, 9, 10, 11}));

  auto named = LoadLabelledRequests({inputs, labels, "logits"}, base_);
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->output, "logits");
  auto unlabelled = LoadLabelledRequests({inputs, "", ""}, base_);
  ASSERT_TRUE(unlabelled.ok());
  EXPECT_FALSE(unlabelled->checked());
  EXPECT_EQ(unlabelled->requests.size(), 2u);
}

TEST_F(LabelledRequestsTest, FilesThatDoNotFitTheModelAreRefusedNamingThem) {
  const std::string inputs = Npy("x.npy", {4, 3}, std::vector<float>(12, 0.5F));
  auto refused = [&](const LabelledFiles& files, const std::string& expected) {
    auto set = LoadLabelledRequests(files, base_);
    ASSERT_FALSE(set.ok()) << expected;
    EXPECT_EQ(set.status().code(), es::StatusCode::kInvalidArgument);
    EXPECT_NE(set.status().message().find(expected), std::string::npos) << set.status().message();
  };
  refused({Npy("w.npy", {4, 5}, std::vector<float>(20, 0)), "", ""}, "w.npy");                  // other row size
  refused({Npy("one.npy", {1, 3}, {1, 2, 3}), "", ""}, "fewer than one request of --batch 2");  // 1 row
  refused({inputs, Npy("short.npy", {3}, {0, 1, 2}), ""}, "expected [4]");
  refused({inputs, Npy("frac.npy", {4}, {0, 1.5F, 2, 3}), ""}, "not a class index");
  refused({inputs, Npy("neg.npy", {4}, {0, -1, 2, 3}), ""}, "not a class index");
  refused({inputs, (dir_ / "missing.npy").string(), ""}, "missing.npy");
  base_.inputs.push_back({"y", "FP32", {2, 3}, 24});
  refused({inputs, "", ""}, "has 2 inputs");
}

}  // namespace
}  // namespace es::loadgen
