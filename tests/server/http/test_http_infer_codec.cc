// The HTTP infer codec (server/http/http_infer_codec.h): JSON and binary-tensor
// bodies into the KServe proto, checked element by element, and answers
// back; and the decoded proto through the real request codec.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "server/http/http_infer_codec.h"
#include "server/kserve/request_codec.h"

namespace es {
namespace {

using json = nlohmann::json;

template <typename T>
std::string Bytes(std::initializer_list<T> values) {
  std::string out;
  for (T v : values) out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  return out;
}

struct Decoded {
  Status status;
  inference::ModelInferRequest proto;
  HttpOutputPlan plan;
};

Decoded Decode(const std::string& body, std::optional<uint64_t> header_length = std::nullopt,
               const std::string& model = "m") {
  Decoded d;
  d.status = DecodeHttpInferRequest(body, header_length, model, "", &d.proto, &d.plan);
  return d;
}

// A one-input request body: {"inputs": [{name, datatype, shape, data}]}.
std::string OneInput(const std::string& datatype, const std::string& shape, const std::string& data) {
  return R"({"inputs":[{"name":"x","datatype":")" + datatype + R"(","shape":)" + shape + R"(,"data":)" + data + "}]}";
}

void ExpectError(const Decoded& d, const std::string& fragment) {
  EXPECT_EQ(d.status.code(), StatusCode::kInvalidArgument) << d.status.ToString();
  EXPECT_NE(d.status.message().find(fragment), std::string::npos)
      << "message '" << d.status.message() << "' lacks '" << fragment << "'";
}

TEST(HttpInferCodecTest, JsonDataBecomesRawBytesFlatOrNested) {
  const Decoded flat = Decode(OneInput("FP32", "[2,2]", "[1, 2.5, -3, 4e1]"));
  ASSERT_TRUE(flat.status.ok()) << flat.status.ToString();
  ASSERT_EQ(flat.proto.raw_input_contents_size(), 1);
  EXPECT_EQ(flat.proto.raw_input_contents(0), Bytes<float>({1.f, 2.5f, -3.f, 40.f}));
  EXPECT_EQ(flat.proto.model_name(), "m");
  EXPECT_EQ(flat.proto.inputs(0).name(), "x");
  EXPECT_EQ(flat.proto.inputs(0).datatype(), "FP32");
  EXPECT_EQ(std::vector<int64_t>(flat.proto.inputs(0).shape().begin(), flat.proto.inputs(0).shape().end()),
            (std::vector<int64_t>{2, 2}));
  const Decoded nested = Decode(OneInput("FP32", "[2,2]", "[[1, 2.5], [-3, 4e1]]"));
  ASSERT_TRUE(nested.status.ok()) << nested.status.ToString();
  EXPECT_EQ(nested.proto.raw_input_contents(0), flat.proto.raw_input_contents(0));
}

TEST(HttpInferCodecTest, EveryTypeIsCheckedAndPacked) {
  Decoded d = Decode(OneInput("BOOL", "[3]", "[true, false, true]"));
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  EXPECT_EQ(d.proto.raw_input_contents(0), std::string("\x01\x00\x01", 3));
  d = Decode(OneInput("INT8", "[3]", "[-128, 0, 127]"));
  ASSERT_TRUE(d.status.ok());
  EXPECT_EQ(d.proto.raw_input_contents(0), Bytes<int8_t>({-128, 0, 127}));
  d = Decode(OneInput("UINT8", "[2]", "[0, 255]"));
  ASSERT_TRUE(d.status.ok());
  EXPECT_EQ(d.proto.raw_input_contents(0), Bytes<uint8_t>({0, 255}));
  d = Decode(OneInput("INT16", "[2]", "[-32768, 32767]"));
  ASSERT_TRUE(d.status.ok());
  EXPECT_EQ(d.proto.raw_input_contents(0), Bytes<int16_t>({-32768, 32767}));
  d = Decode(OneInput("INT32", "[1]", "[-2147483648]"));
  ASSERT_TRUE(d.status.ok());
  EXPECT_EQ(d.proto.raw_input_contents(0), Bytes<int32_t>({INT32_MIN}));
  d = Decode(OneInput("INT64", "[2]", "[9223372036854775807, -9223372036854775808]"));
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  EXPECT_EQ(d.proto.raw_input_contents(0), Bytes<int64_t>({INT64_MAX, INT64_MIN}));
  d = Decode(OneInput("FP64", "[2]", "[0.1, 1e300]"));
  ASSERT_TRUE(d.status.ok());
  EXPECT_EQ(d.proto.raw_input_contents(0), Bytes<double>({0.1, 1e300}));
}

TEST(HttpInferCodecTest, BadElementsAreNamedWithTheirIndex) {
  ExpectError(Decode(OneInput("FP32", "[3]", R"([1, "2", 3])")), "input 'x': element 1 is a string");
  ExpectError(Decode(OneInput("FP32", "[2]", "[1, 1e39]")), "element 1 (1e+39) is out of range for FP32");
  ExpectError(Decode(OneInput("BOOL", "[2]", "[true, 1]")), "element 1 is an integer (1); BOOL elements must be true");
  ExpectError(Decode(OneInput("INT8", "[2]", "[1, 128]")), "element 1 (128) is out of range for INT8 [-128, 127]");
  ExpectError(Decode(OneInput("UINT8", "[1]", "[-1]")), "out of range for UINT8 [0, 255]");
  ExpectError(Decode(OneInput("INT32", "[2]", "[1, 1.5]")), "element 1 is a non-integer number (1.5)");
  ExpectError(Decode(OneInput("INT32", "[1]", "[2147483648]")), "out of range for INT32");
  ExpectError(Decode(OneInput("INT64", "[1]", "[9223372036854775808]")), "out of range for INT64");
  ExpectError(Decode(OneInput("FP32", "[1]", "[null]")), "element 0 is null");
  ExpectError(Decode(OneInput("FP32", "[1]", "[{}]")), "element 0 is an object");
  ExpectError(Decode(OneInput("FP16", "[1]", "[1.0]")), "FP16 has no JSON form");
  ExpectError(Decode(OneInput("BYTES", "[1]", "[\"a\"]")), "datatype 'BYTES' is not supported");
}

TEST(HttpInferCodecTest, ElementCountMustMatchTheShape) {
  ExpectError(Decode(OneInput("FP32", "[2,3]", "[1,2,3,4,5]")), "\"data\" has 5 element(s), shape [2,3] needs 6");
  ExpectError(Decode(OneInput("FP32", "[2,3]", "[[1,2,3],[4,5,6],[7]]")), "has 7 element(s)");
  ExpectError(Decode(OneInput("FP32", "[-1,3]", "[1,2,3]")), "negative dimension");
  ExpectError(Decode(OneInput("FP32", "[4294967296,4294967296]", "[1]")), "overflows");
  ExpectError(Decode(OneInput("FP32", "[1.5]", "[1]")), "shape element 1.5 is not a 64-bit integer");
  // Hostile nesting stops at a bound instead of recursing without end.
  ExpectError(Decode(OneInput("FP32", "[1]", std::string(200, '[') + "1" + std::string(200, ']'))),
              "nested deeper than");
  // Outside "data" too: a shape (or a parameter) nested 200,000 deep would
  // overflow the stack of whatever copies or prints it.
  const std::string deep = std::string(200000, '[') + "1" + std::string(200000, ']');
  ExpectError(Decode(OneInput("FP32", deep, "[1]")), "the request's JSON is nested deeper than 64 levels");
  ExpectError(Decode(R"({"inputs": [], "parameters": {"p": )" + deep + "}}"), "nested deeper than 64 levels");
  ExpectError(Decode(OneInput("FP32", "[[[1]]]", "[1]")), "shape element [...] is not a 64-bit integer");
}

TEST(HttpInferCodecTest, MalformedRequestsAreRefusedClearly) {
  ExpectError(Decode("{\"inputs\": ["), "not valid JSON");
  ExpectError(Decode("[]"), "the request is an array, expected a JSON object");
  ExpectError(Decode("{}"), "\"inputs\" (an array of input tensors) is required");
  ExpectError(Decode(R"({"inputs": [{"datatype":"FP32","shape":[1],"data":[1]}]})"), "input 0: \"name\"");
  ExpectError(Decode(R"({"inputs": [{"name":"x","shape":[1],"data":[1]}]})"), "input 'x': \"datatype\"");
  ExpectError(Decode(R"({"inputs": [{"name":"x","datatype":"FP32","data":[1]}]})"), "input 'x': \"shape\"");
  ExpectError(Decode(R"({"inputs": [{"name":"x","datatype":"FP32","shape":[1]}]})"), "input 'x': has no data");
  ExpectError(Decode(R"({"id": 5, "inputs": []})"), "\"id\" is an integer, expected a string");
  ExpectError(Decode(R"({"inputs": [], "parameters": []})"), "\"parameters\" is an array, expected an object");
  ExpectError(Decode(R"({"inputs": [], "parameters": {"p": [1]}})"), "parameter 'p' is an array");
  ExpectError(Decode(R"({"inputs": [], "outputs": {}})"), "\"outputs\" is an object, expected an array");
  ExpectError(Decode(R"({"inputs": [], "outputs": [{"name": "y", "parameters": {"binary_data": 1}}]})"),
              "output 'y': parameter 'binary_data' is an integer, expected a bool");
}

// The parser streams "data" into the tensor's bytes when "datatype" came
// first, and keeps the elements for later otherwise: both give the same
// bytes and the same checks, whatever the key order.
TEST(HttpInferCodecTest, KeyOrderDoesNotMatter) {
  const Decoded late = Decode(R"({"inputs":[{"data":[[1,-2],[3,4]],"shape":[2,2],"name":"x","datatype":"INT16"}]})");
  ASSERT_TRUE(late.status.ok()) << late.status.ToString();
  EXPECT_EQ(late.proto.raw_input_contents(0), Bytes<int16_t>({1, -2, 3, 4}));
  EXPECT_EQ(late.proto.inputs(0).name(), "x");
  ExpectError(Decode(R"({"inputs":[{"name":"x","data":[1,40000],"datatype":"INT16","shape":[2]}]})"),
              "input 'x': element 1 (40000) is out of range for INT16");
  ExpectError(Decode(R"({"inputs":[{"data":[1,"two"],"name":"x","datatype":"INT8","shape":[2]}]})"),
              "input 'x': element 1 is a string (\"two\"); INT8 elements must be integers");
  // An object among the elements is skipped whole (keys, arrays and all)
  // and the input's later keys are still read.
  ExpectError(Decode(R"({"inputs":[{"name":"x","data":[1,{"k":[1,{"data":[2]}]},3],"datatype":"FP32",)"
                     R"("shape":[3]}]})"),
              "input 'x': element 1 is an object ({...}); FP32 elements must be numbers");
  ExpectError(Decode(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":{"a":1}}]})"),
              "input 'x': \"data\" is an object, expected an array of elements");
  ExpectError(Decode(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":"1"}]})"),
              "input 'x': \"data\" is a string, expected an array of elements");
  ExpectError(Decode(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":null}]})"),
              "input 'x': \"data\" is null, expected an array of elements");
  ExpectError(Decode(R"({"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[1,2],"datatype":"INT8"}]})"),
              "\"datatype\" is given more than once");
  // A lone number is one element.
  const Decoded scalar = Decode(R"({"inputs":[{"name":"x","datatype":"FP64","shape":[1],"data":2.5}]})");
  ASSERT_TRUE(scalar.status.ok()) << scalar.status.ToString();
  EXPECT_EQ(scalar.proto.raw_input_contents(0), Bytes<double>({2.5}));
  // A second "data" replaces the first, as a JSON object's last key does.
  const Decoded twice = Decode(R"({"inputs":[{"name":"x","datatype":"INT32","shape":[1],"data":[1,2],"data":[7]}]})");
  ASSERT_TRUE(twice.status.ok()) << twice.status.ToString();
  EXPECT_EQ(twice.proto.raw_input_contents(0), Bytes<int32_t>({7}));
  // "data" elsewhere (a parameter, a second input's) is not an input's data.
  const Decoded elsewhere = Decode(
      R"({"parameters":{"data":5},"inputs":[{"name":"a","datatype":"INT32","shape":[1],"data":[1]},)"
      R"({"name":"b","datatype":"INT32","shape":[1],"parameters":{"data":"x"},"data":[2]}]})");
  ASSERT_TRUE(elsewhere.status.ok()) << elsewhere.status.ToString();
  EXPECT_EQ(elsewhere.proto.parameters().at("data").int64_param(), 5);
  EXPECT_EQ(elsewhere.proto.inputs(1).parameters().at("data").string_param(), "x");
  EXPECT_EQ(elsewhere.proto.raw_input_contents(1), Bytes<int32_t>({2}));
  // Inputs that are not objects keep their place in the count.
  ExpectError(Decode(R"({"inputs":[1,{"name":"b","datatype":"INT32","shape":[1],"data":[2]}]})"),
              "input 0: is an integer, expected an object");
  // A second "inputs" replaces the first, and each of its inputs keeps its
  // own data: b has none (it came with a's, the first "inputs" counted in).
  ExpectError(Decode(R"({"inputs":[{"name":"z"}],"inputs":[{"name":"a","datatype":"INT32","shape":[1],"data":[9]},)"
                     R"({"name":"b","datatype":"INT32","shape":[1]}]})"),
              "input 'b'");
  const Decoded replaced = Decode(R"({"inputs":[{"name":"z"}],"inputs":[{"name":"a","datatype":"INT32","shape":[1],)"
                                  R"("data":[9]}]})");
  ASSERT_TRUE(replaced.status.ok()) << replaced.status.ToString();
  ASSERT_EQ(replaced.proto.inputs_size(), 1);
  EXPECT_EQ(replaced.proto.inputs(0).name(), "a");
  EXPECT_EQ(replaced.proto.raw_input_contents(0), Bytes<int32_t>({9}));
}

