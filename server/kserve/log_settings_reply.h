// LogSettingsReply: Triton's logging extension (gRPC LogSettings, HTTP
// GET/POST /v2/logging) over the process's log (common/log_setup.h), as a
// protocol message and a Status; the transports check the caller's token
// (reading: infer; changing: admin) and convert.
//
// Settings, with Triton's names and types: log_info, log_warning, log_error
// (bool), log_verbose_level (uint32: 1 adds debug lines, 2 and more trace
// lines), log_format (string: default, ISO8601, json), log_file (string,
// read only: set at start by --log-file or the config's log_file; Triton
// refuses it at run time too, as it would let a caller pick a file the
// server writes). An update names some of them; the others stay. A wrong
// name, type or value is INVALID_ARGUMENT naming the setting, and nothing of
// that update is applied. The answer holds every setting as it now is.
//
// Thread safety: Update and Answer from any thread; updates are applied
// one at a time, in order.
#pragma once

#include <functional>

#include "common/log_setup.h"
#include "common/mutex.h"
#include "proto/grpc_service.pb.h"

namespace es {

class LogSettingsReply {
 public:
  // Applies new settings everywhere (the router's logger, then its hosts').
  using Apply = std::function<void(const LogSettings&)>;
  explicit LogSettingsReply(Apply apply) : apply_(std::move(apply)) {}

  Status Update(const inference::LogSettingsRequest& req, inference::LogSettingsResponse* resp);
  static void Answer(const LogSettings& settings, inference::LogSettingsResponse* resp);

 private:
  Mutex mu_;
  const Apply apply_;  // called under mu_: updates apply in order
};

// `settings` with `req`'s changes, or the error naming the first bad one.
StatusOr<LogSettings> UpdatedLogSettings(const LogSettings& settings, const inference::LogSettingsRequest& req);

}  // namespace es
