// Wall-clock times as the tools print them: ISO 8601 in UTC, to the second
// ("2024-05-01T12:00:00Z"), the form of ensemble-loadgen's report date and of
// ensemble-cli's last-inference column, so the two read alike.
//
// Contract: a pure function of its argument (gmtime_r, no shared state);
// thread-safe.
#pragma once

#include <ctime>
#include <string>

namespace es::client {

// `seconds` since the Unix epoch as "YYYY-MM-DDTHH:MM:SSZ".
std::string UtcTimestamp(std::time_t seconds);

}  // namespace es::client
