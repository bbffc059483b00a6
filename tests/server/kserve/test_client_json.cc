// ParseClientJson: a client's JSON is parsed up to kMaxClientJsonNesting
// levels and kMaxClientJsonValues values; deeper, larger, or not JSON at
// all, is INVALID_ARGUMENT naming what was parsed and why, not a value
// something later walks by recursion or a document of some GiB.
#include "server/kserve/client_json.h"

#include <gtest/gtest.h>

#include <string>

namespace es {
namespace {

// `levels` arrays, one inside the other, around a 1.
std::string Nested(int levels) { return std::string(levels, '[') + "1" + std::string(levels, ']'); }

TEST(ClientJsonTest, NestingIsBoundedAndEachRefusalNamesWhatAndWhy) {
  StatusOr<nlohmann::json> deepest = ParseClientJson(Nested(kMaxClientJsonNesting), "the body");
  ASSERT_TRUE(deepest.ok()) << deepest.status().ToString();
  EXPECT_TRUE(deepest->is_array());

  for (const int levels : {kMaxClientJsonNesting + 1, 100000}) {
    const Status s = ParseClientJson(Nested(levels), "the body").status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << levels;
    EXPECT_EQ(s.message(), "the body nests arrays and objects deeper than 64 levels") << levels;
  }
  const Status objects = ParseClientJson(R"({"a":)" + Nested(kMaxClientJsonNesting) + "}", "it").status();
  EXPECT_NE(objects.message().find("deeper than 64"), std::string::npos) << objects.ToString();

  // Values are counted, containers included: 65,536 pass, one more does not.
  const auto empties = [](size_t n) {  // an array of n - 1 empty objects: n values
    std::string text = "[";
    for (size_t i = 0; i + 1 < n; ++i) text += i == 0 ? "{}" : ",{}";
    return text + "]";
  };
  EXPECT_TRUE(ParseClientJson(empties(kMaxClientJsonValues), "the body").ok());
  const Status many = ParseClientJson(empties(kMaxClientJsonValues + 1), "the body").status();
  EXPECT_EQ(many.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(many.message(), "the body holds more than 65536 values");

  const Status broken = ParseClientJson(R"({"a": )", "load parameter 'config'").status();
  EXPECT_EQ(broken.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(broken.message().rfind("load parameter 'config' is not valid JSON: ", 0), 0U) << broken.message();
}

}  // namespace
}  // namespace es
