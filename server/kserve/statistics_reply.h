// The KServe v2 ModelStatistics reply, filled from the core's protocol-free
// counters (core/model_statistics.h) with Triton's meanings.
#pragma once

#include <string>

#include "proto/grpc_service.pb.h"
#include "server/core/model_statistics.h"

namespace es {

// Appends the statistics of one model (every version of it when `version` is
// empty, as Triton does), or of every model when `model` is empty, to
// `response`; false when the model, or that version of it, is unknown.
bool FillModelStatistics(const ModelStatistics& stats, const std::string& model, const std::string& version,
                         inference::ModelStatisticsResponse* response);

}  // namespace es
