// The answer of the ModelConfig RPC: one model of the loaded repository as
// Triton's inference.ModelConfig (proto/model_config.proto), so that
// tritonclient's get_model_config() and perf_analyzer read our models as they
// read Triton's.
//
// Contract of FillModelConfig (`out` is cleared first):
//   name, max_batch_size, input/output (data_type as Triton's TYPE_*, dims as
//   declared: without the batch dim when batched), version_policy (latest /
//   all / specific, from the model's policy), and
//   - a TorchScript model: platform "pytorch_libtorch", backend "pytorch";
//     dynamic_batching only when its `dynamic_batching:` section is present;
//     one instance_group per device kind of its hosts (KIND_CPU, or KIND_GPU
//     for cuda hosts), named "<model>_<i>", count = instances_per_host times
//     the hosts of that kind (one group when all hosts share a kind);
//   - an ensemble: platform "ensemble", no backend, no instance_group, and
//     ensemble_scheduling with one step per member (model_version -1, i.e. the
//     member's latest served version), input_map/output_map naming the
//     ensemble's tensors, which members declare under the same names (checked
//     when the repository is loaded).
// Router-only settings with no Triton field (ensemble weights and combine
// rule, queue bytes, max_compute_ms) are not reported.
//
// Pure functions of read-only config values: safe from any thread.
#pragma once

#include "config/server_config.h"
#include "proto/model_config.pb.h"

namespace es {

// kFp32 -> TYPE_FP32, ...; kInvalid -> TYPE_INVALID.
inference::DataType ToTritonDataType(DataType type);

// `model` is one of `server.models`; `server` gives its hosts' devices.
void FillModelConfig(const ModelConfig& model, const ServerConfig& server, inference::ModelConfig* out);

}  // namespace es
