// Request codec: KServe v2 protobuf <-> the router's InferRequest/Response.
//
// DecodeInferRequest() is where bad input stops: it checks the model and
// version exist (NOT_FOUND), that the inputs match the config by name, count,
// datatype and shape, that each shape's byte size fits 64 bits (every product
// is overflow-checked) and agrees with the tensor's bytes, that raw and typed
// contents are not mixed, that typed UINT8/INT8/INT16 values fit their type
// and BOOL bytes are 0 or 1, that requested outputs exist and are named once
// (INVALID_ARGUMENT), and that the request fits the size limit
// (RESOURCE_EXHAUSTED). Every message names the model and the tensor (and the
// element, for a bad value). Nothing after it has to distrust the request.
//
// The decoded request borrows the bytes of `proto` (raw contents, or typed
// contents read in place when their layout already is the tensor's); `proto`
// must outlive it.
//
// Shared-memory tensors (Triton's system shared-memory extension; `shm` is
// the registry, null = not available, and a tensor naming a region is then
// INVALID_ARGUMENT naming it). Tensor parameters: shared_memory_region
// (string), shared_memory_byte_size (int64, required with it),
// shared_memory_offset (int64, optional, 0); neither number without the
// region.
//  - An input with them is read from the region at decode time (into the
//    request's shm_scratch): its byte size must equal the tensor's, and the
//    range must lie in the region (NOT_FOUND for an unknown region,
//    INVALID_ARGUMENT otherwise, naming the model, input and region). It may
//    not have typed contents. As in Triton, raw_input_contents then holds
//    only the inputs not in shared memory, in `inputs` order.
//  - A requested output with them: the region is opened at decode (so an
//    unregister during the run does not pull it away), and
//    EncodeInferResponse writes the output's bytes there.
//
// Request parameters understood (KServe v2 `parameters`):
//   return_member_outputs (bool) : ensembles also return "<member>.<output>"
//   return_uncertainty (bool)    : ensembles also return "entropy" and
//                                  "disagreement", FP32 [batch]
//   timeout (int64, µs)          : a deadline, as Triton's `timeout` parameter;
//                                  0 = none, values past the clock's range
//                                  (e.g. INT64_MAX) clamp to none
//   priority (int64)             : batched models: 1 (highest) .. priority_levels;
//                                  0 or absent = the model's default_priority
#pragma once

#include <memory>

#include "config/server_config.h"
#include "proto/grpc_service.pb.h"
#include "server/core/infer_types.h"
#include "server/core/model_catalog.h"
#include "server/shm/shm_registry.h"

namespace es {

// The model and version come from `catalog` (what is served now).
StatusOr<std::shared_ptr<InferRequest>> DecodeInferRequest(const inference::ModelInferRequest& proto,
                                                           const ModelCatalog& catalog, const Limits& limits,
                                                           const SharedMemoryRegistry* shm = nullptr);
// The same against a fixed config (StaticCatalog): for tests and tools.
StatusOr<std::shared_ptr<InferRequest>> DecodeInferRequest(const inference::ModelInferRequest& proto,
                                                           const ServerConfig& config,
                                                           const SharedMemoryRegistry* shm = nullptr);

// Fills `proto` with the response (raw_output_contents), keeping only the
// requested outputs when the request named some. An output requested into
// shared memory is written to its region; its response tensor then carries
// parameters shared_memory_region, shared_memory_offset and
// shared_memory_byte_size (the bytes written) and an empty
// raw_output_contents entry (Triton's layout: entries stay aligned with
// `outputs`). INVALID_ARGUMENT, naming the output, the region and both sizes,
// when an output does not fit its shared_memory_byte_size or the object
// shrank; `proto` is then cleared.
Status EncodeInferResponse(const InferRequest& request, InferResponse response, inference::ModelInferResponse* proto);

// The KServe v2 shape of a config tensor: [-1, dims...] for a batched model.
std::vector<int64_t> MetadataShape(const ModelConfig& model, const TensorSpec& spec);

// One input or output of a ModelMetadata answer: name, datatype, MetadataShape.
void FillTensorMetadata(const ModelConfig& model, const TensorSpec& spec,
                        inference::ModelMetadataResponse::TensorMetadata* t);

}  // namespace es
