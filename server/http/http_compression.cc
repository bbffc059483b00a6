#include "server/http/http_compression.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>

namespace es {

StatusOr<std::string> InflateBody(std::string_view body, bool gzip, uint64_t max_bytes,
                                  const std::function<bool(uint64_t)>& reserve) {
  const char* what = gzip ? "gzip" : "deflate";
  if (body.size() > UINT_MAX) return Status(StatusCode::kOutOfRange, std::string(what) + " body too large");
  z_stream zs{};
  if (inflateInit2(&zs, gzip ? 15 + 16 : 15) != Z_OK) return Status::Internal("zlib: inflateInit2 failed");
  struct End {
    z_stream* zs;
    ~End() { inflateEnd(zs); }
  } end{&zs};
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  zs.avail_in = static_cast<uInt>(body.size());
  constexpr uint64_t kChunk = 1 << 20;
  std::string out;
  for (;;) {
    // One byte past the limit, to tell "exactly the limit" from "over it".
    const uint64_t room = std::min<uint64_t>(kChunk, max_bytes + 1 - out.size());
    if (!reserve(room)) {
      return Status::ResourceExhausted(
          "server busy: no room for the inflated request body under the HTTP body budget; retry later");
    }
    const size_t old = out.size();
    out.resize(old + room);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + old);
    zs.avail_out = static_cast<uInt>(room);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(old + room - zs.avail_out);
    if (out.size() > max_bytes) {
      return Status(StatusCode::kOutOfRange, std::string(what) + " request body inflates to more than the limit of " +
                                                 std::to_string(max_bytes) + " bytes");
    }
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      return Status::InvalidArgument(std::string("the ") + what + " request body is truncated");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return Status::InvalidArgument(std::string("the request body is not valid ") + what + ": " +
                                     (zs.msg != nullptr ? zs.msg : "zlib error " + std::to_string(rc)));
    }
  }
  if (zs.avail_in != 0) {
    return Status::InvalidArgument(std::to_string(zs.avail_in) + " byte(s) after the " + what +
                                   " stream in the request body");
  }
  out.shrink_to_fit();
  return out;
}

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// The q-value of one Accept-Encoding element's parameters ("q=0.5"; 1 when
// absent), or -1 when it is malformed (RFC 9110: 0 to 1, three decimals).
double QValue(std::string_view params) {
  double q = 1.0;
  while (!params.empty()) {
    const size_t semi = params.find(';');
    std::string_view param = Trim(params.substr(0, semi));
    params = semi == std::string_view::npos ? std::string_view() : params.substr(semi + 1);
    if (param.size() < 2 || (param[0] != 'q' && param[0] != 'Q') || param[1] != '=') continue;
    const std::string value(Trim(param.substr(2)));
    if (value.empty() || value.size() > 5 || value.find_first_not_of("0123456789.") != std::string::npos) return -1;
    char* end = nullptr;
    q = std::strtod(value.c_str(), &end);
    if (end != value.c_str() + value.size() || q < 0 || q > 1) return -1;
  }
  return q;
}

}  // namespace

BodyEncoding AnswerEncoding(std::string_view accept_encoding) {
  double gzip = -1, deflate = -1, any = 0;  // -1: not named (then "*" decides)
  while (!accept_encoding.empty()) {
    const size_t comma = accept_encoding.find(',');
    std::string_view element = accept_encoding.substr(0, comma);
    accept_encoding = comma == std::string_view::npos ? std::string_view() : accept_encoding.substr(comma + 1);
    const size_t semi = element.find(';');
    const std::string_view coding = Trim(element.substr(0, semi));
    const double q = semi == std::string_view::npos ? 1.0 : QValue(element.substr(semi + 1));
    if (EqualsNoCase(coding, "gzip") || EqualsNoCase(coding, "x-gzip")) {
      gzip = std::max(q, 0.0);
    } else if (EqualsNoCase(coding, "deflate")) {
      deflate = std::max(q, 0.0);
    } else if (coding == "*") {
      any = std::max(q, 0.0);
    }
  }
  if (gzip < 0) gzip = any;
  if (deflate < 0) deflate = any;
  if (gzip > 0 && gzip >= deflate) return BodyEncoding::kGzip;
  if (deflate > 0) return BodyEncoding::kDeflate;
  return BodyEncoding::kIdentity;
}

const char* BodyEncodingName(BodyEncoding encoding) {
  switch (encoding) {
    case BodyEncoding::kGzip:
      return "gzip";
    case BodyEncoding::kDeflate:
      return "deflate";
    case BodyEncoding::kIdentity:
      break;
  }
  return "identity";
}

StatusOr<std::string> DeflateBody(std::string_view body, BodyEncoding encoding) {
  if (encoding == BodyEncoding::kIdentity) return Status::Internal("DeflateBody: identity is not a compression");
  if (body.size() > UINT_MAX) return Status::Internal("DeflateBody: body too large for one zlib call");
  z_stream zs{};
  // Level 1: answers are mostly float tensors, which compress little at any
  // level, and the router's CPU is better spent serving; a client that asks
  // still gets the bytes it asked for in the encoding it asked for.
  if (deflateInit2(&zs, 1, Z_DEFLATED, encoding == BodyEncoding::kGzip ? 15 + 16 : 15, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return Status::Internal("zlib: deflateInit2 failed");
  }
  struct End {
    z_stream* zs;
    ~End() { deflateEnd(zs); }
  } end{&zs};
  std::string out(deflateBound(&zs, static_cast<uLong>(body.size())), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  zs.avail_in = static_cast<uInt>(body.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size(), UINT_MAX));
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) return Status::Internal("zlib: deflate did not finish");
  out.resize(zs.total_out);
  return out;
}

}  // namespace es
