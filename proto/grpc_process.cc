#include "proto/grpc_process.h"

#include <absl/synchronization/mutex.h>

namespace es {

void TuneGrpcProcess() { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); }

}  // namespace es
