#include "server/grpc/infer_request_wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <climits>
#include <string>

namespace es {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// The messages of ModelInferRequest's schema (proto/grpc_service.proto)
// whose fields may repeat; kNone: a field walked no further.
enum class Kind { kNone, kRequest, kInput, kOutput, kParameterEntry, kContents };

// What a length-delimited field `field` of a `kind` message holds: a message
// walked in turn, or else whether each occurrence adds an entry (a repeated
// string or bytes, an unknown field) or not (a singular string, which a
// later one replaces; packed numbers, not counted).
struct Field {
  Kind message = Kind::kNone;
  bool entry = false;
};

Field LengthDelimited(Kind kind, uint32_t field) {
  switch (kind) {
    case Kind::kRequest:  // model_name 1, model_version 2, id 3, parameters 4, inputs 5, outputs 6, raw 7
      if (field <= 3) return {};
      if (field == 4) return {Kind::kParameterEntry, true};
      if (field == 5) return {Kind::kInput, true};
      if (field == 6) return {Kind::kOutput, true};
      if (field == 7) return {Kind::kNone, true};
      break;
    case Kind::kInput:  // name 1, datatype 2, shape 3 (packed), parameters 4, contents 5 (merged)
      if (field <= 3) return {};
      if (field == 4) return {Kind::kParameterEntry, true};
      if (field == 5) return {Kind::kContents, false};
      break;
    case Kind::kOutput:  // name 1, parameters 2
      if (field == 1) return {};
      if (field == 2) return {Kind::kParameterEntry, true};
      break;
    case Kind::kParameterEntry:  // key 1, value 2 (an InferParameter: one singular field)
      if (field == 1 || field == 2) return {};
      break;
    case Kind::kContents:  // numbers 1-7 (packed), bytes_contents 8
      if (field >= 1 && field <= 7) return {};
      if (field == 8) return {Kind::kNone, true};
      break;
    case Kind::kNone:
      return {};
  }
  return {Kind::kNone, true};  // unknown: kept as an unknown field
}

// Whether `field` of a `kind` message is known with a number's wire type
// (a singular number, or one element of an unpacked repeated one).
bool KnownNumber(Kind kind, uint32_t field) {
  switch (kind) {
    case Kind::kInput:
      return field == 3;
    case Kind::kContents:
      return field >= 1 && field <= 7;
    default:
      return false;
  }
}

// Reads past one number of the wire type.
bool SkipNumber(CodedInputStream* in, WireFormatLite::WireType type) {
  if (type == WireFormatLite::WIRETYPE_VARINT) {
    uint64_t value = 0;
    return in->ReadVarint64(&value);
  }
  if (type == WireFormatLite::WIRETYPE_FIXED64) {
    uint64_t value = 0;
    return in->ReadLittleEndian64(&value);
  }
  uint32_t value = 0;
  return in->ReadLittleEndian32(&value);
}

enum class Walked { kOk, kTooMany, kMalformed };

// Walks one message of `kind` up to the stream's current limit, adding to
// `entries`. The schema nests three deep, so the recursion does too.
Walked Walk(CodedInputStream* in, Kind kind, size_t* entries) {
  for (;;) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) return in->ConsumedEntireMessage() ? Walked::kOk : Walked::kMalformed;
    const uint32_t field = WireFormatLite::GetTagFieldNumber(tag);
    bool ok = true;
    bool entry = false;
    switch (WireFormatLite::GetTagWireType(tag)) {
      case WireFormatLite::WIRETYPE_VARINT:
      case WireFormatLite::WIRETYPE_FIXED64:
      case WireFormatLite::WIRETYPE_FIXED32:
        ok = SkipNumber(in, WireFormatLite::GetTagWireType(tag));
        entry = !KnownNumber(kind, field);
        break;
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t length = 0;
        if (!in->ReadVarint32(&length) || length > static_cast<uint32_t>(INT_MAX)) return Walked::kMalformed;
        const Field what = LengthDelimited(kind, field);
        entry = what.entry;
        if (what.message != Kind::kNone) {
          const CodedInputStream::Limit limit = in->PushLimit(static_cast<int>(length));
          if (entry && ++*entries > kMaxWireEntries) return Walked::kTooMany;
          entry = false;
          const Walked inner = Walk(in, what.message, entries);
          if (inner != Walked::kOk) return inner;
          in->PopLimit(limit);
        } else {
          ok = in->Skip(static_cast<int>(length));
        }
        break;
      }
      default:  // groups: no field of this schema is one
        return Walked::kMalformed;
    }
    if (!ok) return Walked::kMalformed;
    if (entry && ++*entries > kMaxWireEntries) return Walked::kTooMany;
  }
}

}  // namespace

Status ParseInferRequest(const grpc::ByteBuffer& wire, inference::ModelInferRequest* out) {
  const auto malformed = [] {
    return Status::InvalidArgument("the request is not a ModelInferRequest (its bytes do not parse)");
  };
  grpc::ByteBuffer bytes(wire);  // shares the slices; the reader needs a mutable buffer
  size_t entries = 0;
  {
    grpc::ProtoBufferReader reader(&bytes);
    CodedInputStream in(&reader);
    in.SetTotalBytesLimit(INT_MAX);
    switch (Walk(&in, Kind::kRequest, &entries)) {
      case Walked::kOk:
        break;
      case Walked::kTooMany:
        return Status::InvalidArgument("the request holds more than " + std::to_string(kMaxWireEntries) +
                                       " inputs, outputs, raw contents, parameters and other repeated entries "
                                       "together");
      case Walked::kMalformed:
        return malformed();
    }
  }
  grpc::ProtoBufferReader reader(&bytes);
  if (!out->ParseFromZeroCopyStream(&reader)) return malformed();
  return Status::Ok();
}

}  // namespace es
