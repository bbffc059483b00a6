// Elapsed time on the monotonic clock: "how long since `start`", in the
// unit a caller reports. One spelling of the duration arithmetic, so that a
// timing written in seconds here and milliseconds there cannot disagree on
// the clock (steady_clock: wall-clock jumps never make an interval negative).
//
// Thread safety: pure functions (steady_clock::now() is thread-safe).
#pragma once

#include <chrono>
#include <cstdint>

namespace es {

using SteadyClock = std::chrono::steady_clock;

// Seconds from `start` to now, fractional.
inline double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// Whole milliseconds from `start` to now, truncated.
inline int64_t MillisecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start).count();
}

// Whole nanoseconds from `start` to now.
inline int64_t NanosecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start).count();
}

// `t` as nanoseconds of the monotonic clock (CLOCK_MONOTONIC: one clock for
// every process of the machine), as request traces record times.
inline uint64_t SteadyNs(SteadyClock::time_point t) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

}  // namespace es
