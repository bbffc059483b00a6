#include "clients/timestamp.h"

namespace es::client {

std::string UtcTimestamp(std::time_t seconds) {
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace es::client
