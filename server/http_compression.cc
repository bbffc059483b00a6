#include "server/http_compression.h"

#include <zlib.h>

#include <algorithm>
#include <climits>

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

}  // namespace es
