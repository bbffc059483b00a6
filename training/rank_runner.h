// RunRank: the life of one training rank, from rendezvous to the written
// repository: load the data, join the process group, build (or resume) the
// members, train epoch by epoch with checkpoints and metrics, and on rank 0
// evaluate on the test set and write the served repository and report.
//
// Returns the process exit code: 0 done, 1 failed (the error is logged; a
// peer's death surfaces here as a failed collective within the configured
// timeout), 2 usage error found late (e.g. a batch not divisible by ranks).
//
// Thread safety: runs on the process's main thread; starts the loader,
// checkpoint and metrics threads and joins them before returning.
#pragma once

#include "training/process_group.h"
#include "training/train_config.h"
#include "training/train_options.h"

namespace es {

int RunRank(const TrainOptions& options, const TrainConfig& config, const RankEnv& env);

}  // namespace es
