// JSON a client sent (an HTTP request body, a load request's `config`
// parameter), parsed with a bound on its nesting.
//
// nlohmann's parser nests without recursion, but what then walks the value
// recurses once per level (dump() into an error message, the comparisons
// and copies of a model config's translation): a 200 KB body of 100,000
// nested arrays overflowed the thread's stack in dump() and ended the
// router. Triton's own JSON bodies nest a few levels; kMaxClientJsonNesting
// leaves room for any config while no walk comes near the stack's end.
//
// ParseClientJson(text, what): the value, or INVALID_ARGUMENT naming `what`
// ("the request body", "load parameter 'config'") and why: not valid JSON
// (the parser's message, with the byte it stopped at), nested deeper than
// kMaxClientJsonNesting, or holding more than kMaxClientJsonValues values.
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace es {

inline constexpr int kMaxClientJsonNesting = 64;
// Each value is a node of nlohmann's document, 30-80 bytes for each 3 of a
// body's ("{},"): a body at the size limit of empty objects would take some
// GiB. Settings, parameters and configs hold tens of values; an upload's
// files are one string each.
inline constexpr size_t kMaxClientJsonValues = size_t{1} << 16;

StatusOr<nlohmann::json> ParseClientJson(std::string_view text, const std::string& what);

}  // namespace es
