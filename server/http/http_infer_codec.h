// HTTP infer codec: the body of a KServe v2 / Triton `POST .../infer` <->
// inference::ModelInferRequest / ModelInferResponse, so an HTTP inference is
// checked and run exactly as a gRPC one (InferCalls, request_codec).
//
// Request body: a JSON object
//   {"id": str, "parameters": {...}, "inputs": [...], "outputs": [...]}
// with each input {"name", "datatype", "shape", "parameters"?, "data"?}:
//   - "data": the elements, row-major, as a flat or nested array (nesting is
//     not checked against the shape, only the element count); BOOL elements
//     are true/false, integer types take JSON integers within the type's
//     range, FP32/FP64 any number (FP32 within its range). FP16 has no JSON
//     form: send it binary. Every bad element is an INVALID_ARGUMENT naming
//     the input and the element's index.
//   - Triton's binary tensor extension: with `header_length` (the request's
//     Inference-Header-Content-Length) the body's first header_length bytes
//     are the JSON and the rest the tensors' bytes, in input order, one
//     input per {"parameters": {"binary_data_size": N}}; they must add up to
//     exactly the bytes after the JSON.
//   - an input with parameter "shared_memory_region" carries no data here
//     (Triton's system shared-memory extension; server/shm/shm_registry.h reads it).
// Every input with data becomes one raw_input_contents entry (inputs that
// name a shared-memory region get none, as in Triton's gRPC indexing), so
// the request codec checks sizes, BOOL bytes and limits the same way for
// every transport. Parameters (request, input, output) pass into the proto's
// parameter maps (bool, int64, uint64 above INT64_MAX, double, string) except
// the HTTP-only ones: binary_data_size (inputs), binary_data (outputs) and
// binary_data_output (request), which become the HttpOutputPlan.
//
// The JSON is read with a SAX handler: everything but the inputs' "data"
// becomes a small DOM; each "data" goes straight into the tensor's bytes when
// the input's "datatype" came before it (tritonclient's order), else into a
// compact element list checked once the datatype is known. So a large JSON
// tensor costs its body and its bytes, not a DOM node per element.
//
// Response body: {"model_name", "model_version", "id", "parameters"?,
// "outputs": [{"name", "datatype", "shape", "parameters"?, "data"}]}, data
// flat row-major; an output asked for binary gets parameters
// {"binary_data_size": N} instead of "data", its bytes follow the JSON in
// output order and HttpInferBody::header_length is the JSON's length.
//
// Pure functions: safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "proto/grpc_service.pb.h"

namespace es {

// How the response's outputs travel: binary or JSON.
struct HttpOutputPlan {
  bool all_binary = false;             // request parameter binary_data_output
  std::map<std::string, bool> binary;  // per requested output: its binary_data parameter
  bool IsBinary(const std::string& output) const;
};

// Fills `out` (cleared first) for model `model` (and `version`, "" = the
// latest) from `body`. INVALID_ARGUMENT naming what is wrong.
Status DecodeHttpInferRequest(std::string_view body, std::optional<uint64_t> header_length, const std::string& model,
                              const std::string& version, inference::ModelInferRequest* out, HttpOutputPlan* plan);

struct HttpInferBody {
  std::string body;
  std::optional<size_t> header_length;  // set when binary outputs follow the JSON
};

// INTERNAL when the response is inconsistent (an output's bytes do not fit
// its datatype); otherwise the body.
StatusOr<HttpInferBody> EncodeHttpInferResponse(const inference::ModelInferResponse& response,
                                                const HttpOutputPlan& plan);

}  // namespace es