// What a request's JSON may cost beyond its bytes is bounded: values
// outside "data" (each a node of the parsed document; an empty input also
// an entry of its own) and the elements of a "data" that came before its
// "datatype" (held until it is known). Within the bounds such requests
// decode as before.
TEST(HttpInferCodecTest, ValuesOutsideDataAndHeldElementsAreBounded) {
  std::string empties = R"({"inputs":[)";
  for (int i = 0; i < 70000; ++i) empties += i == 0 ? "{}" : ",{}";
  ExpectError(Decode(empties + "]}"), "the request's JSON holds more than 65536 values outside the inputs' \"data\"");
  std::string elsewhere = R"({"parameters":{"x":[)";
  for (int i = 0; i < 70000; ++i) elsewhere += i == 0 ? "0" : ",0";
  ExpectError(Decode(elsewhere + R"(]},"inputs":[]})"), "holds more than 65536 values");

  const auto late_data = [](size_t elements) {
    std::string data = "[";
    for (size_t i = 0; i < elements; ++i) data += i == 0 ? "1" : ",1";
    return R"({"inputs":[{"name":"x","data":)" + data + R"(],"datatype":"UINT8","shape":[)" + std::to_string(elements) +
           "]}]}";
  };
  const Decoded held = Decode(late_data(size_t{1} << 20));
  ASSERT_TRUE(held.status.ok()) << held.status.ToString();
  EXPECT_EQ(held.proto.raw_input_contents(0).size(), size_t{1} << 20);
  ExpectError(Decode(late_data((size_t{1} << 20) + 1)),
              "input 'x': \"data\" came before \"datatype\", and the request holds more than 1048576 such "
              "elements: send \"datatype\" first");
}

