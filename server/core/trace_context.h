// W3C Trace Context (https://www.w3.org/TR/trace-context/) of a traced
// request: the trace id every span of the request carries, the span id of
// the request's own span, its parent's span id (the client's span when the
// client sent a `traceparent`), and the client's `tracestate`, passed on as
// it came.
//
// ParseTraceparent accepts version 00's form "00-<32 hex>-<16 hex>-<2 hex>"
// (and, as the standard asks, a higher version's first four fields); an
// all-zero trace or span id, upper-case hex or a wrong length is refused, and
// the request then starts a trace of its own.
//
// Thread safety: plain values; NewTraceId/NewSpanId may be called from any
// thread (a per-thread generator).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace es {

using TraceId = std::array<uint8_t, 16>;
using SpanId = std::array<uint8_t, 8>;

struct TraceContext {
  TraceId trace_id{};
  SpanId span_id{};         // this request's (or member call's) span
  SpanId parent_span_id{};  // all zero: a root span
  std::string trace_state;  // the client's tracestate, unchanged
  bool has_parent() const;
};

// Whether every byte of an id is zero (W3C: such an id is invalid; a zero
// parent span id means none).
template <size_t N>
bool IsZeroId(const std::array<uint8_t, N>& id) {
  for (const uint8_t b : id) {
    if (b != 0) return false;
  }
  return true;
}

// Random, never all zero.
TraceId NewTraceId();
SpanId NewSpanId();

// The parent a client's `traceparent` names: its trace id and span id (in
// trace_id and span_id), or nullopt when the header is malformed.
struct RemoteParent {
  TraceId trace_id{};
  SpanId span_id{};
};
std::optional<RemoteParent> ParseTraceparent(std::string_view header);

// Lower-case hex of `bytes`.
std::string HexId(const uint8_t* bytes, size_t size);

}  // namespace es
