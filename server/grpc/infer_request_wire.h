// A ModelInferRequest read from gRPC's bytes, with a bound on what parsing
// it may build.
//
// Parsing a protobuf message builds an object for every entry of a
// repeated message, string or map field, and an entry for every field it
// does not know: two bytes on the wire (an empty input: tag, length 0)
// become an InferInputTensor of about 100 bytes. A 20 MB request of empty
// inputs took the router's peak memory from 25 MB to 2 GB, and 11 s of a
// core, before the request's own checks could say that the model takes
// one input; the message limit (twice max_request_bytes) allowed six times
// that. So the bytes are walked first, without building anything, counting
// those entries at every level the schema has (inputs, outputs, raw
// contents, parameters, the typed contents' bytes elements, unknown
// fields); past kMaxWireEntries the request is refused. Repeated numbers
// (a shape, typed contents) are not counted: each costs at most 8 bytes for
// its at least 1 on the wire, and the request's own checks bound them.
//
// ParseInferRequest(wire, out): OK with `out` parsed, or INVALID_ARGUMENT
// saying the request holds too many entries, or that it is not a
// ModelInferRequest (bytes the parser refuses).
// Thread safety: a pure function (the ByteBuffer is not changed).
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>

#include "common/status.h"
#include "proto/grpc_service.pb.h"

namespace es {

inline constexpr size_t kMaxWireEntries = size_t{1} << 16;

Status ParseInferRequest(const grpc::ByteBuffer& wire, inference::ModelInferRequest* out);

}  // namespace es
