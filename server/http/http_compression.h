// HTTP body compression with zlib, both ways:
//  - request bodies sent compressed (`Content-Encoding: gzip` or `deflate`,
//    as tritonclient's request_compression_algorithm sends them), inflated
//    under a hard output limit, so a small "zip bomb" body cannot make the
//    router hold more than a plain body could;
//  - answers compressed for a client that asks (`Accept-Encoding`, as
//    tritonclient's response_compression_algorithm sends it).
//
// Thread safety: pure functions.
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

enum class BodyEncoding { kIdentity, kGzip, kDeflate };

// The encoding to answer with for a request's Accept-Encoding header
// (RFC 9110 12.5.3): of gzip and deflate, the one accepted with the higher
// non-zero q-value (gzip on a tie; "*" stands for a coding not named);
// identity when neither is, or the header is absent or empty. Codings are
// case-insensitive; a malformed q-value makes its coding not accepted.
BodyEncoding AnswerEncoding(std::string_view accept_encoding);
const char* BodyEncodingName(BodyEncoding encoding);  // "gzip", "deflate", "identity"

// `body` compressed as gzip (RFC 1952) or zlib (RFC 1950, HTTP's
// "deflate"); `encoding` must not be kIdentity. INTERNAL if zlib fails.
StatusOr<std::string> DeflateBody(std::string_view body, BodyEncoding encoding);

}  // namespace es
