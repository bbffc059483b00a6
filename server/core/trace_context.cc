#include "server/core/trace_context.h"

#include <random>

namespace es {
namespace {

std::mt19937_64& Generator() {
  thread_local std::mt19937_64 generator{[] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }()};
  return generator;
}

template <size_t N>
std::array<uint8_t, N> RandomId() {
  std::array<uint8_t, N> id{};
  do {
    for (size_t i = 0; i < N; i += 8) {
      const uint64_t v = Generator()();
      for (size_t k = 0; k < 8 && i + k < N; ++k) id[i + k] = static_cast<uint8_t>(v >> (8 * k));
    }
  } while (IsZeroId(id));
  return id;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case is not allowed by the standard
}

template <size_t N>
bool ParseHex(std::string_view text, std::array<uint8_t, N>* out) {
  if (text.size() != 2 * N) return false;
  for (size_t i = 0; i < N; ++i) {
    const int hi = HexDigit(text[2 * i]), lo = HexDigit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return !IsZeroId(*out);
}

}  // namespace

bool TraceContext::has_parent() const { return !IsZeroId(parent_span_id); }

TraceId NewTraceId() { return RandomId<16>(); }
SpanId NewSpanId() { return RandomId<8>(); }

std::optional<RemoteParent> ParseTraceparent(std::string_view header) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2.
  constexpr size_t kLength = 55;
  if (header.size() < kLength) return std::nullopt;
  const std::string_view version = header.substr(0, 2);
  if (HexDigit(version[0]) < 0 || HexDigit(version[1]) < 0 || version == "ff") return std::nullopt;
  // Version 00 is exactly this long; a later version may append fields after a '-'.
  if (header.size() > kLength && (version == "00" || header[kLength] != '-')) return std::nullopt;
  if (header[2] != '-' || header[35] != '-' || header[52] != '-') return std::nullopt;
  if (HexDigit(header[53]) < 0 || HexDigit(header[54]) < 0) return std::nullopt;
  RemoteParent parent;
  if (!ParseHex(header.substr(3, 32), &parent.trace_id) || !ParseHex(header.substr(36, 16), &parent.span_id)) {
    return std::nullopt;
  }
  return parent;
}

std::string HexId(const uint8_t* bytes, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * size, '0');
  for (size_t i = 0; i < size; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return out;
}

}  // namespace es
