#include "torch_utils/torch_convert.h"

#include <array>
#include <utility>

namespace es {
namespace {

constexpr std::array<std::pair<DataType, c10::ScalarType>, 9> kTypePairs{{
    {DataType::kBool, c10::kBool},
    {DataType::kUint8, c10::kByte},
    {DataType::kInt8, c10::kChar},
    {DataType::kInt16, c10::kShort},
    {DataType::kInt32, c10::kInt},
    {DataType::kInt64, c10::kLong},
    {DataType::kFp16, c10::kHalf},
    {DataType::kFp32, c10::kFloat},
    {DataType::kFp64, c10::kDouble},
}};

constexpr size_t kMaxBriefLength = 300;

// The TorchScript interpreter opens its message with this line and ends it
// with the actual error, after the script traceback.
constexpr std::string_view kInterpreterPreamble =
    "The following operation failed in the TorchScript interpreter.";

std::string_view Trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

std::string_view FirstLine(std::string_view s) {
  s = Trim(s);
  return s.substr(0, s.find('\n'));
}

std::string_view LastLine(std::string_view s) {
  s = Trim(s);
  const auto nl = s.rfind('\n');
  return nl == std::string_view::npos ? s : s.substr(nl + 1);
}

}  // namespace

std::optional<c10::ScalarType> ToScalarType(DataType type) {
  for (const auto& [dt, st] : kTypePairs) {
    if (dt == type) return st;
  }
  return std::nullopt;
}

DataType FromScalarType(c10::ScalarType type) {
  for (const auto& [dt, st] : kTypePairs) {
    if (st == type) return dt;
  }
  return DataType::kInvalid;
}

std::string BriefTorchError(std::string_view what) {
  std::string_view line = FirstLine(what);
  if (line.substr(0, kInterpreterPreamble.size()) == kInterpreterPreamble) {
    line = LastLine(what);
  }
  line = Trim(line);
  if (line.size() <= kMaxBriefLength) return std::string(line);
  return std::string(line.substr(0, kMaxBriefLength)) + "...";
}

}  // namespace es
