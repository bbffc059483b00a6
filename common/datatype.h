// DataType: the KServe v2 tensor element types that ensemble-serve carries.
//
// The wire names ("FP32", "INT64", ...) are the KServe v2 / Triton names. The
// numeric values are stored in shared-memory descriptors, so they are part of
// the IPC layout: append only, never renumber.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace es {

enum class DataType : uint32_t {
  kInvalid = 0,
  kBool = 1,
  kUint8 = 2,
  kInt8 = 3,
  kInt16 = 4,
  kInt32 = 5,
  kInt64 = 6,
  kFp16 = 7,
  kFp32 = 8,
  kFp64 = 9,
};

// "FP32" -> kFp32; nullopt for a name that is not a supported type.
std::optional<DataType> ParseDataType(std::string_view name);
// kFp32 -> "FP32".
const char* DataTypeName(DataType type);
// Bytes per element (BOOL is one byte, as in KServe v2 raw contents).
size_t DataTypeSize(DataType type);

}  // namespace es
