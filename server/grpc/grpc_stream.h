// ModelStreamInfer: KServe v2 / Triton bidirectional streaming inference on
// gRPC's callback API, over InferCalls (the same admission, decoding,
// statistics and metrics as a unary ModelInfer).
//
// Semantics (Triton's):
//  - Every ModelInferRequest read from the stream is one inference call: it
//    takes its own place under limits.max_inflight_calls (Admit) and runs at
//    once; the stream keeps reading while earlier requests compute, so many
//    are in flight on one stream.
//  - Each request gets exactly one ModelStreamInferResponse, written in the
//    order the requests COMPLETE (not the order they came): infer_response
//    carries the request's `id` (match answers by it). A failed request
//    (decode error, refusal, model error, its deadline) is an answer with
//    error_message "CODE: message" (e.g. "INVALID_ARGUMENT: ...") and
//    infer_response.id / model_name / model_version set from the request;
//    the stream goes on.
//  - The client half-closing (WritesDone) ends the stream with OK once every
//    answer has been written.
//  - Client cancellation (or the stream's gRPC deadline passing, which gRPC
//    turns into a cancellation) ends the stream's work: requests still
//    running see CallContext::cancelled true, nothing more is written, and
//    the stream is finished CANCELLED once every run has ended.
//  - While the server drains (InferCalls::accepting() false) a request is
//    answered "UNAVAILABLE: server is shutting down" and the stream then
//    ends with UNAVAILABLE once the answers already due are written.
//  - Deadline: the stream's gRPC deadline bounds every request on it.
//
// Memory: a request holds its place from its read until its answer's write
// completed; answers wait in a queue (gRPC allows one write at a time) and
// reading pauses while 256 requests of the stream are running or answered
// but unwritten (kMaxOutstanding: one stream cannot take every place under
// max_inflight_calls), so a client that stops
// reading its answers stops the server reading its requests (HTTP/2 flow
// control then stops the client) instead of making the router hold them.
//
// Thread safety: gRPC calls the reactions concurrently with the runs'
// completions (host threads); all of the stream's state is under one mutex.
// The reactor deletes itself in OnDone, which gRPC calls only after Finish,
// which the reactor calls only after every run's `done` has fired.
#pragma once

#include <grpcpp/grpcpp.h>

#include "proto/grpc_service.grpc.pb.h"
#include "server/kserve/infer_calls.h"

namespace es {

// Its messages are gRPC's bytes: each request is walked and parsed by
// ParseInferRequest (infer_request_wire.h), each answer serialized here.
using StreamInferReactor = grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;

// The reactor of one ModelStreamInfer call (it starts reading at once).
StreamInferReactor* StartStreamInfer(grpc::CallbackServerContext* ctx, InferCalls* calls);

// A stream refused before it starts (e.g. by the auth check): finished with
// `status` at once, nothing read.
StreamInferReactor* RejectStream(const grpc::Status& status);

}  // namespace es
