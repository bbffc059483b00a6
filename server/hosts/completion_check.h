// CompletionCheck: what the router verifies in a host's completion before it
// follows a single offset of it.
//
// A host is a separate process running someone's model; its completions are
// untrusted input, exactly like a client's request. The router copies each
// completion out of the ring into its own memory (so the host cannot change
// it while it is checked) and holds it against the Reservation it made when
// it submitted the request: the status code must be one of the closed set,
// the output count the model's declared count, every output's datatype the
// declared one, its rank and fixed dims the declared ones (when given; the
// host checks its model's outputs against the config, so an honest host never
// sends other shapes), its rank at most ipc::kMaxDims with no negative dimension,
// its byte count exactly the product of its dims times the item size
// (overflow-checked), and its bytes inside the request's own output region.
// Only then are bytes read from the arena, so a lying host can at worst
// return wrong numbers for its own request, never another request's bytes or
// anything outside the arena.
//
// Thread safety: pure functions over values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/datatype.h"
#include "common/status.h"
#include "ipc/layout.h"

namespace es {

// What the router set aside for one submitted request. The declared outputs
// are views: of the model's OutputSpec, made once per model and kept alive
// with each request in flight (host_connection.h), not copied per call.
struct Reservation {
  uint64_t output_offset = 0;    // from the arena base
  uint64_t output_capacity = 0;  // bytes
  std::span<const DataType> output_types;  // the model's declared outputs, in order
  // Their full declared shapes (batch dim included), -1 for any size; empty:
  // the shapes are not checked beyond the limits.
  std::span<const std::vector<int64_t>> output_dims;
};

// OK, or INTERNAL naming what is wrong ("output 1 ('probabilities'): ...").
// A non-zero status code that is in the closed set is a valid (error)
// completion: only the code is checked, the message is read with strnlen.
Status CheckCompletion(const ipc::CompletionDesc& completion, const Reservation& reservation);

// True for the status codes a host may send (es::StatusCode's values).
bool KnownStatusCode(uint32_t code);

}  // namespace es
