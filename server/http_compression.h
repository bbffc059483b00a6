// Request bodies sent compressed (HTTP `Content-Encoding: gzip` or
// `deflate`, as tritonclient's request_compression_algorithm sends them),
// inflated with zlib under a hard output limit, so a small "zip bomb" body
// cannot make the router hold more than a plain body could.
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace es {

// `body` inflated: gzip (RFC 1952) when `gzip`, else zlib (RFC 1950, what
// HTTP's "deflate" means). `reserve(n)` is asked before the output grows by
// up to n bytes; false refuses. Errors: OUT_OF_RANGE when the output would
// pass `max_bytes`, RESOURCE_EXHAUSTED when `reserve` refused,
// INVALID_ARGUMENT for a corrupt or truncated stream, or bytes after it.
StatusOr<std::string> InflateBody(std::string_view body, bool gzip, uint64_t max_bytes,
                                  const std::function<bool(uint64_t)>& reserve);

}  // namespace es
