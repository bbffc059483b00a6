// ParseInferRequest (server/grpc/infer_request_wire.h): a ModelInferRequest's
// bytes parse as protobuf parses them, unless they hold more repeated
// entries than kMaxWireEntries, at any level of the schema, or do not parse.
#include <grpcpp/impl/codegen/proto_utils.h>
#include <gtest/gtest.h>

#include <string>

#include "server/grpc/infer_request_wire.h"

namespace es {
namespace {

grpc::ByteBuffer Wire(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

grpc::ByteBuffer Wire(const inference::ModelInferRequest& request) { return Wire(request.SerializeAsString()); }

void ExpectTooMany(const grpc::ByteBuffer& wire, const std::string& what) {
  inference::ModelInferRequest parsed;
  const Status s = ParseInferRequest(wire, &parsed);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
  EXPECT_EQ(s.message(),
            "the request holds more than 65536 inputs, outputs, raw contents, parameters and other repeated entries "
            "together")
      << what;
}

TEST(InferRequestWireTest, AnHonestRequestParsesAsProtobufParsesIt) {
  inference::ModelInferRequest request;
  request.set_model_name("mlp");
  request.set_id("job-7");
  (*request.mutable_parameters())["priority"].set_int64_param(1);
  auto* in = request.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  for (int i = 0; i < 100000; ++i) in->add_shape(1);  // numbers are not counted
  (*in->mutable_parameters())["binary_data_size"].set_int64_param(8);
  in->mutable_contents()->add_fp32_contents(1.5F);
  request.add_outputs()->set_name("probabilities");
  request.add_raw_input_contents(std::string(8, 'x'));
  inference::ModelInferRequest parsed;
  ASSERT_TRUE(ParseInferRequest(Wire(request), &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), request.SerializeAsString());
}

TEST(InferRequestWireTest, RepeatedEntriesAtEveryLevelAreCounted) {
  const int kOver = 65537;
  inference::ModelInferRequest inputs;
  for (int i = 0; i < kOver; ++i) inputs.add_inputs();
  ExpectTooMany(Wire(inputs), "empty inputs");

  inference::ModelInferRequest mixed;  // 20,000 each of four kinds
  for (int i = 0; i < 20000; ++i) {
    mixed.add_outputs();
    mixed.add_raw_input_contents("");
    (*mixed.mutable_parameters())["p" + std::to_string(i)];
    mixed.add_inputs();
  }
  ExpectTooMany(Wire(mixed), "outputs, raw contents, parameters and inputs");

  inference::ModelInferRequest nested;
  auto* in = nested.add_inputs();
  for (int i = 0; i < kOver; ++i) in->mutable_contents()->add_bytes_contents("");
  ExpectTooMany(Wire(nested), "an input's bytes contents");

  inference::ModelInferRequest output_parameters;
  auto* out = output_parameters.add_outputs();
  for (int i = 0; i < kOver; ++i) (*out->mutable_parameters())["k" + std::to_string(i)];
  ExpectTooMany(Wire(output_parameters), "an output's parameters");

  // Unknown fields are kept by the parser, one entry each: field 99, varint 0.
  std::string unknown;
  for (int i = 0; i < kOver; ++i) unknown += std::string("\x98\x06\x00", 3);
  ExpectTooMany(Wire(unknown), "unknown fields");
}

TEST(InferRequestWireTest, BytesThatDoNotParseAreRefused) {
  inference::ModelInferRequest parsed;
  for (const std::string& bytes : {std::string("\x2a\x05\x0a", 3), std::string("\x0b", 1), std::string("\xff", 1)}) {
    const Status s = ParseInferRequest(Wire(bytes), &parsed);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "the request is not a ModelInferRequest (its bytes do not parse)");
  }
  EXPECT_TRUE(ParseInferRequest(Wire(std::string()), &parsed).ok()) << "an empty message is every field's default";
}

}  // namespace
}  // namespace es
