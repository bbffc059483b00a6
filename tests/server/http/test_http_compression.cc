// server/http/http_compression.h: InflateBody (gzip and zlib bodies inflated
// under a hard limit and a budget, corrupt and truncated streams refused),
// AnswerEncoding (Accept-Encoding with q-values) and DeflateBody.
#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

#include "server/http/http_compression.h"

namespace es {
namespace {

// `data` compressed as gzip (windowBits 31) or zlib (15).
std::string Compress(const std::string& data, bool gzip) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, gzip ? 31 : 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, data.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

const auto kAny = [](uint64_t) { return true; };

TEST(HttpCompressionTest, GzipAndZlibInflate) {
  std::string data;
  for (int i = 0; i < 300000; ++i) data += std::to_string(i % 977) + ",";
  for (bool gzip : {true, false}) {
    StatusOr<std::string> out = InflateBody(Compress(data, gzip), gzip, data.size(), kAny);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(*out, data);
  }
  // The other format's stream is refused, not misread.
  EXPECT_EQ(InflateBody(Compress(data, true), false, data.size(), kAny).status().code(), StatusCode::kInvalidArgument);
}

TEST(HttpCompressionTest, OutputPastTheLimitStopsAtTheLimit) {
  const std::string zeros(10 << 20, '0');
  const std::string bomb = Compress(zeros, true);
  ASSERT_LT(bomb.size(), 20000u);
  uint64_t reserved = 0;
  auto count = [&reserved](uint64_t n) {
    reserved += n;
    return true;
  };
  StatusOr<std::string> out = InflateBody(bomb, true, (1 << 20) - 1, count);
  EXPECT_EQ(out.status().code(), StatusCode::kOutOfRange) << out.status().ToString();
  EXPECT_NE(out.status().message().find("inflates to more than the limit of 1048575 bytes"), std::string::npos);
  EXPECT_LE(reserved, uint64_t{1} << 20);  // never asked for more than the limit (+1)
  // Exactly the limit is fine.
  EXPECT_TRUE(InflateBody(bomb, true, zeros.size(), kAny).ok());
}

TEST(HttpCompressionTest, BudgetRefusalIsResourceExhausted) {
  const std::string data(3 << 20, 'x');
  int calls = 0;
  auto two_chunks = [&calls](uint64_t) { return ++calls <= 2; };
  StatusOr<std::string> out = InflateBody(Compress(data, true), true, data.size(), two_chunks);
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted) << out.status().ToString();
}

TEST(HttpCompressionTest, CorruptTruncatedAndTrailingBytesAreRefused) {
  const std::string data(100000, 'y');
  const std::string packed = Compress(data, true);
  StatusOr<std::string> truncated = InflateBody(packed.substr(0, packed.size() - 10), true, data.size(), kAny);
  EXPECT_EQ(truncated.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos) << truncated.status().message();
  std::string corrupt = packed;
  corrupt[corrupt.size() / 2] ^= 0x5a;
  corrupt[corrupt.size() / 2 + 1] ^= 0x33;
  EXPECT_FALSE(InflateBody(corrupt, true, data.size(), kAny).ok());
  StatusOr<std::string> trailing = InflateBody(packed + "junk", true, data.size(), kAny);
  EXPECT_EQ(trailing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(trailing.status().message().find("after the gzip stream"), std::string::npos);
  EXPECT_EQ(InflateBody("not compressed at all", true, 100, kAny).status().code(), StatusCode::kInvalidArgument);
}

TEST(HttpCompressionTest, AnswerEncodingFollowsAcceptEncoding) {
  const std::pair<const char*, BodyEncoding> cases[] = {
      {"", BodyEncoding::kIdentity},
      {"identity", BodyEncoding::kIdentity},
      {"br", BodyEncoding::kIdentity},
      {"gzip", BodyEncoding::kGzip},
      {"GZip", BodyEncoding::kGzip},
      {"x-gzip", BodyEncoding::kGzip},
      {"deflate", BodyEncoding::kDeflate},
      {"gzip, deflate", BodyEncoding::kGzip},  // tritonclient, curl --compressed
      {"deflate, gzip", BodyEncoding::kGzip},  // a tie goes to gzip
      {"gzip;q=0.5, deflate", BodyEncoding::kDeflate},
      {"gzip; q=0.9 , deflate;q=0.8", BodyEncoding::kGzip},
      {"gzip;q=0", BodyEncoding::kIdentity},
      {"gzip;q=0, deflate;q=0.001", BodyEncoding::kDeflate},
      {"*", BodyEncoding::kGzip},
      {"*;q=0", BodyEncoding::kIdentity},
      {"gzip;q=0, *", BodyEncoding::kDeflate},  // "*" is for the codings not named
      {"gzip;q=2", BodyEncoding::kIdentity},    // malformed q: not accepted
      {"gzip;q=abc, deflate", BodyEncoding::kDeflate},
      {"gzip;q=0.12345", BodyEncoding::kIdentity},
      {",,, ;;", BodyEncoding::kIdentity},
  };
  for (const auto& [header, want] : cases) {
    EXPECT_EQ(AnswerEncoding(header), want) << "Accept-Encoding: " << header;
  }
}

TEST(HttpCompressionTest, DeflateBodyRoundTrips) {
  std::string data;
  for (int i = 0; i < 100000; ++i) data += std::to_string(i % 613) + ",";
  for (BodyEncoding encoding : {BodyEncoding::kGzip, BodyEncoding::kDeflate}) {
    StatusOr<std::string> packed = DeflateBody(data, encoding);
    ASSERT_TRUE(packed.ok()) << packed.status().ToString();
    EXPECT_LT(packed->size(), data.size() / 2) << BodyEncodingName(encoding);
    StatusOr<std::string> back = InflateBody(*packed, encoding == BodyEncoding::kGzip, data.size(), kAny);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, data);
  }
  StatusOr<std::string> empty = DeflateBody("", BodyEncoding::kGzip);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*InflateBody(*empty, true, 0, kAny), "");
  EXPECT_FALSE(DeflateBody("x", BodyEncoding::kIdentity).ok());
}

}  // namespace
}  // namespace es
