// Tensors of KServe v2 requests and responses: input builders from buffers
// (raw_input_contents), typed, zero-copy views of outputs
// (raw_output_contents), and shapes as text.
//
// Contract:
//  - Datatypes are KServe v2 names (BOOL, UINT8..UINT64, INT8..INT64, FP16,
//    FP32, FP64); BYTES is not handled (no fixed element size).
//  - AddInput* append one input to a ModelInferRequest, its bytes as one
//    raw_input_contents entry (copied once, into the request). A request
//    must not mix raw and typed contents: KServe forbids it, so do not use
//    these on a request that carries typed `contents`.
//  - GetOutput<T> finds an output by name and returns a view whose span
//    points INTO the response: valid while the response lives and is not
//    modified. It checks the datatype against T, and that the payload's size
//    equals the product of the shape times the element size; errors name the
//    output. CopyOutput<T> returns an owning copy instead.
//  - Stateless free functions; thread-safe on distinct messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "clients/status.h"
#include "proto/grpc_service.pb.h"

namespace es::client {

// Bytes per element of a KServe v2 datatype; 0 for BYTES or an unknown name.
size_t DatatypeSize(std::string_view datatype);

// Product of the dims (1 for a scalar shape []); -1 if a dim is negative or
// the product overflows int64 (a shape from an answer is untrusted).
int64_t ElementCount(std::span<const int64_t> shape);

// A shape as the tools print it, in tables and in error messages alike:
// "[2,3]", "[]" for a scalar, -1 for a variable dim as is ("[-1,784]").
std::string ShapeText(std::span<const int64_t> shape);

// The KServe datatype of a C++ element type (static_assert on others).
template <typename T>
constexpr const char* DatatypeOf() {
  if constexpr (std::is_same_v<T, bool>) return "BOOL";
  else if constexpr (std::is_same_v<T, uint8_t>) return "UINT8";
  else if constexpr (std::is_same_v<T, uint16_t>) return "UINT16";
  else if constexpr (std::is_same_v<T, uint32_t>) return "UINT32";
  else if constexpr (std::is_same_v<T, uint64_t>) return "UINT64";
  else if constexpr (std::is_same_v<T, int8_t>) return "INT8";
  else if constexpr (std::is_same_v<T, int16_t>) return "INT16";
  else if constexpr (std::is_same_v<T, int32_t>) return "INT32";
  else if constexpr (std::is_same_v<T, int64_t>) return "INT64";
  else if constexpr (std::is_same_v<T, float>) return "FP32";
  else if constexpr (std::is_same_v<T, double>) return "FP64";
  else static_assert(sizeof(T) == 0, "no KServe v2 datatype for this type");
}

// Appends input `name` with `datatype` and `shape`, its payload the `bytes`
// at `data`. INVALID_ARGUMENT (request unchanged) when the byte count is not
// the shape's element count times the datatype's size.
Status AddRawInput(inference::ModelInferRequest* request, const std::string& name, const std::string& datatype,
                   const std::vector<int64_t>& shape, const void* data, size_t bytes);

// Typed form: the datatype follows from T.
template <typename T>
Status AddInput(inference::ModelInferRequest* request, const std::string& name, const std::vector<int64_t>& shape,
                std::span<const T> values) {
  return AddRawInput(request, name, DatatypeOf<T>(), shape, values.data(), values.size_bytes());
}

// Asks for output `name` only (call once per output wanted; none = all).
void RequestOutput(inference::ModelInferRequest* request, const std::string& name);

// Sets a request parameter (bool, int64 or string), e.g. "return_uncertainty".
void SetParameter(inference::ModelInferRequest* request, const std::string& key, bool value);
void SetParameter(inference::ModelInferRequest* request, const std::string& key, int64_t value);
void SetParameter(inference::ModelInferRequest* request, const std::string& key, const std::string& value);

// An output of a response as the raw bytes it came in.
struct RawOutput {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  std::string_view bytes;  // into the response
};
Result<RawOutput> GetRawOutput(const inference::ModelInferResponse& response, const std::string& name);

// The names of the outputs of a response, in order.
std::vector<std::string> OutputNames(const inference::ModelInferResponse& response);

template <typename T>
struct OutputView {
  std::vector<int64_t> shape;
  std::span<const T> values;  // row-major, into the response

  int64_t dim(size_t i) const { return shape.at(i); }
  // Row r of a 2-D (or higher) output: shape[1] * ... elements.
  std::span<const T> row(int64_t r) const {
    const size_t n = shape.empty() || shape[0] == 0 ? 0 : values.size() / static_cast<size_t>(shape[0]);
    return values.subspan(static_cast<size_t>(r) * n, n);
  }
};

// Checks the datatype and alignment of a raw output for T (the message names `raw.name`).
Status CheckOutputType(const RawOutput& raw, const char* expected_datatype, size_t alignment);

template <typename T>
Result<OutputView<T>> GetOutput(const inference::ModelInferResponse& response, const std::string& name) {
  ES_ASSIGN_OR_RETURN(RawOutput raw, GetRawOutput(response, name));
  ES_RETURN_IF_ERROR(CheckOutputType(raw, DatatypeOf<T>(), alignof(T)));
  const auto* data = reinterpret_cast<const T*>(raw.bytes.data());
  return OutputView<T>{std::move(raw.shape), std::span<const T>(data, raw.bytes.size() / sizeof(T))};
}

// An owning copy of an output (works whatever the payload's alignment).
template <typename T>
struct OutputTensor {
  std::vector<int64_t> shape;
  std::vector<T> values;
};

template <typename T>
Result<OutputTensor<T>> CopyOutput(const inference::ModelInferResponse& response, const std::string& name) {
  static_assert(!std::is_same_v<T, bool>, "std::vector<bool> has no storage to copy into: use GetOutput<bool>");
  ES_ASSIGN_OR_RETURN(RawOutput raw, GetRawOutput(response, name));
  ES_RETURN_IF_ERROR(CheckOutputType(raw, DatatypeOf<T>(), 1));
  OutputTensor<T> out{std::move(raw.shape), std::vector<T>(raw.bytes.size() / sizeof(T))};
  if (!raw.bytes.empty()) std::memcpy(out.values.data(), raw.bytes.data(), raw.bytes.size());
  return out;
}

}  // namespace es::client
