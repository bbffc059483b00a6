// ensemble-loadgen before its first step: from the options to a plan.
// PlanRun connects (gRPC, or HTTP with --http) and checks that the server is
// live, builds the request of the model measured (or, with --inputs, the
// requests of the labelled data: clients/loadgen/labelled_data.h) and of the ceiling model
// (--ceiling-model; "auto" takes the server's "echo" when it has one), moves
// their inputs into shared memory (--shm), sends each once (a request the
// model rejects is a clear error, not a sweep full of failures), and makes
// the engine (for gRPC, over --channels connections opened now). The plan's
// report holds the run's description (date, server, model, request,
// settings); the steps (sweep.h) fill in the rest.
//
// Contract: errors are values, one line without the tool's prefix:
// INVALID_ARGUMENT when the options are at fault (the tool exits 2), another
// code when the server is (exit 1). The plan owns all that the run uses;
// destroying it stops the engine, then unregisters and unlinks the --shm
// regions, then closes the client.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "clients/api.h"
#include "clients/loadgen/engine_common.h"
#include "clients/loadgen/options.h"
#include "clients/loadgen/report.h"
#include "clients/loadgen/request_builder.h"
#include "clients/shm_region.h"
#include "common/status.h"

namespace es::loadgen {

struct RunPlan {
  // Members are destroyed in reverse order: the engine stops first, and the
  // --shm regions are unregistered while the client still lives.
  std::unique_ptr<es::client::Api> client;
  PreparedRequest main_request;
  PreparedRequest ceiling_request;  // no bytes: no request of its own (no ceiling, or the model measured)
  std::string ceiling_model;        // "": no ceiling step
  // What the engine sends: main_request alone, or (--inputs) the labelled
  // data's requests; the ceiling's request alone.
  RequestSet main_requests, ceiling_requests;
  std::vector<std::unique_ptr<es::client::ShmInputs>> shm_inputs;  // --shm
  std::unique_ptr<Engine> engine;
  Report report;
};

// `command` is the command line, as the report records it.
es::StatusOr<RunPlan> PlanRun(const Options& options, const std::string& command);

}  // namespace es::loadgen
