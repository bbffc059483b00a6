// The HTTP client's codec (clients/http_client.h): ModelInferRequest -> the
// KServe v2 / Triton HTTP body with binary tensors, answer bodies -> the
// ModelInferResponse, and every malformed answer refused with a message
// naming what is wrong (answers are untrusted input). The end-to-end use
// against the server is tests/clients/test_http_clients.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "clients/http_client.h"

namespace es::client {
namespace {

using json = nlohmann::json;

std::string Bytes(const void* data, size_t n) { return std::string(static_cast<const char*>(data), n); }

// Splits an encoded body into its JSON header and binary tail.
std::pair<json, std::string> Split(const std::string& body, size_t header_length) {
  return {json::parse(body.substr(0, header_length)), body.substr(header_length)};
}

TEST(HttpCodec, RequestHasBinaryInputsInOrderAndAsksBinaryOutputs) {
  inference::ModelInferRequest r;
  r.set_model_name("m");
  r.set_id("req-1");
  const std::vector<float> a = {1.5f, -2.25f};
  const std::vector<int64_t> b = {7, -8, 9};
  ASSERT_TRUE(AddInput<float>(&r, "a", {1, 2}, a).ok());
  auto* shm = r.add_inputs();  // in a region: no bytes in the body
  shm->set_name("s");
  shm->set_datatype("FP32");
  shm->add_shape(4);
  (*shm->mutable_parameters())["shared_memory_region"].set_string_param("r0");
  (*shm->mutable_parameters())["shared_memory_byte_size"].set_int64_param(16);
  ASSERT_TRUE(AddInput<int64_t>(&r, "b", {3}, b).ok());
  SetParameter(&r, "return_uncertainty", true);
  SetParameter(&r, "priority", int64_t{2});
  (*r.mutable_parameters())["big"].set_uint64_param(uint64_t{1} << 63);
  (*r.mutable_parameters())["ratio"].set_double_param(0.25);
  RequestOutput(&r, "probabilities");

  std::string body;
  size_t header_length = 0;
  ASSERT_TRUE(EncodeHttpInferRequest(r, &body, &header_length).ok());
  auto [j, tail] = Split(body, header_length);
  EXPECT_EQ(j["id"], "req-1");
  EXPECT_EQ(j["parameters"]["return_uncertainty"], true);
  EXPECT_EQ(j["parameters"]["priority"], 2);
  EXPECT_EQ(j["parameters"]["big"].get<uint64_t>(), uint64_t{1} << 63);
  EXPECT_EQ(j["parameters"]["ratio"], 0.25);
  EXPECT_FALSE(j["parameters"].contains("binary_data_output"));  // outputs are named, each asked binary
  ASSERT_EQ(j["inputs"].size(), 3u);
  EXPECT_EQ(j["inputs"][0]["name"], "a");
  EXPECT_EQ(j["inputs"][0]["shape"], json::array({1, 2}));
  EXPECT_EQ(j["inputs"][0]["parameters"]["binary_data_size"], 8);
  EXPECT_FALSE(j["inputs"][1]["parameters"].contains("binary_data_size"));
  EXPECT_EQ(j["inputs"][1]["parameters"]["shared_memory_region"], "r0");
  EXPECT_EQ(j["inputs"][2]["parameters"]["binary_data_size"], 24);
  EXPECT_EQ(j["outputs"][0]["name"], "probabilities");
  EXPECT_EQ(j["outputs"][0]["parameters"]["binary_data"], true);
  EXPECT_EQ(tail, Bytes(a.data(), 8) + Bytes(b.data(), 24));

  // No output named: every output comes back binary.
  r.clear_outputs();
  ASSERT_TRUE(EncodeHttpInferRequest(r, &body, &header_length).ok());
  EXPECT_EQ(Split(body, header_length).first["parameters"]["binary_data_output"], true);
}

TEST(HttpCodec, RequestWithoutRawBytesIsRefused) {
  inference::ModelInferRequest r;
  r.set_model_name("m");
  auto* in = r.add_inputs();
  in->set_name("typed");
  in->set_datatype("FP32");
  in->add_shape(1);
  in->mutable_contents()->add_fp32_contents(1.f);
  std::string body;
  size_t header_length = 0;
  const Status s = EncodeHttpInferRequest(r, &body, &header_length);
  EXPECT_EQ(s.code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("'typed'"), std::string::npos) << s.message();
  // More raw entries than inputs that carry data.
  r.clear_inputs();
  r.add_raw_input_contents("x");
  EXPECT_EQ(EncodeHttpInferRequest(r, &body, &header_length).code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(HttpCodec, AnswerWithBinaryJsonAndShmOutputs) {
  const std::vector<float> probs = {0.25f, 0.75f};
  json j = {{"model_name", "m"},
            {"model_version", "1"},
            {"id", "x"},
            {"parameters", {{"flag", true}, {"n", -3}, {"u", uint64_t{1} << 63}, {"d", 0.5}, {"s", "t"}}},
            {"outputs",
             {{{"name", "probs"}, {"datatype", "FP32"}, {"shape", {1, 2}}, {"parameters", {{"binary_data_size", 8}}}},
              {{"name", "ints"}, {"datatype", "INT8"}, {"shape", {2, 2}}, {"data", {{1, -2}, {3, 127}}}},
              {{"name", "flags"}, {"datatype", "BOOL"}, {"shape", {2}}, {"data", {true, false}}},
              {{"name", "wide"}, {"datatype", "UINT64"}, {"shape", {1}}, {"data", {uint64_t{1} << 63}}},
              {{"name", "text"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {"ab"}}},
              {{"name", "in_shm"},
               {"datatype", "FP32"},
               {"shape", {2}},
               {"parameters", {{"shared_memory_region", "r1"}, {"shared_memory_byte_size", 8}}}}}}};
  const std::string header = j.dump();
  const std::string body = header + Bytes(probs.data(), 8);
  inference::ModelInferResponse r;
  const Status s = DecodeHttpInferResponse(body, header.size(), &r);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.model_name(), "m");
  EXPECT_EQ(r.model_version(), "1");
  EXPECT_EQ(r.id(), "x");
  EXPECT_TRUE(r.parameters().at("flag").bool_param());
  EXPECT_EQ(r.parameters().at("n").int64_param(), -3);
  EXPECT_EQ(r.parameters().at("u").uint64_param(), uint64_t{1} << 63);
  EXPECT_EQ(r.parameters().at("d").double_param(), 0.5);
  EXPECT_EQ(r.parameters().at("s").string_param(), "t");
  ASSERT_EQ(r.outputs_size(), 6);
  ASSERT_EQ(r.raw_output_contents_size(), 6);  // one per output, by index
  auto view = GetOutput<float>(r, "probs");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(std::vector<float>(view->values.begin(), view->values.end()), probs);
  EXPECT_FALSE(r.outputs(0).parameters().contains("binary_data_size"));
  const int8_t ints[] = {1, -2, 3, 127};
  EXPECT_EQ(r.raw_output_contents(1), Bytes(ints, 4));
  EXPECT_EQ(r.raw_output_contents(2), std::string("\x01\x00", 2));
  const uint64_t wide = uint64_t{1} << 63;
  EXPECT_EQ(r.raw_output_contents(3), Bytes(&wide, 8));
  EXPECT_EQ(r.raw_output_contents(4), std::string("\x02\x00\x00\x00"
                                                  "ab",
                                                  6));
  EXPECT_EQ(r.raw_output_contents(5), "");
  EXPECT_EQ(r.outputs(5).parameters().at("shared_memory_region").string_param(), "r1");

  // No Inference-Header-Content-Length: the whole body is the JSON.
  json plain = {{"model_name", "m"},
                {"outputs", {{{"name", "o"}, {"datatype", "FP64"}, {"shape", {1}}, {"data", {2.5}}}}}};
  ASSERT_TRUE(DecodeHttpInferResponse(plain.dump(), std::nullopt, &r).ok());
  const double d = 2.5;
  EXPECT_EQ(r.raw_output_contents(0), Bytes(&d, 8));
}

TEST(HttpCodec, DeeplyNestedDataDoesNotExhaustTheStack) {
  const int depth = 200000;
  const std::string data = std::string(depth, '[') + "7" + std::string(depth, ']');
  const std::string body =
      R"({"outputs":[{"name":"o","datatype":"INT32","shape":[1],"data":)" + data + "}]}";
  inference::ModelInferResponse r;
  const Status s = DecodeHttpInferResponse(body, std::nullopt, &r);
  if (s.ok()) {  // the JSON parser may refuse the depth itself; either way no crash
    const int32_t seven = 7;
    EXPECT_EQ(r.raw_output_contents(0), Bytes(&seven, 4));
  }
}

TEST(HttpCodec, MalformedAnswersAreInternalErrorsNamingTheFault) {
  const auto output = [](json o) { return json{{"outputs", {std::move(o)}}}; };
  const json binary4 = {{"name", "o"}, {"datatype", "FP32"}, {"shape", {1}}, {"parameters", {{"binary_data_size", 4}}}};
  struct Case {
    std::string body;
    std::optional<uint64_t> header_length;
    std::string needle;
  };
  const std::string h = output(binary4).dump();
  const std::vector<Case> cases = {
      {"{}", 3, "past the body"},                                // header length beyond the body
      {h + "abc", h.size(), "past the body's binary part"},      // 4 bytes announced, 3 sent
      {h + "abcdX", h.size(), "belong to no output"},            // a byte too many
      {"[1,2]", std::nullopt, "not a JSON object"},              // not an object
      {"{\"outputs\": 5}", std::nullopt, "not an array"},        // outputs not an array
      {"{\"model_name\": 5}", std::nullopt, "must be strings"},  // wrong type
      {output({{"name", "o"}, {"datatype", "INT8"}, {"shape", {1}}, {"data", {300}}}).dump(), std::nullopt,
       "element 0 is not a valid INT8"},
      {output({{"name", "o"}, {"datatype", "UINT8"}, {"shape", {2}}, {"data", {1, -1}}}).dump(), std::nullopt,
       "element 1 is not a valid UINT8"},
      {output({{"name", "o"}, {"datatype", "FP16"}, {"shape", {1}}, {"data", {1.0}}}).dump(), std::nullopt,
       "no JSON form"},
      {output({{"name", "o"}, {"datatype", "FP32"}, {"shape", {-1}}, {"data", {1.0}}}).dump(), std::nullopt,
       "a dim is not an integer >= 0"},
      {output({{"name", "o"}, {"datatype", "FP32"}, {"shape", {1}}, {"parameters", {{"binary_data_size", -4}}}}).dump(),
       std::nullopt, "binary_data_size is not an integer >= 0"},
      {output({{"name", "o"}, {"datatype", "FP32"}, {"shape", {1}}, {"parameters", {{"p", {1, 2}}}}}).dump(),
       std::nullopt, "is not a scalar"},
      {output({{"datatype", "FP32"}, {"shape", {1}}}).dump(), std::nullopt, "without a string name"},
  };
  for (const auto& c : cases) {
    inference::ModelInferResponse r;
    const Status s = DecodeHttpInferResponse(c.body, c.header_length, &r);
    EXPECT_EQ(s.code(), grpc::StatusCode::INTERNAL) << c.body;
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << c.body << " -> " << s.message();
  }
}

TEST(HttpCodec, StatusCodesAndPaths) {
  EXPECT_EQ(CodeOfHttpStatus(200), grpc::StatusCode::OK);
  EXPECT_EQ(CodeOfHttpStatus(400), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(CodeOfHttpStatus(401), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(CodeOfHttpStatus(403), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(CodeOfHttpStatus(404), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(CodeOfHttpStatus(405), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(CodeOfHttpStatus(409), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(CodeOfHttpStatus(413), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(CodeOfHttpStatus(429), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(CodeOfHttpStatus(500), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(CodeOfHttpStatus(501), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(CodeOfHttpStatus(503), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(CodeOfHttpStatus(504), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(CodeOfHttpStatus(418), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(CodeOfHttpStatus(302), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(ModelPath("mlp", ""), "/v2/models/mlp");
  EXPECT_EQ(ModelPath("a b/c", "2"), "/v2/models/a%20b%2Fc/versions/2");
  // An address without a port is refused before any connection.
  EXPECT_EQ(HttpClient::Create("localhost").status().code(), grpc::StatusCode::INVALID_ARGUMENT);
  ClientOptions bad;
  bad.ssl = true;
  bad.ssl_root_certs = "not a PEM";
  const auto made = HttpClient::Create("127.0.0.1:1", bad);
  EXPECT_EQ(made.status().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(made.status().message().find("TLS CA"), std::string::npos) << made.status().message();
}

}  // namespace
}  // namespace es::client
