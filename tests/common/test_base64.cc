#include "common/base64.h"

#include <gtest/gtest.h>

#include <string>

namespace es {
namespace {

TEST(Base64Test, DecodesWhatPythonsB64encodeWrites) {
  // base64.b64encode(b"") / b"f" / b"fo" / b"foo" / b"foob" (RFC 4648's vectors).
  EXPECT_EQ(Base64Decode("", 100).value(), "");
  EXPECT_EQ(Base64Decode("Zg==", 100).value(), "f");
  EXPECT_EQ(Base64Decode("Zm8=", 100).value(), "fo");
  EXPECT_EQ(Base64Decode("Zm9v", 100).value(), "foo");
  EXPECT_EQ(Base64Decode("Zm9vYg==", 100).value(), "foob");
  // Every byte value, through the whole alphabet ('+' and '/').
  EXPECT_EQ(Base64Decode("AP8Q+/7v", 100).value(), std::string("\x00\xff\x10\xfb\xfe\xef", 6));
}

TEST(Base64Test, RefusesWhatIsNotCanonicalBase64) {
  for (const char* bad : {"Zg", "Zg=", "Zm9", "Z===", "Zg=A", "Zm$v", "Zm9v\n", "Zh==", "=AAA"}) {
    auto decoded = Base64Decode(bad, 100);
    EXPECT_EQ(decoded.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(decoded.status().message().find("base64"), std::string::npos) << decoded.status().message();
  }
}

TEST(Base64Test, TheLimitIsCheckedBeforeDecoding) {
  EXPECT_TRUE(Base64Decode("Zm9v", 3).ok());
  auto over = Base64Decode("Zm9vYg==", 3);
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("4 bytes"), std::string::npos) << over.status().message();
}

}  // namespace
}  // namespace es
