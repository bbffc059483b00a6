// Base64 (RFC 4648, the standard alphabet) decoding, for the bytes a JSON
// body carries as text: Triton's HTTP load request sends each uploaded
// model file (`file:<path>` parameters) so.
//
// Strict: padding to a multiple of 4 characters is required (what Python's
// base64.b64encode writes), characters outside the alphabet, misplaced '='
// and non-zero bits in the last character's unused tail are errors naming
// the offset. The decoded size is checked against `max_bytes` before any
// of it is allocated.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace es {

StatusOr<std::string> Base64Decode(std::string_view text, size_t max_bytes);

}  // namespace es
