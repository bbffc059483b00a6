// LogSettingsReply (server/kserve/log_settings_reply.h): each of Triton's
// log settings changed by its name and type, every wrong name, type or value
// refused with the setting named and nothing applied, log_file read only,
// and an empty request a read that applies nothing.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/kserve/log_settings_reply.h"

namespace es {
namespace {

using Request = inference::LogSettingsRequest;

Request With(const std::string& name, bool value) {
  Request r;
  (*r.mutable_settings())[name].set_bool_param(value);
  return r;
}
Request With(const std::string& name, uint32_t value) {
  Request r;
  (*r.mutable_settings())[name].set_uint32_param(value);
  return r;
}
Request With(const std::string& name, const std::string& value) {
  Request r;
  (*r.mutable_settings())[name].set_string_param(value);
  return r;
}

TEST(LogSettingsReplyTest, EachSettingChangesByItsNameAndType) {
  const LogSettings base;
  EXPECT_FALSE(UpdatedLogSettings(base, With("log_info", false))->info);
  EXPECT_FALSE(UpdatedLogSettings(base, With("log_warning", false))->warning);
  EXPECT_FALSE(UpdatedLogSettings(base, With("log_error", false))->error);
  EXPECT_EQ(UpdatedLogSettings(base, With("log_verbose_level", 3u))->verbose_level, 3u);
  EXPECT_EQ(UpdatedLogSettings(base, With("log_format", std::string("json")))->format, LogFormat::kJson);
  Request two = With("log_info", false);
  (*two.mutable_settings())["log_verbose_level"].set_uint32_param(1);
  const LogSettings both = UpdatedLogSettings(base, two).value();
  EXPECT_FALSE(both.info);
  EXPECT_EQ(both.verbose_level, 1u);
  EXPECT_TRUE(both.warning) << "what the request does not name stays";
}

TEST(LogSettingsReplyTest, WrongNamesTypesAndValuesAreRefusedNamingTheSetting) {
  LogSettings base;
  base.file = "/var/log/es.log";
  const std::vector<std::pair<Request, std::string>> cases = {
      {With("log_info", std::string("yes")), "'log_info' takes a bool (true or false), not a string"},
      {With("log_verbose_level", true), "'log_verbose_level' takes a number (0 or more), not a bool"},
      {With("log_format", 1u), "'log_format' takes a string, not a number"},
      {With("log_format", std::string("xml")), "'log_format': unknown log format 'xml'"},
      {With("log_colour", true), "unknown log setting 'log_colour'"},
      {With("log_file", std::string("/tmp/elsewhere.log")), "'log_file' is set when the server starts"},
  };
  for (const auto& [request, expected] : cases) {
    const Status s = UpdatedLogSettings(base, request).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << expected;
    EXPECT_NE(s.message().find(expected), std::string::npos) << s.message();
  }
  Request no_value;
  (*no_value.mutable_settings())["log_info"];  // a setting with no value at all
  const Status none = UpdatedLogSettings(base, no_value).status();
  EXPECT_NE(none.message().find("takes a bool (true or false), not no value"), std::string::npos) << none.message();
  // The file read back unchanged is no change.
  EXPECT_TRUE(UpdatedLogSettings(base, With("log_file", std::string("/var/log/es.log"))).ok());
}

TEST(LogSettingsReplyTest, AnUpdateAppliesOnceAndAnswersEverySettingAReadAppliesNothing) {
  std::vector<LogSettings> applied;
  LogSettingsReply reply([&](const LogSettings& s) {
    applied.push_back(s);
    ApplyLogSettings(s);
  });
  inference::LogSettingsResponse read;
  ASSERT_TRUE(reply.Update(Request(), &read).ok());
  EXPECT_TRUE(applied.empty());
  EXPECT_EQ(read.settings().size(), 6u);
  EXPECT_TRUE(read.settings().at("log_info").bool_param());
  EXPECT_EQ(read.settings().at("log_format").string_param(), "default");
  EXPECT_EQ(read.settings().at("log_file").string_param(), "");

  inference::LogSettingsResponse changed;
  ASSERT_TRUE(reply.Update(With("log_verbose_level", 2u), &changed).ok());
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0].verbose_level, 2u);
  EXPECT_EQ(changed.settings().at("log_verbose_level").uint32_param(), 2u);

  inference::LogSettingsResponse refused;
  Request bad = With("log_verbose_level", 5u);
  (*bad.mutable_settings())["log_warning"].set_string_param("no");
  EXPECT_FALSE(reply.Update(bad, &refused).ok());
  EXPECT_EQ(applied.size(), 1u) << "a refused update applies none of its settings";
  EXPECT_EQ(CurrentLogSettings().verbose_level, 2u);
  ApplyLogSettings(LogSettings{});
}

}  // namespace
}  // namespace es
