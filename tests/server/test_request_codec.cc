#include "server/request_codec.h"

#include <gtest/gtest.h>

namespace es {
namespace {

class RequestCodecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelConfig m;
    m.name = "mlp";
    m.platform = "torchscript";
    m.max_batch_size = 8;
    m.inputs = {{"input", DataType::kFp32, {2, 3}}};
    m.outputs = {{"probabilities", DataType::kFp32, {10}}};
    m.versions = {1};
    config_.models["mlp"] = m;
    ModelConfig e = m;
    e.name = "ens";
    e.platform = "ensemble";
    e.versions = {};
    e.ensemble.members = {{"mlp", 1.0}};
    config_.models["ens"] = e;
    config_.limits.max_request_bytes = 1000;
  }

  inference::ModelInferRequest Request(const std::string& model, std::vector<int64_t> shape, size_t floats) {
    inference::ModelInferRequest r;
    r.set_model_name(model);
    auto* in = r.add_inputs();
    in->set_name("input");
    in->set_datatype("FP32");
    for (int64_t d : shape) in->add_shape(d);
    r.add_raw_input_contents(std::string(floats * 4, '\0'));
    return r;
  }

  void ExpectError(const inference::ModelInferRequest& r, StatusCode code, const std::string& needle) {
    auto decoded = DecodeInferRequest(r, config_);
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.status().code(), code) << decoded.status().ToString();
    EXPECT_NE(decoded.status().message().find(needle), std::string::npos) << decoded.status().message();
  }

  ServerConfig config_;
};

TEST_F(RequestCodecTest, DecodesAValidRawRequest) {
  auto r = Request("mlp", {2, 2, 3}, 12);
  r.set_id("req-7");
  auto decoded = DecodeInferRequest(r, config_);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ((*decoded)->batch_rows(), 2);
  EXPECT_EQ((*decoded)->inputs[0].bytes, 48u);
  EXPECT_EQ((*decoded)->id, "req-7");
  EXPECT_EQ((*decoded)->version, 1);
}

TEST_F(RequestCodecTest, DecodesTypedContentsInPlace) {
  auto r = Request("mlp", {1, 2, 3}, 0);
  r.clear_raw_input_contents();
  for (int i = 0; i < 6; ++i) r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(static_cast<float>(i));
  auto decoded = DecodeInferRequest(r, config_);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(reinterpret_cast<const float*>((*decoded)->inputs[0].data)[5], 5.0f);
}

TEST_F(RequestCodecTest, UnknownModelAndVersionAreNotFound) {
  ExpectError(Request("nope", {1, 2, 3}, 6), StatusCode::kNotFound, "nope");
  auto r = Request("mlp", {1, 2, 3}, 6);
  r.set_model_version("9");
  ExpectError(r, StatusCode::kNotFound, "mlp");
}

TEST_F(RequestCodecTest, BadInputsAreInvalidArgument) {
  auto wrong_name = Request("mlp", {1, 2, 3}, 6);
  wrong_name.mutable_inputs(0)->set_name("x");
  ExpectError(wrong_name, StatusCode::kInvalidArgument, "'x'");
  auto wrong_type = Request("mlp", {1, 2, 3}, 6);
  wrong_type.mutable_inputs(0)->set_datatype("INT32");
  ExpectError(wrong_type, StatusCode::kInvalidArgument, "input 'input'");
  ExpectError(Request("mlp", {1, 3, 2}, 6), StatusCode::kInvalidArgument, "shape");
  ExpectError(Request("mlp", {9, 2, 3}, 54), StatusCode::kInvalidArgument, "batch size 9");
  ExpectError(Request("mlp", {1, 2, 3}, 5), StatusCode::kInvalidArgument, "raw content has 20 bytes");
  auto both = Request("mlp", {1, 2, 3}, 6);
  both.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
  ExpectError(both, StatusCode::kInvalidArgument, "both raw");
  auto two = Request("mlp", {1, 2, 3}, 6);
  two.add_inputs()->set_name("extra");
  ExpectError(two, StatusCode::kInvalidArgument, "expects 1 input");
}

TEST_F(RequestCodecTest, OversizedRequestIsResourceExhausted) {
  config_.limits.max_request_bytes = 100;
  ExpectError(Request("mlp", {8, 2, 3}, 48), StatusCode::kResourceExhausted, "192 bytes exceeds the limit of 100");
}

TEST_F(RequestCodecTest, EnsembleParametersOnlyForEnsembles) {
  auto r = Request("mlp", {1, 2, 3}, 6);
  (*r.mutable_parameters())["return_uncertainty"].set_bool_param(true);
  ExpectError(r, StatusCode::kInvalidArgument, "not an ensemble");
  auto e = Request("ens", {1, 2, 3}, 6);
  (*e.mutable_parameters())["return_uncertainty"].set_bool_param(true);
  e.add_outputs()->set_name("entropy");
  auto decoded = DecodeInferRequest(e, config_);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE((*decoded)->return_uncertainty);
  auto unknown_out = Request("ens", {1, 2, 3}, 6);
  unknown_out.add_outputs()->set_name("entropy");
  ExpectError(unknown_out, StatusCode::kInvalidArgument, "no output named 'entropy'");
}

}  // namespace
}  // namespace es
