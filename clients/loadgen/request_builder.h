// The ModelInferRequest ensemble-loadgen sends: one input per input of the
// model's metadata, shaped from it (a leading -1 is the batch dim and takes
// --batch; any other -1 needs --shape NAME:DIMS), filled with seeded random
// data of its datatype (floats uniform in [0, 1), integers in [0, 10), BOOL
// 0/1), as raw_input_contents.
//
// Contract: BuildRequest makes one ModelMetadata call (with a deadline). On
// error it returns the message, and *usage_error tells whether the user's
// flags are at fault (exit 2) rather than the server (exit 1).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "clients/api.h"  // gRPC or HTTP (--http)
#include "clients/loadgen/report.h"

namespace es::loadgen {

struct PreparedRequest {
  inference::ModelInferRequest request;
  std::string bytes;  // request, serialized
  std::vector<InputInfo> inputs;
  std::string version;   // from the metadata (the highest listed)
  std::string platform;
  std::string first_output;  // the metadata's first output ("" if it lists none)
  int64_t rows = 1;      // rows per request (the batch, or 1 if the model has no batch dim)
};

struct BuildError {
  std::string message;
  bool usage_error = false;
};

bool BuildRequest(const es::client::Api& client, const std::string& model, const std::string& version,
                  int64_t batch, const std::map<std::string, std::vector<int64_t>>& shapes, uint32_t seed,
                  PreparedRequest* out, BuildError* error);

}  // namespace es::loadgen
