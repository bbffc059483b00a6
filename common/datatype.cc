#include "common/datatype.h"

#include <array>
#include <utility>

namespace es {
namespace {

struct TypeInfo {
  DataType type;
  const char* name;
  size_t size;
};

constexpr std::array<TypeInfo, 9> kTypes{{
    {DataType::kBool, "BOOL", 1},
    {DataType::kUint8, "UINT8", 1},
    {DataType::kInt8, "INT8", 1},
    {DataType::kInt16, "INT16", 2},
    {DataType::kInt32, "INT32", 4},
    {DataType::kInt64, "INT64", 8},
    {DataType::kFp16, "FP16", 2},
    {DataType::kFp32, "FP32", 4},
    {DataType::kFp64, "FP64", 8},
}};

}  // namespace

std::optional<DataType> ParseDataType(std::string_view name) {
  for (const auto& info : kTypes) {
    if (name == info.name) return info.type;
  }
  return std::nullopt;
}

const char* DataTypeName(DataType type) {
  for (const auto& info : kTypes) {
    if (info.type == type) return info.name;
  }
  return "INVALID";
}

size_t DataTypeSize(DataType type) {
  for (const auto& info : kTypes) {
    if (info.type == type) return info.size;
  }
  return 0;
}

}  // namespace es