TEST(HttpInferCodecTest, BinaryTensorsFollowTheJsonInInputOrder) {
  const std::string header =
      R"({"inputs":[{"name":"a","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}},)"
      R"({"name":"b","datatype":"INT32","shape":[1],"data":[7]},)"
      R"({"name":"c","datatype":"INT64","shape":[1],"parameters":{"binary_data_size":8}}]})";
  const std::string a = Bytes<float>({1.5f, -2.f});
  const std::string c = Bytes<int64_t>({42});
  const Decoded d = Decode(header + a + c, header.size());
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  ASSERT_EQ(d.proto.raw_input_contents_size(), 3);
  EXPECT_EQ(d.proto.raw_input_contents(0), a);
  EXPECT_EQ(d.proto.raw_input_contents(1), Bytes<int32_t>({7}));
  EXPECT_EQ(d.proto.raw_input_contents(2), c);
  // binary_data_size is the HTTP framing's, not a model parameter.
  EXPECT_TRUE(d.proto.inputs(0).parameters().empty());

  ExpectError(Decode(header + a + c + "x", header.size()), "1 byte(s) after the JSON are not claimed");
  ExpectError(Decode(header + a + c.substr(0, 4), header.size()), "input 'c': binary_data_size 8 but only 4");
  ExpectError(Decode(header + a + c, header.size() + 100), "larger than the body");
  ExpectError(Decode(header), "input 'a': binary_data_size 8 but only 0");
  ExpectError(Decode(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1],"data":[1],)"
                     R"("parameters":{"binary_data_size":4}}]})"),
              "give only one of");
  ExpectError(Decode(R"({"inputs":[{"name":"a","datatype":"FP32","shape":[1],)"
                     R"("parameters":{"binary_data_size":-4}}]})"),
              "binary_data_size' must be an integer >= 0");
}

