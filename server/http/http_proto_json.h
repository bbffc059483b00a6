// Protobuf messages as Triton's HTTP/REST JSON: the answers of the shared
// handlers (server metadata, model metadata, config, statistics, index) are
// protos, and Triton's HTTP front end answers the same content as JSON
// with the proto's field names (snake_case, e.g. "max_batch_size"), enums
// by name ("TYPE_FP32"), 64-bit integers as JSON numbers (not the strings of
// the canonical proto3 JSON mapping), every scalar field printed even when it
// is the default (so zero counts show as 0), submessages printed when set,
// oneof members only when chosen, maps as objects.
//
// Pure functions: safe from any thread.
#pragma once

#include <google/protobuf/message.h>

#include <nlohmann/json.hpp>

namespace es {

// `all_messages`: unset submessages (outside oneofs) are printed too, with
// their defaults, as Triton's statistics always carry every duration
// (perf_analyzer reads compute_input etc. even when zero).
nlohmann::ordered_json ProtoToJson(const google::protobuf::Message& message, bool all_messages = false);

// `value` as compact JSON text; bytes that are not UTF-8 become U+FFFD
// instead of throwing (names in messages come from clients).
std::string JsonText(const nlohmann::ordered_json& value);

}  // namespace es
