// The router's own request and response types: protocol-free (no protobuf)
// so that the core (dispatch, ensembles, validation results) is testable
// without gRPC, and torch-free as the whole router is.
//
// An InferRequest borrows its input bytes: they live in the gRPC request (or
// in `scratch` for typed contents that needed conversion, or in
// `shm_scratch` for BOOL inputs read from a shared-memory region) until the
// done callback has run; other shared-memory inputs are read at submission,
// straight into the host's arena (InferInput::read_into). Outputs own their
// bytes, copied once out of the arena.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/datatype.h"
#include "common/status.h"
#include "config/model_config.h"
#include "server/core/request_trace.h"
#include "server/shm/shm_registry.h"

namespace es {

struct InferInput {
  const TensorSpec* spec = nullptr;  // the config's input this is (inputs are in config order)
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;  // full shape, batch dim included when batched
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  // Set (and `data` null) for an input in a client's shared-memory region:
  // copies its `bytes` bytes into `dest`, read when the request is submitted
  // to a host, straight into the host's arena (see TensorPiece).
  std::function<Status(uint8_t* dest)> read_into;
};

struct InferOutput {
  std::string name;
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;
  std::string data;  // raw little-endian bytes, as KServe v2 raw_output_contents
};

// A requested output that goes into a registered shared-memory region
// (parameters shared_memory_region / _offset / _byte_size) instead of the
// response message.
struct SharedMemoryOutput {
  std::string region;                                   // the name the client registered
  uint64_t offset = 0;                                  // inside the region
  uint64_t byte_size = 0;                               // room the client gave
  std::shared_ptr<SharedMemoryRegistry::Region> place;  // opened at decode: stays open if unregistered meanwhile
};

struct InferRequest {
  const ModelConfig* model = nullptr;
  int64_t version = 0;
  bool version_pinned = false;  // the client named the version (else: the highest ready one)
  std::string id;
  std::vector<InferInput> inputs;              // config order
  std::vector<std::string> requested_outputs;  // empty = all
  bool return_member_outputs = false;          // ensembles only
  bool return_uncertainty = false;             // ensembles only
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  int priority = 0;                                     // 1 = highest; 0 = the model's default
  bool exact = false;  // parameter `exact`: an ensemble with an overload ladder answers in full
  double exit_threshold = 0;  // > 0: a cascade's threshold in place of its config's (an overload rung's)
  std::shared_ptr<RequestTrace> trace;  // set when the request is traced (server/core/request_trace.h)
  std::function<bool()> cancelled;                      // true once the client gave up (may be empty)
  std::vector<std::unique_ptr<std::string>> scratch;    // converted typed contents
  std::vector<std::unique_ptr<uint8_t[]>> shm_scratch;  // inputs read from shared memory
  // Parallel to requested_outputs (empty when none is in shared memory):
  // where each one goes; a null `place` = in the response message.
  std::vector<SharedMemoryOutput> output_shm;
  int64_t batch_rows() const {
    return model->batched() && !inputs.empty() && !inputs[0].shape.empty() ? inputs[0].shape[0] : 1;
  }
};

// Copies what a request carries besides its model and data (id, deadline,
// priority, cancellation, exact, trace) into `to`, a request made from it (a
// cascade's undecided rows, an overload rung's call).
inline void CopyRequestContext(const InferRequest& from, InferRequest* to) {
  to->id = from.id;
  to->deadline = from.deadline;
  to->priority = from.priority;
  to->cancelled = from.cancelled;
  to->exact = from.exact;
  to->trace = from.trace;
}

// Where a request's time went, filled by the core for metrics and statistics.
// For an ensemble: queue, ipc and compute of its slowest member, plus combine.
struct StageTimes {
  uint64_t queue_ns = 0;    // waiting in the router's batcher queue
  uint64_t ipc_ns = 0;      // submit to completion, minus the host's compute
  uint64_t compute_ns = 0;  // the host running the model
  uint64_t combine_ns = 0;  // ensembles: combining the members' outputs
  int64_t batch_size = 0;   // rows in the batch the request ran in (per member)
};

// Ensembles: how an answer was made (response parameters `members_used` and
// `degraded`, the degraded and member-latency metrics).
struct MemberReport {
  std::string member;       // the member model's name
  uint64_t latency_ns = 0;  // fan-out to its answer; 0 when it had not answered by the ensemble's
  bool used = false;        // its output is in the combination
};
struct EnsembleReport {
  int64_t members_used = 0;
  bool degraded = false;               // answered without every member (ensemble.min_members)
  std::vector<MemberReport> members;  // one per member, config order
};

// Cascades (combine: cascade): how far the rows went (response parameter
// `stages_used`, the cascade metrics).
struct CascadeReport {
  int64_t stages_used = 0;          // stages run (the last stage any row reached, + 1)
  std::vector<int64_t> exits;       // rows that left at each stage run
  int64_t member_rows_saved = 0;    // sum over rows of the members of stages after the row left
};

struct InferResponse {
  std::vector<InferOutput> outputs;
  uint64_t compute_ns = 0;  // host compute time (an ensemble: its slowest member)
  StageTimes stages;
  // Ensembles: per-row member disagreement, filled whether or not the client
  // asked for it (the monitoring histogram needs it); empty otherwise.
  std::vector<float> disagreement;
  // Ensembles: the version each member computed on, "mlp:3,cnn:2" (the
  // response parameter `member_versions`); empty otherwise.
  std::string member_versions;
  // Ensembles: which members made the answer; nullptr otherwise.
  std::shared_ptr<const EnsembleReport> ensemble;
  // The version that computed the answer (0: not known, the request's):
  // an unpinned request resolved to version 1 just before a rollout made
  // version 2 the highest ready one runs on 2 and must say so.
  int64_t version = 0;
  // Cascades: how far the rows went; nullptr otherwise.
  std::shared_ptr<const CascadeReport> cascade;
  // Ensembles with an overload ladder: the rung (a model) that answered
  // (response parameter `served_by`) and its held-out accuracy when the
  // config gives one (`served_accuracy`; < 0 = not known). Empty otherwise.
  std::string served_by;
  double served_accuracy = -1;
  // The latency the ladder's controller predicted for it at admission (ms;
  // < 0 = none): /metrics sets it beside the latency observed.
  double served_predicted_ms = -1;
  // The rung's tail ratio at admission (the p99 of its latency over its
  // prediction, as the controller has learnt it; < 0 = none): /metrics.
  double served_tail_ratio = -1;
};

// Called exactly once per request, from whichever thread finished it.
using InferDone = std::function<void(const Status&, InferResponse)>;

}  // namespace es