TEST(HttpInferCodecTest, ParametersPassIntoTheProto) {
  const Decoded d =
      Decode(R"({"id":"r7","parameters":{"timeout":1000,"priority":2,"return_uncertainty":true,"s":"v","d":0.5,)"
             R"("big":18446744073709551615,"binary_data_output":true},)"
             R"("inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]},)"
             R"({"name":"y","datatype":"FP32","shape":[1],"parameters":{"shared_memory_region":"r",)"
             R"("shared_memory_byte_size":4}}],)"
             R"("outputs":[{"name":"o1","parameters":{"binary_data":false}},)"
             R"({"name":"o2","parameters":{"shared_memory_region":"out","shared_memory_offset":16}}]})");
  ASSERT_TRUE(d.status.ok()) << d.status.ToString();
  EXPECT_EQ(d.proto.id(), "r7");
  const auto& p = d.proto.parameters();
  EXPECT_EQ(p.at("timeout").int64_param(), 1000);
  EXPECT_EQ(p.at("priority").int64_param(), 2);
  EXPECT_TRUE(p.at("return_uncertainty").bool_param());
  EXPECT_EQ(p.at("s").string_param(), "v");
  EXPECT_EQ(p.at("d").double_param(), 0.5);
  EXPECT_EQ(p.at("big").uint64_param(), UINT64_MAX);
  EXPECT_EQ(p.count("binary_data_output"), 0u);
  // A shared-memory input has no raw entry (Triton's indexing): one for x only.
  ASSERT_EQ(d.proto.raw_input_contents_size(), 1);
  EXPECT_EQ(d.proto.inputs(1).parameters().at("shared_memory_region").string_param(), "r");
  EXPECT_EQ(d.proto.inputs(1).parameters().at("shared_memory_byte_size").int64_param(), 4);
  ASSERT_EQ(d.proto.outputs_size(), 2);
  EXPECT_TRUE(d.proto.outputs(0).parameters().empty());
  EXPECT_EQ(d.proto.outputs(1).parameters().at("shared_memory_offset").int64_param(), 16);
  EXPECT_TRUE(d.plan.all_binary);
  EXPECT_FALSE(d.plan.IsBinary("o1"));  // its own binary_data false wins
  EXPECT_TRUE(d.plan.IsBinary("o2"));
}

