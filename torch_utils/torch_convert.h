// Conversions between the project's DataType (the KServe v2 element types)
// and LibTorch's ScalarType, plus the one place that turns a LibTorch
// exception message into something short enough for a Status.
//
// Private to model_host/: only .cc files that already pay for LibTorch
// include it (c10/core/ScalarType.h is small, the torch/ umbrella is not).
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>
#include <string_view>

#include "common/datatype.h"

namespace es {

// kFp32 -> c10::kFloat, ...; nullopt for kInvalid.
std::optional<c10::ScalarType> ToScalarType(DataType type);

// c10::kFloat -> kFp32, ...; kInvalid for a type KServe v2 cannot carry
// (complex, bfloat16, quantised types).
DataType FromScalarType(c10::ScalarType type);

// A one-line summary of an exception message from LibTorch. c10 messages carry
// backtraces and TorchScript tracebacks over dozens of lines; the line worth
// showing a client is the first one, or, for a failure inside interpreted
// TorchScript, the last one ("RuntimeError: ..."). Capped at ~300 characters.
std::string BriefTorchError(std::string_view what);

}  // namespace es
