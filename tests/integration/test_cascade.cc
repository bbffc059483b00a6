// Acceptance (cascades): `combine: cascade` through the server.
//
// The demo members as a cascade, mlp first, then wide_mlp and cnn together.
// Its exit_threshold is the median of the mlp's top-class probability on
// the test's images (read from the running server), so about half the rows
// leave after the mlp: the cascade is loaded into the running server
// (explicit model control) once that is known. Checked against calls to
// each member on its own, on the same images:
//  - a row that left at stage 0 (output exit_stage) is the mlp's answer, and
//    the mlp was sure of it (top-class probability >= the threshold);
//  - a row that went on is the mean of the three members, and the mlp was
//    not sure of it;
//  - response parameter stages_used; /metrics' exits per stage add up to the
//    rows and the member calls saved are two per row that left early;
//  - return_uncertainty on a cascade is refused, naming the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/integration/metrics/metrics_support.h"

namespace es::it {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int64_t kRows = 32;

std::vector<float> Probabilities(Stub& stub, const std::string& model, const std::vector<float>& images) {
  InferResult r = Infer(stub, ImageRequest(model, images), milliseconds(20000));
  EXPECT_TRUE(r.status.ok()) << model << ": " << Describe(r.status);
  Fp32Tensor t;
  EXPECT_TRUE(GetFp32Output(r.response, "probabilities", &t));
  return t.values;
}

float TopOf(const std::vector<float>& p, int64_t row) {
  return *std::max_element(p.begin() + row * kClasses, p.begin() + (row + 1) * kClasses);
}

TEST(CascadeTest, RowsTheFirstMemberIsSureOfLeaveEarlyAndTheRestGetTheWholeEnsemble) {
  WatchdogScope watchdog(seconds(240), "CascadeTest");
  TempDir repo("es_cascade_");
  std::string error;
  ASSERT_TRUE(CopyDemoRepository(repo.path(), &error)) << error;
  ServerProcess::Options options;
  options.repository = repo.path().string();
  options.extra_args = {"--model-control-mode", "explicit", "--load-model", "mlp",
                        "--load-model", "wide_mlp", "--load-model", "cnn"};
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();

  const std::vector<float> images = RandomImages(kRows, 4242);
  const std::vector<float> mlp = Probabilities(*stub, "mlp", images);
  const std::vector<float> wide = Probabilities(*stub, "wide_mlp", images);
  const std::vector<float> cnn = Probabilities(*stub, "cnn", images);
  ASSERT_EQ(mlp.size(), static_cast<size_t>(kRows * kClasses));
  std::vector<float> tops;
  for (int64_t r = 0; r < kRows; ++r) tops.push_back(TopOf(mlp, r));
  std::sort(tops.begin(), tops.end());
  // Halfway between two neighbouring tops, so no row sits on the threshold.
  const double threshold = (static_cast<double>(tops[kRows / 2 - 1]) + tops[kRows / 2]) / 2;
  ASSERT_LT(tops[kRows / 2 - 1], tops[kRows / 2]) << "the mlp's tops tie at the median";

  fs::create_directories(repo.path() / "demo_cascade");
  std::ofstream(repo.path() / "demo_cascade" / "config.yaml")
      << "platform: ensemble\nmax_batch_size: 64\nensemble:\n  combine: cascade\n  exit_threshold: " << threshold
      << "\n  stages: [[mlp], [wide_mlp, cnn]]\n  members:\n"
         "    - {model: mlp}\n    - {model: wide_mlp}\n    - {model: cnn}\n";
  const grpc::Status loaded = LoadModel(*stub, "demo_cascade");
  ASSERT_TRUE(loaded.ok()) << Describe(loaded);

  inference::ModelInferRequest request = ImageRequest("demo_cascade", images);
  request.add_outputs()->set_name("probabilities");
  request.add_outputs()->set_name("exit_stage");
  InferResult r = Infer(*stub, request, milliseconds(20000));
  ASSERT_TRUE(r.status.ok()) << Describe(r.status);
  Fp32Tensor answer;
  ASSERT_TRUE(GetFp32Output(r.response, "probabilities", &answer));
  ASSERT_EQ(answer.shape, (std::vector<int64_t>{kRows, kClasses}));
  ASSERT_EQ(r.response.outputs_size(), 2);
  ASSERT_EQ(r.response.outputs(1).name(), "exit_stage");
  ASSERT_EQ(r.response.outputs(1).datatype(), "INT32");
  const std::string& raw = r.response.raw_output_contents(1);
  ASSERT_EQ(raw.size(), kRows * sizeof(int32_t));
  std::vector<int32_t> exits(kRows);
  std::memcpy(exits.data(), raw.data(), raw.size());

  int early = 0;
  for (int64_t row = 0; row < kRows; ++row) {
    const bool sure = TopOf(mlp, row) >= threshold;
    ASSERT_EQ(exits[row], sure ? 0 : 1) << "row " << row << " (mlp top " << TopOf(mlp, row) << ")";
    early += sure;
    for (int64_t c = 0; c < kClasses; ++c) {
      const size_t k = static_cast<size_t>(row * kClasses + c);
      const float expected = sure ? mlp[k] : (mlp[k] + wide[k] + cnn[k]) / 3;
      EXPECT_NEAR(answer.values[k], expected, 1e-5) << "row " << row << " class " << c;
    }
  }
  EXPECT_EQ(early, kRows / 2);
  ASSERT_TRUE(r.response.parameters().count("stages_used"));
  EXPECT_EQ(r.response.parameters().at("stages_used").int64_param(), 2);

  // Uncertainty has no meaning per row when rows ran through different members.
  inference::ModelInferRequest uncertain = ImageRequest("demo_cascade", RandomImages(1, 1));
  SetBoolParameter(&uncertain, "return_uncertainty", true);
  InferResult refused = Infer(*stub, uncertain);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.status.error_message().find("is a cascade"), std::string::npos) << Describe(refused.status);

  auto scrape = metrics_test::Scrape::From(server->metrics_address());
  ASSERT_TRUE(scrape);
  EXPECT_EQ(scrape->Value("ensemble_cascade_exits_total", {{"model", "demo_cascade"}, {"stage", "0"}}),
            static_cast<double>(early));
  EXPECT_EQ(scrape->Value("ensemble_cascade_exits_total", {{"model", "demo_cascade"}, {"stage", "1"}}),
            static_cast<double>(kRows - early));
  EXPECT_EQ(scrape->Value("ensemble_cascade_member_rows_saved_total", {{"model", "demo_cascade"}}),
            static_cast<double>(2 * early));
}

}  // namespace
}  // namespace es::it