inference::ModelInferResponse Response() {
  inference::ModelInferResponse r;
  r.set_model_name("m");
  r.set_model_version("3");
  r.set_id("r1");
  (*r.mutable_parameters())["member_versions"].set_string_param("a:1");
  auto add = [&r](const std::string& name, const std::string& type, std::vector<int64_t> shape, std::string bytes) {
    auto* o = r.add_outputs();
    o->set_name(name);
    o->set_datatype(type);
    for (int64_t d : shape) o->add_shape(d);
    *r.add_raw_output_contents() = std::move(bytes);
  };
  add("p", "FP32", {1, 2}, Bytes<float>({0.25f, 0.75f}));
  add("flag", "BOOL", {2}, std::string("\x01\x00", 2));
  add("n", "INT64", {1}, Bytes<int64_t>({-5}));
  return r;
}

TEST(HttpInferCodecTest, ResponsesAreJsonWithFlatData) {
  StatusOr<HttpInferBody> body = EncodeHttpInferResponse(Response(), HttpOutputPlan{});
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  EXPECT_FALSE(body->header_length.has_value());
  const json j = json::parse(body->body);
  EXPECT_EQ(j["model_name"], "m");
  EXPECT_EQ(j["model_version"], "3");
  EXPECT_EQ(j["id"], "r1");
  EXPECT_EQ(j["parameters"]["member_versions"], "a:1");
  ASSERT_EQ(j["outputs"].size(), 3u);
  EXPECT_EQ(j["outputs"][0]["name"], "p");
  EXPECT_EQ(j["outputs"][0]["datatype"], "FP32");
  EXPECT_EQ(j["outputs"][0]["shape"], json::parse("[1,2]"));
  EXPECT_EQ(j["outputs"][0]["data"], json::parse("[0.25,0.75]"));
  EXPECT_EQ(j["outputs"][1]["data"], json::parse("[true,false]"));
  EXPECT_EQ(j["outputs"][2]["data"], json::parse("[-5]"));
}

