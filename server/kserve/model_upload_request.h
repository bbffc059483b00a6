// A RepositoryModelLoad request's parameters as a model upload: Triton's
// `config` (a model config as JSON, in Triton's form) and `file:<path>`
// (the model's files as bytes, e.g. `file:1/model.pt`), as tritonclient's
// load_model(name, config=..., files=...) sends them; the HTTP route has
// already decoded each file's base64 into bytes.
//
// Triton's config JSON maps onto our config.yaml fields:
//   platform "pytorch_libtorch" (or backend "pytorch")  -> torchscript
//   input / output {name, data_type TYPE_X, dims}       -> inputs / outputs {name, datatype X, dims}
//   max_batch_size, version_policy, response_cache      -> the same
//   dynamic_batching {max_queue_delay_microseconds, preferred_batch_size,
//     priority_levels, default_priority_level,
//     default_queue_policy.max_queue_size}              -> dynamic_batching {max_queue_delay_us, ...}
//   instance_group [{kind KIND_CPU|KIND_GPU, count}]    -> hosts of that kind, count spread over them
// Our own field names (inputs, hosts, max_compute_ms, ...) are taken as
// they are. A field Triton has and we do not is accepted only with Triton's
// default value (what get_model_config answers carry: "", 0, false, [],
// {}), so a config read from a server round-trips; any other is an error
// naming it. Ensembles cannot be uploaded (their members are repository
// models). Dims may be numbers or strings (protobuf's JSON for int64).
//
// Errors are INVALID_ARGUMENT naming the parameter and field.
// Thread safety: pure functions.
#pragma once

#include <string>

#include "config/server_config.h"
#include "proto/grpc_service.pb.h"
#include "server/repository/model_repository.h"

namespace es {

using LoadParameters = google::protobuf::Map<std::string, inference::ModelRepositoryParameter>;

// An upload's files: at most kMaxUploadFiles of them, together at most the
// server's limits.max_request_bytes, both checked before any file is copied
// out of the request (RESOURCE_EXHAUSTED naming the bound); a model folder
// holds a config and a few versions, not thousands of files.
inline constexpr size_t kMaxUploadFiles = 1024;

StatusOr<ModelRepository::Upload> UploadFromLoadParameters(const std::string& model, const LoadParameters& parameters,
                                                           const ServerConfig& server);

// Triton's JSON model config as config.yaml text (JSON) of our fields.
StatusOr<std::string> TritonConfigToYaml(const std::string& json_text, const std::string& model,
                                         const ServerConfig& server);

}  // namespace es
