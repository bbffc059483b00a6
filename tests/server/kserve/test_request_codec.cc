#include "server/kserve/request_codec.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>

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
    // Variable dims, batched and not: shapes whose sizes overflow.
    ModelConfig var = m;
    var.name = "var";
    var.inputs = {{"input", DataType::kFp32, {-1, -1}}};
    config_.models["var"] = var;
    ModelConfig flat = m;
    flat.name = "flat";
    flat.max_batch_size = 0;
    flat.inputs = {{"input", DataType::kFp32, {-1, 4}}};
    config_.models["flat"] = flat;
    // One unbatched [3] model per narrow type, for typed contents.
    for (DataType type : {DataType::kUint8, DataType::kInt8, DataType::kInt16, DataType::kBool}) {
      ModelConfig t = flat;
      t.name = DataTypeName(type);
      t.inputs = {{"input", type, {3}}};
      config_.models[t.name] = t;
    }
    config_.limits.max_request_bytes = 1000;
  }

  // A request for model `type` (see SetUp) with no contents yet.
  inference::ModelInferRequest TypedRequest(DataType type) {
    inference::ModelInferRequest r;
    r.set_model_name(DataTypeName(type));
    auto* in = r.add_inputs();
    in->set_name("input");
    in->set_datatype(DataTypeName(type));
    in->add_shape(3);
    return r;
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

// Names and shapes a client sent appear in errors cut short: a request may
// carry a name as long as its message, which every error would copy into
// its message and the answer's trailer.
TEST_F(RequestCodecTest, ErrorsShowLongNamesAndShapesCutShort) {
  const std::string long_name(1 << 20, 'n');
  const auto expect_short = [&](const inference::ModelInferRequest& r, const std::string& needle) {
    auto decoded = DecodeInferRequest(r, config_);
    ASSERT_FALSE(decoded.ok());
    EXPECT_LT(decoded.status().message().size(), 512U) << decoded.status().message().substr(0, 600);
    EXPECT_NE(decoded.status().message().find(needle), std::string::npos) << decoded.status().message();
  };
  expect_short(Request(long_name, {1, 2, 3}, 6), "unknown model '" + std::string(kMaxShownBytes, 'n') + "...'");
  auto input = Request("mlp", {1, 2, 3}, 6);
  input.mutable_inputs(0)->set_name(long_name);
  expect_short(input, "has no input named 'nnn");
  auto datatype = Request("mlp", {1, 2, 3}, 6);
  datatype.mutable_inputs(0)->set_datatype(long_name);
  expect_short(datatype, "datatype 'nnn");
  auto output = Request("mlp", {1, 2, 3}, 6);
  output.add_outputs()->set_name(long_name);
  expect_short(output, "has no output named 'nnn");
  auto version = Request("mlp", {1, 2, 3}, 6);
  version.set_model_version(long_name);
  expect_short(version, "has no served version 'nnn");
  std::vector<int64_t> many_dims(100000, 1);
  expect_short(Request("mlp", many_dims, 6), "shape [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,... (100000 dims)]");
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


// `exact` (an overload ladder's "answer in full") is a bool; any model takes
// it (only a laddered ensemble acts on it).
TEST_F(RequestCodecTest, ExactIsABoolParameter) {
  auto e = Request("ens", {1, 2, 3}, 6);
  (*e.mutable_parameters())["exact"].set_bool_param(true);
  auto decoded = DecodeInferRequest(e, config_);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE((*decoded)->exact);
  auto plain = DecodeInferRequest(Request("ens", {1, 2, 3}, 6), config_);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE((*plain)->exact);
  auto text = Request("mlp", {1, 2, 3}, 6);
  (*text.mutable_parameters())["exact"].set_string_param("yes");
  ExpectError(text, StatusCode::kInvalidArgument, "parameter 'exact' must be a bool");
}

// An overload ladder's answer says which rung made it, and that rung's
// accuracy when known; other answers carry neither.
TEST_F(RequestCodecTest, TheAnsweringRungIsAResponseParameter) {
  auto decoded = DecodeInferRequest(Request("ens", {1, 2, 3}, 6), config_);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  auto encode = [&](const std::string& by, double accuracy) {
    InferResponse answer;
    answer.served_by = by;
    answer.served_accuracy = accuracy;
    inference::ModelInferResponse proto;
    EXPECT_TRUE(EncodeInferResponse(**decoded, std::move(answer), &proto).ok());
    return proto;
  };
  const auto both = encode("small", 0.91);
  ASSERT_EQ(both.parameters().count("served_by"), 1u);
  EXPECT_EQ(both.parameters().at("served_by").string_param(), "small");
  ASSERT_EQ(both.parameters().count("served_accuracy"), 1u);
  EXPECT_DOUBLE_EQ(both.parameters().at("served_accuracy").double_param(), 0.91);
  const auto unknown = encode("small", -1);
  EXPECT_EQ(unknown.parameters().count("served_by"), 1u);
  EXPECT_EQ(unknown.parameters().count("served_accuracy"), 0u);
  const auto none = encode("", -1);
  EXPECT_EQ(none.parameters().count("served_by"), 0u);
}

// Two variable dims of 2^32: the element count is 2^64, which an unchecked
// product wraps to 0, so an empty payload would "match" and the request
// would reach a host. It must stop here, naming the model and the input.
TEST_F(RequestCodecTest, ShapeWhoseSizeOverflowsIsInvalidArgument) {
  const int64_t two32 = int64_t{1} << 32;
  auto r = Request("var", {1, two32, two32}, 0);
  ExpectError(r, StatusCode::kInvalidArgument, "model 'var' input 'input'");
  ExpectError(r, StatusCode::kInvalidArgument, "overflows");
  // 2^62 * 4 elements.
  ExpectError(Request("flat", {int64_t{1} << 62, 4}, 0), StatusCode::kInvalidArgument, "model 'flat' input 'input'");
  ExpectError(Request("flat", {int64_t{1} << 62, 4}, 0), StatusCode::kInvalidArgument, "overflows");
}

// Products that wrap to exactly the payload sent: the count fits 64 bits but
// times the item size does not.
TEST_F(RequestCodecTest, ShapeWhoseSizeWrapsToThePayloadSizeIsInvalidArgument) {
  // 2^60 * 4 = 2^62 FP32 elements = 2^64 bytes: wraps to 0, the empty payload.
  ExpectError(Request("flat", {int64_t{1} << 60, 4}, 0), StatusCode::kInvalidArgument, "overflows");
  // (2^60 + 1) * 4 = 2^62 + 4 elements = 2^64 + 16 bytes: wraps to 16, the
  // 4 floats sent.
  ExpectError(Request("flat", {(int64_t{1} << 60) + 1, 4}, 4), StatusCode::kInvalidArgument, "overflows");
  // Batched, 8 * 2^29 * 2^32 = 2^64 elements: the batch dim passes CheckShape.
  ExpectError(Request("var", {8, int64_t{1} << 29, int64_t{1} << 32}, 0), StatusCode::kInvalidArgument, "overflows");
  // The largest sizes that do not overflow are refused for their size, not
  // mistaken for small ones.
  ExpectError(Request("flat", {(int64_t{1} << 60) - 1, 4}, 0), StatusCode::kResourceExhausted, "exceeds the limit");
}

TEST_F(RequestCodecTest, NarrowTypedValuesOutOfRangeAreInvalidArgument) {
  {
    auto r = TypedRequest(DataType::kUint8);
    for (uint32_t v : {0u, 255u, 7u}) r.mutable_inputs(0)->mutable_contents()->add_uint_contents(v);
    auto decoded = DecodeInferRequest(r, config_);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    const uint8_t* data = (*decoded)->inputs[0].data;
    EXPECT_EQ(std::vector<uint8_t>(data, data + 3), (std::vector<uint8_t>{0, 255, 7}));
    r.mutable_inputs(0)->mutable_contents()->set_uint_contents(1, 256);
    ExpectError(r, StatusCode::kInvalidArgument, "model 'UINT8' input 'input': typed element 1 (value 256)");
    ExpectError(r, StatusCode::kInvalidArgument, "[0, 255]");
  }
  {
    auto r = TypedRequest(DataType::kInt8);
    for (int32_t v : {-128, 127, -1}) r.mutable_inputs(0)->mutable_contents()->add_int_contents(v);
    auto decoded = DecodeInferRequest(r, config_);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    const auto* data = reinterpret_cast<const int8_t*>((*decoded)->inputs[0].data);
    EXPECT_EQ(std::vector<int8_t>(data, data + 3), (std::vector<int8_t>{-128, 127, -1}));
    r.mutable_inputs(0)->mutable_contents()->set_int_contents(2, -129);
    ExpectError(r, StatusCode::kInvalidArgument, "typed element 2 (value -129) is out of range for INT8 [-128, 127]");
    r.mutable_inputs(0)->mutable_contents()->set_int_contents(2, 128);
    ExpectError(r, StatusCode::kInvalidArgument, "typed element 2 (value 128)");
  }
  {
    auto r = TypedRequest(DataType::kInt16);
    for (int32_t v : {-32768, 32767, 300}) r.mutable_inputs(0)->mutable_contents()->add_int_contents(v);
    auto decoded = DecodeInferRequest(r, config_);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    const auto* data = reinterpret_cast<const int16_t*>((*decoded)->inputs[0].data);
    EXPECT_EQ(std::vector<int16_t>(data, data + 3), (std::vector<int16_t>{-32768, 32767, 300}));
    r.mutable_inputs(0)->mutable_contents()->set_int_contents(0, 32768);
    ExpectError(r, StatusCode::kInvalidArgument, "typed element 0 (value 32768) is out of range for INT16");
    r.mutable_inputs(0)->mutable_contents()->set_int_contents(0, -32769);
    ExpectError(r, StatusCode::kInvalidArgument, "typed element 0 (value -32769)");
  }
}

TEST_F(RequestCodecTest, BoolBytesOtherThanZeroOrOneAreInvalidArgument) {
  auto raw = TypedRequest(DataType::kBool);
  raw.add_raw_input_contents(std::string("\x01\x00\x01", 3));
  ASSERT_TRUE(DecodeInferRequest(raw, config_).ok());
  raw.set_raw_input_contents(0, std::string("\x01\x00\x02", 3));
  ExpectError(raw, StatusCode::kInvalidArgument, "model 'BOOL' input 'input': BOOL element 2 is byte 2");
  raw.set_raw_input_contents(0, std::string("\xff\x00\x00", 3));
  ExpectError(raw, StatusCode::kInvalidArgument, "BOOL element 0 is byte 255");
  // Typed bool_contents are protobuf bools: always 0 or 1.
  auto typed = TypedRequest(DataType::kBool);
  for (bool v : {true, false, true}) typed.mutable_inputs(0)->mutable_contents()->add_bool_contents(v);
  auto decoded = DecodeInferRequest(typed, config_);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const uint8_t* data = (*decoded)->inputs[0].data;
  EXPECT_EQ(std::vector<uint8_t>(data, data + 3), (std::vector<uint8_t>{1, 0, 1}));
}

TEST_F(RequestCodecTest, RepeatedRequestedOutputIsInvalidArgument) {
  auto r = Request("mlp", {1, 2, 3}, 6);
  r.add_outputs()->set_name("probabilities");
  ASSERT_TRUE(DecodeInferRequest(r, config_).ok());
  r.add_outputs()->set_name("probabilities");
  ExpectError(r, StatusCode::kInvalidArgument, "model 'mlp': output 'probabilities' requested more than once");
}

// The timeout parameter (µs) becomes a deadline on the steady clock, which
// counts nanoseconds: INT64_MAX µs does not fit, and must clamp to "no
// deadline" instead of wrapping into the past (or any other time).
TEST_F(RequestCodecTest, TimeoutParameterClampsHugeValues) {
  using std::chrono::steady_clock;
  auto with_timeout = [&](int64_t micros) {
    auto r = Request("mlp", {1, 2, 3}, 6);
    (*r.mutable_parameters())["timeout"].set_int64_param(micros);
    return r;
  };
  for (int64_t huge :
       {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() / 1000 + 1, int64_t{1} << 62}) {
    auto decoded = DecodeInferRequest(with_timeout(huge), config_);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ((*decoded)->deadline, steady_clock::time_point::max()) << huge;
  }
  // A year is representable: a real deadline, about a year away.
  const int64_t year_us = int64_t{365} * 24 * 3600 * 1000000;
  const auto before = steady_clock::now();
  auto year = DecodeInferRequest(with_timeout(year_us), config_);
  ASSERT_TRUE(year.ok()) << year.status().ToString();
  EXPECT_GE((*year)->deadline, before + std::chrono::microseconds(year_us));
  EXPECT_LE((*year)->deadline, steady_clock::now() + std::chrono::microseconds(year_us));
  // A short one is in the near future; 0 means none; negatives are refused.
  auto shortly = DecodeInferRequest(with_timeout(1), config_);
  ASSERT_TRUE(shortly.ok());
  EXPECT_LE((*shortly)->deadline, steady_clock::now() + std::chrono::microseconds(1));
  auto none = DecodeInferRequest(with_timeout(0), config_);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)->deadline, steady_clock::time_point::max());
  ExpectError(with_timeout(-1), StatusCode::kInvalidArgument, "'timeout' must be an int64 >= 0");
}

}  // namespace
}  // namespace es