TEST(HttpInferCodecTest, BinaryOutputsFollowTheJson) {
  HttpOutputPlan plan;
  plan.binary["n"] = true;
  plan.binary["p"] = true;
  StatusOr<HttpInferBody> body = EncodeHttpInferResponse(Response(), plan);
  ASSERT_TRUE(body.ok());
  ASSERT_TRUE(body->header_length.has_value());
  const json j = json::parse(body->body.substr(0, *body->header_length));
  EXPECT_FALSE(j["outputs"][0].contains("data"));
  EXPECT_EQ(j["outputs"][0]["parameters"]["binary_data_size"], 8);
  EXPECT_EQ(j["outputs"][1]["data"], json::parse("[true,false]"));  // not asked binary
  EXPECT_EQ(j["outputs"][2]["parameters"]["binary_data_size"], 8);
  EXPECT_EQ(body->body.substr(*body->header_length), Bytes<float>({0.25f, 0.75f}) + Bytes<int64_t>({-5}));
}

TEST(HttpInferCodecTest, SharedMemoryOutputsCarryNoDataAndBadSizesAreInternal) {
  inference::ModelInferResponse r = Response();
  auto& params = *r.mutable_outputs(0)->mutable_parameters();
  params["shared_memory_region"].set_string_param("out");
  params["shared_memory_byte_size"].set_int64_param(8);
  r.set_raw_output_contents(0, "");
  StatusOr<HttpInferBody> body = EncodeHttpInferResponse(r, HttpOutputPlan{});
  ASSERT_TRUE(body.ok());
  const json j = json::parse(body->body);
  EXPECT_FALSE(j["outputs"][0].contains("data"));
  EXPECT_EQ(j["outputs"][0]["parameters"]["shared_memory_region"], "out");

  r = Response();
  r.set_raw_output_contents(2, "abc");  // 3 bytes of INT64
  EXPECT_EQ(EncodeHttpInferResponse(r, HttpOutputPlan{}).status().code(), StatusCode::kInternal);
}

// The proto an HTTP body becomes goes through the same request codec as a
// gRPC request: its checks apply unchanged.
TEST(HttpInferCodecTest, DecodedRequestsPassTheRequestCodec) {
  ServerConfig config;
  ModelConfig m;
  m.name = "m";
  m.platform = "torchscript";
  m.max_batch_size = 4;
  m.inputs = {{"x", DataType::kFp32, {2}}};
  m.outputs = {{"y", DataType::kFp32, {2}}};
  m.versions = {1};
  config.models["m"] = m;
  config.limits.max_request_bytes = 1 << 20;
  const Decoded ok = Decode(OneInput("FP32", "[2,2]", "[[1,2],[3,4]]"));
  ASSERT_TRUE(ok.status.ok());
  auto request = DecodeInferRequest(ok.proto, config);
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  ASSERT_EQ((*request)->inputs.size(), 1u);
  EXPECT_EQ((*request)->inputs[0].bytes, 16u);
  float second_row[2];
  std::memcpy(second_row, (*request)->inputs[0].data + 8, 8);
  EXPECT_EQ(second_row[0], 3.f);
  EXPECT_EQ(second_row[1], 4.f);
  // Right count for its own shape, wrong shape for the model: the codec says so.
  const Decoded wrong = Decode(OneInput("FP32", "[1,3]", "[1,2,3]"));
  ASSERT_TRUE(wrong.status.ok());
  auto refused = DecodeInferRequest(wrong.proto, config);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("shape [1,3]"), std::string::npos) << refused.status().message();
}

}  // namespace
}  // namespace es
