// A model's `experiment:` section (ExperimentSpec): defaults, every field,
// and the errors that name the field; the same fields as text (the body of
// the endpoint that sets one).
#include <gtest/gtest.h>

#include "config/server_config.h"
#include "config_fixture.h"

namespace es::testing {
namespace {

TEST_F(ConfigTest, AnExperimentSectionIsRead) {
  WriteModel("mlp", kMlpYaml + "experiment:\n  candidate: cnn\n  mode: canary\n  percent: 12.5\n  sticky_by: user\n"
                               "  window: 200\n  gate: {min_compared: 150, min_agreement: 0.97, max_error_increase: "
                               "0.01, max_latency_ratio: 2, abort_error_rate: 0.25}\n");
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const ExperimentSpec& e = config->FindModel("mlp")->experiment;
  EXPECT_EQ(e.candidate, "cnn");
  EXPECT_EQ(e.mode, ExperimentSpec::Mode::kCanary);
  EXPECT_DOUBLE_EQ(e.percent, 12.5);
  EXPECT_EQ(e.sticky_by, "user");
  EXPECT_EQ(e.window, 200);
  EXPECT_EQ(e.gate.min_compared, 150);
  EXPECT_DOUBLE_EQ(e.gate.min_agreement, 0.97);
  EXPECT_DOUBLE_EQ(e.gate.max_error_increase, 0.01);
  EXPECT_DOUBLE_EQ(e.gate.max_latency_ratio, 2);
  EXPECT_DOUBLE_EQ(e.gate.abort_error_rate, 0.25);
  EXPECT_FALSE(config->FindModel("cnn")->experiment.enabled());
}

TEST_F(ConfigTest, ExperimentErrorsNameTheField) {
  const struct {
    const char* section;
    const char* needle;
  } cases[] = {
      {"experiment: {mode: shadow}", "experiment.candidate: missing"},
      {"experiment: {candidate: mlp}", "experiment.candidate: a model cannot be its own candidate"},
      {"experiment: {candidate: cnn, mode: blue}", "experiment.mode: unknown mode 'blue'"},
      {"experiment: {candidate: cnn, percent: 101}", "experiment.percent"},
      {"experiment: {candidate: cnn, sticky_by: user}", "experiment.sticky_by: only a canary"},
      {"experiment: {candidate: cnn, window: 5}", "experiment.window"},
      {"experiment: {candidate: cnn, window: 100, gate: {min_compared: 101}}", "experiment.gate.min_compared"},
      {"experiment: {candidate: cnn, gate: {quorum: 3}}", "experiment.gate.quorum"},
  };
  for (const auto& c : cases) {
    const std::string file = WriteModel("mlp", kMlpYaml + c.section + "\n");
    const Status s = Load().status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.section;
    EXPECT_NE(s.message().find(file + ":"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << c.section << ": " << s.message();
  }
}

TEST(ExperimentTextTest, TheEndpointsBodyIsReadAsTheSection) {
  StatusOr<ExperimentSpec> spec =
      ParseExperimentText(R"({"candidate": "v2", "mode": "shadow", "percent": 10})", "m", "the request body");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->candidate, "v2");
  EXPECT_EQ(spec->mode, ExperimentSpec::Mode::kShadow);
  EXPECT_TRUE(spec->enabled());
  spec = ParseExperimentText(R"({"mode": "off"})", "m", "the request body");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_FALSE(spec->enabled());
  const Status bad = ParseExperimentText(R"({"candidate": "v2", "percent": "lots"})", "m", "the request body").status();
  EXPECT_NE(bad.message().find("the request body:1: percent"), std::string::npos) << bad.message();
  EXPECT_FALSE(ParseExperimentText("[1, 2]", "m", "the request body").ok());
  EXPECT_FALSE(ParseExperimentText("{", "m", "the request body").ok());
}

}  // namespace
}  // namespace es::testing
