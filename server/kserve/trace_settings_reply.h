// TraceSettingsReply: Triton's trace extension (gRPC TraceSetting, HTTP
// GET/POST /v2/trace/setting and /v2/models/{model}/trace/setting) over the
// router's Tracer (core/request_trace.h), as a protocol message and a
// Status; the transports check the caller's token (reading: infer;
// changing: admin) and convert.
//
// Settings, with Triton's names, each a list of strings: trace_level (OFF,
// TIMESTAMPS), trace_rate, trace_count, log_frequency; trace_file and
// trace_mode read only (set at start: --trace-file, --trace-mode). Level
// TIMESTAMPS on a server started with nowhere to put traces (no trace file
// in mode triton, no collector URL in mode opentelemetry) is refused, naming
// the flag that gives it one.
// With a model name, an update sets that model's own values (an empty list
// clears one: the server's applies) and the answer is the model's
// effective settings; without, the server's (an empty list restores the
// default). A wrong name or value is INVALID_ARGUMENT naming the setting,
// and nothing of that update is applied; an unknown model NOT_FOUND.
//
// Thread safety: Update from any thread; updates apply one at a time.
#pragma once

#include "common/mutex.h"
#include "proto/grpc_service.pb.h"
#include "server/core/model_catalog.h"
#include "server/core/request_trace.h"

namespace es {

class TraceSettingsReply {
 public:
  // Both must outlive the reply.
  TraceSettingsReply(Tracer* tracer, const ModelCatalog* catalog) : tracer_(tracer), catalog_(catalog) {}

  Status Update(const inference::TraceSettingRequest& req, inference::TraceSettingResponse* resp);

 private:
  Mutex mu_;
  Tracer* const tracer_;
  const ModelCatalog* const catalog_;
};

}  // namespace es
