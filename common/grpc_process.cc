#include "common/grpc_process.h"

#include <absl/synchronization/mutex.h>
#include <google/protobuf/stubs/logging.h>
#include <grpc/support/log.h>
#include <spdlog/spdlog.h>

#include <cstring>

namespace es {
namespace {

// gRPC core prefixes nothing useful for an operator but its source file.
void GrpcLogToSpdlog(gpr_log_func_args* args) {
  const char* file = args->file != nullptr ? std::strrchr(args->file, '/') : nullptr;
  file = file != nullptr ? file + 1 : (args->file != nullptr ? args->file : "?");
  spdlog::level::level_enum level = spdlog::level::debug;
  if (args->severity == GPR_LOG_SEVERITY_ERROR) level = spdlog::level::err;
  if (args->severity == GPR_LOG_SEVERITY_INFO) level = spdlog::level::info;
  spdlog::log(level, "grpc: {} ({}:{})", args->message != nullptr ? args->message : "", file, args->line);
}

void ProtobufLogToSpdlog(google::protobuf::LogLevel level, const char* filename, int line,
                         const std::string& message) {
  spdlog::level::level_enum to = spdlog::level::info;
  if (level == google::protobuf::LOGLEVEL_WARNING) to = spdlog::level::warn;
  if (level >= google::protobuf::LOGLEVEL_ERROR) to = spdlog::level::err;
  spdlog::log(to, "protobuf: {} ({}:{})", message, filename != nullptr ? filename : "?", line);
}

}  // namespace

void TuneGrpcProcess() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // gRPC still filters by its own verbosity (GRPC_VERBOSITY, default ERROR)
  // before the function is called; spdlog's level filters after it.
  gpr_set_log_function(GrpcLogToSpdlog);
  google::protobuf::SetLogHandler(ProtobufLogToSpdlog);
}

}  // namespace es
