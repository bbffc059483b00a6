// Status / StatusOr: the value of an error is never read silently, an OK
// status cannot pose as a value, and ES_ASSIGN_OR_RETURN passes errors up.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace es {
namespace {

StatusOr<int> Parse(const std::string& text) {
  if (text.empty()) return Status::InvalidArgument("empty number");
  return std::stoi(text);
}

Status Doubled(const std::string& text, int* out) {
  ES_ASSIGN_OR_RETURN(const int value, Parse(text));
  *out = value * 2;
  return Status::Ok();
}

StatusOr<std::unique_ptr<int>> Boxed(int v) { return std::make_unique<int>(v); }

Status Unbox(int* out) {
  std::unique_ptr<int> box;
  ES_ASSIGN_OR_RETURN(box, Boxed(7));  // an existing variable, a move-only value
  *out = *box;
  return Status::Ok();
}

TEST(StatusOrTest, ValueOfAnErrorAbortsNamingTheError) {
  StatusOr<int> error = Status::NotFound("no such model 'x'");
  EXPECT_DEATH((void)error.value(), "value of an error: NOT_FOUND: no such model 'x'");
  EXPECT_DEATH((void)*error, "value of an error");
}

TEST(StatusOrTest, AnOkStatusWithoutValueIsAnInternalError) {
  StatusOr<int> odd = Status::Ok();
  EXPECT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInternal);
}

TEST(StatusOrTest, AssignOrReturnPassesErrorsUpAndValuesOn) {
  int out = 0;
  EXPECT_TRUE(Doubled("21", &out).ok());
  EXPECT_EQ(out, 42);
  const Status s = Doubled("", &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "empty number");
  EXPECT_EQ(out, 42);  // untouched on error
  EXPECT_TRUE(Unbox(&out).ok());
  EXPECT_EQ(out, 7);
}

// A client's name in an error message: whole up to kMaxShownBytes, else cut
// before a UTF-8 character within that, with "..." to say so.
TEST(ShownClientTextTest, LongTextIsCutOnACharacterAndSaysSo) {
  EXPECT_EQ(ShownClientText("mlp"), "mlp");
  EXPECT_EQ(ShownClientText(std::string(kMaxShownBytes, 'a')), std::string(kMaxShownBytes, 'a'));
  EXPECT_EQ(ShownClientText(std::string(1 << 20, 'a')), std::string(kMaxShownBytes, 'a') + "...");
  // "\xC3\xA9" (é) across the cut: it goes whole or not at all.
  const std::string across = std::string(kMaxShownBytes - 1, 'a') + "\xC3\xA9" + "b";
  EXPECT_EQ(ShownClientText(across), std::string(kMaxShownBytes - 1, 'a') + "...");
  EXPECT_EQ(Utf8Prefix("ab\xC3\xA9", 3), 2U);
  EXPECT_EQ(Utf8Prefix("ab\xC3\xA9", 4), 4U);
  EXPECT_EQ(Utf8Prefix("ab", 10), 2U);
}

}  // namespace
}  // namespace es
