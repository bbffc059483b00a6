#include "common/base64.h"

#include <array>
#include <cstdint>

namespace es {
namespace {

constexpr int8_t kInvalid = -1;

constexpr std::array<int8_t, 256> MakeTable() {
  std::array<int8_t, 256> table{};
  for (auto& v : table) v = kInvalid;
  constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t i = 0; i < kAlphabet.size(); ++i) table[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}

constexpr std::array<int8_t, 256> kTable = MakeTable();

}  // namespace

StatusOr<std::string> Base64Decode(std::string_view text, size_t max_bytes) {
  if (text.size() % 4 != 0) {
    return Status::InvalidArgument("base64: length " + std::to_string(text.size()) +
                                   " is not a multiple of 4 (padding with '=' is required)");
  }
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') padding = text[text.size() - 2] == '=' ? 2 : 1;
  const size_t decoded = text.size() / 4 * 3 - padding;
  if (decoded > max_bytes) {
    return Status::ResourceExhausted("base64: decodes to " + std::to_string(decoded) + " bytes, over the limit of " +
                                     std::to_string(max_bytes));
  }
  std::string out;
  out.reserve(decoded);
  const size_t data_chars = text.size() - padding;
  uint32_t bits = 0;
  int held = 0;
  for (size_t i = 0; i < data_chars; ++i) {
    const int8_t v = kTable[static_cast<uint8_t>(text[i])];
    if (v == kInvalid) {
      return Status::InvalidArgument("base64: character " + std::to_string(i) + " is not in the alphabet" +
                                     (text[i] == '=' ? " ('=' only at the end)" : ""));
    }
    bits = (bits << 6) | static_cast<uint32_t>(v);
    held += 6;
    if (held >= 8) {
      held -= 8;
      out.push_back(static_cast<char>((bits >> held) & 0xff));
    }
  }
  // What is left are the unused bits of the last character: zero in any
  // canonical encoding.
  if ((bits & ((1u << held) - 1)) != 0) {
    return Status::InvalidArgument("base64: the last character has non-zero unused bits");
  }
  return out;
}

}  // namespace es
