// The process log (common/log_setup.h): a level's settings, the host's
// encoding of them (checked field by field: it crosses a process boundary),
// and the logger itself writing to standard error sent to a file: only the
// severities switched on, in the default or the JSON format.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/log_setup.h"
#include "tests/common/temp_dir.h"

namespace es {
namespace {

TEST(LogSetupTest, EachLevelSwitchesItsSeverityAndTheMoreSevereOnes) {
  const LogSettings info = SettingsForLevel("info").value();
  EXPECT_TRUE(info.info && info.warning && info.error);
  EXPECT_EQ(info.verbose_level, 0u);
  EXPECT_EQ(SettingsForLevel("debug")->verbose_level, 1u);
  EXPECT_EQ(SettingsForLevel("trace")->verbose_level, 2u);
  const LogSettings warn = SettingsForLevel("warn").value();
  EXPECT_FALSE(warn.info);
  EXPECT_TRUE(warn.warning && warn.error);
  const LogSettings error = SettingsForLevel("error").value();
  EXPECT_FALSE(error.info || error.warning);
  EXPECT_TRUE(error.error);
  const LogSettings off = SettingsForLevel("off").value();
  EXPECT_FALSE(off.info || off.warning || off.error);
  const Status bad = SettingsForLevel("loud").status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("'loud'"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("trace, debug, info, warn, error or off"), std::string::npos) << bad.message();
}

TEST(LogSetupTest, FormatsAreNamedAsTritonNamesThem) {
  EXPECT_EQ(ParseLogFormat("default").value(), LogFormat::kDefault);
  EXPECT_EQ(ParseLogFormat("ISO8601").value(), LogFormat::kIso8601);
  EXPECT_EQ(ParseLogFormat("json").value(), LogFormat::kJson);
  EXPECT_STREQ(LogFormatName(LogFormat::kIso8601), "ISO8601");
  const Status bad = ParseLogFormat("iso8601").status();
  EXPECT_NE(bad.message().find("default, ISO8601 or json"), std::string::npos) << bad.message();
}

TEST(LogSetupTest, TheEncodingRoundTripsWithoutTheFile) {
  LogSettings s;
  s.file = "/var/log/x.log";
  s.info = false;
  s.error = false;
  s.verbose_level = 7;
  s.format = LogFormat::kJson;
  const std::string text = EncodeLogSettings(s);
  EXPECT_EQ(text, "info=0 warning=1 error=0 verbose=7 format=json");
  StatusOr<LogSettings> back = DecodeLogSettings(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  s.file.clear();
  EXPECT_EQ(*back, s);
}

TEST(LogSetupTest, DecodingRefusesWhatIsNotAnEncoding) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"info=1 warning=1 error=1 verbose=0", "'format' missing or repeated"},
      {"info=1 info=1 warning=1 error=1 verbose=0 format=json", "'info' missing or repeated"},
      {"info=2 warning=1 error=1 verbose=0 format=json", "info must be 0 or 1"},
      {"info=1 warning=1 error=1 verbose=-1 format=json", "verbose must be a number"},
      {"info=1 warning=1 error=1 verbose=9999999999 format=json", "verbose must be a number"},
      {"info=1 warning=1 error=1 verbose=0 format=xml", "unknown log format 'xml'"},
      {"info=1 warning=1 error=1 verbose=0 format=json colour=1", "unknown field 'colour'"},
      {"info=1 warning", "'warning' is not key=value"},
      {std::string(300, 'x'), "longer than 256 bytes"},
  };
  for (const auto& [text, expected] : cases) {
    const Status s = DecodeLogSettings(text).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(s.message().find(expected), std::string::npos) << text << ": " << s.message();
  }
}

// Standard error sent to a file for the test's length, then put back.
class StandardErrorToFile {
 public:
  explicit StandardErrorToFile(const std::string& path) : saved_(dup(STDERR_FILENO)) {
    status_ = RedirectStandardError(path);
  }
  ~StandardErrorToFile() {
    dup2(saved_, STDERR_FILENO);
    close(saved_);
  }
  const Status& status() const { return status_; }

 private:
  int saved_;
  Status status_;
};

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool AnyContains(const std::vector<std::string>& lines, const std::string& needle) {
  for (const std::string& line : lines) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(LogSetupTest, TheLoggerWritesTheSeveritiesSwitchedOnInTheFormatChosen) {
  testing::TempDir dir;
  const std::string path = dir.Path("server.log");
  InstallProcessLogger("test-log-setup", "host t0");
  {
    StandardErrorToFile redirect(path);
    ASSERT_TRUE(redirect.status().ok()) << redirect.status().ToString();
    EXPECT_EQ(CurrentLogSettings().file, path);

    spdlog::info("first info");
    spdlog::warn("first warning");
    spdlog::debug("first debug");
    LogSettings quiet;
    quiet.info = false;  // off while the more verbose debug lines are on: switched one by one
    quiet.verbose_level = 1;
    ApplyLogSettings(quiet);
    spdlog::info("second info");
    spdlog::warn("second warning");
    spdlog::debug("second debug");
    spdlog::trace("second trace");
    LogSettings json;
    json.format = LogFormat::kJson;
    ApplyLogSettings(json);
    spdlog::error("a \"quoted\" line\nand a second\tone");
    spdlog::default_logger()->flush();
  }
  const std::vector<std::string> lines = Lines(path);
  EXPECT_TRUE(AnyContains(lines, "[host t0] first info")) << "default format: the source in brackets";
  EXPECT_TRUE(AnyContains(lines, "first warning"));
  EXPECT_FALSE(AnyContains(lines, "first debug")) << "verbose level 0: no debug lines";
  EXPECT_FALSE(AnyContains(lines, "second info"));
  EXPECT_TRUE(AnyContains(lines, "second warning"));
  EXPECT_TRUE(AnyContains(lines, "second debug"));
  EXPECT_FALSE(AnyContains(lines, "second trace")) << "verbose level 1: debug, not trace";
  ASSERT_FALSE(lines.empty());
  const nlohmann::json last = nlohmann::json::parse(lines.back(), nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(last.is_object()) << "the json format's line is one JSON object: " << lines.back();
  EXPECT_EQ(last.value("level", ""), "error");
  EXPECT_EQ(last.value("source", ""), "host t0");
  EXPECT_EQ(last.value("pid", 0), getpid());
  EXPECT_EQ(last.value("message", ""), "a \"quoted\" line\nand a second\tone");
  const std::string time = last.value("time", "");
  EXPECT_EQ(time.size(), std::string("2026-12-04T17:48:53.123456Z").size()) << time;
  EXPECT_EQ(time.back(), 'Z') << time;
  ApplyLogSettings(LogSettings{});
}

TEST(LogSetupTest, JsonLinesNameTheRequestOfTheirThreadsScope) {
  testing::TempDir dir;
  const std::string path = dir.Path("server.log");
  InstallProcessLogger("test-log-scope", "");
  {
    StandardErrorToFile redirect(path);
    ASSERT_TRUE(redirect.status().ok()) << redirect.status().ToString();
    LogSettings json;
    json.format = LogFormat::kJson;
    ApplyLogSettings(json);
    spdlog::info("before");
    {
      const LogRequestScope outer("req-1", "");
      spdlog::info("outer");
      {
        const LogRequestScope inner("req-1", "4bf92f3577b34da6a3ce929d0e0e4736");
        spdlog::info("inner");
        std::thread([] { spdlog::info("other thread"); }).join();
      }
      spdlog::info("outer again");
    }
    spdlog::info("after");
    spdlog::default_logger()->flush();
  }
  ApplyLogSettings(LogSettings{});
  std::map<std::string, nlohmann::json> by_message;
  for (const std::string& line : Lines(path)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << line;
    by_message[j.value("message", "")] = j;
  }
  for (const char* plain : {"before", "after", "other thread"}) {
    EXPECT_FALSE(by_message[plain].contains("request_id")) << plain;
    EXPECT_FALSE(by_message[plain].contains("trace_id")) << plain;
  }
  for (const char* outer : {"outer", "outer again"}) {
    EXPECT_EQ(by_message[outer].value("request_id", ""), "req-1") << outer;
    EXPECT_FALSE(by_message[outer].contains("trace_id")) << outer;
  }
  EXPECT_EQ(by_message["inner"].value("request_id", ""), "req-1");
  EXPECT_EQ(by_message["inner"].value("trace_id", ""), "4bf92f3577b34da6a3ce929d0e0e4736");
}

TEST(LogSetupTest, AFileThatCannotBeOpenedIsNamed) {
  const Status s = RedirectStandardError("/nonexistent-folder/server.log");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("/nonexistent-folder/server.log"), std::string::npos) << s.message();
}

// A client's text in a log line: quoted, cut to its bytes before a UTF-8
// character, and unable to pose as two values or as a line of its own.
TEST(LogSetupTest, ClientTextIsQuotedCutAndDefused) {
  EXPECT_EQ(QuoteClientText("job-7"), "'job-7'");
  EXPECT_EQ(QuoteClientText(""), "''");
  EXPECT_EQ(QuoteClientText(std::string(100, 'a')), "'" + std::string(64, 'a') + "'");
  EXPECT_EQ(QuoteClientText("abcdef", 3), "'abc'");
  // "é" is two bytes (C3 A9): a cut after its first byte drops it whole.
  EXPECT_EQ(QuoteClientText("ab\xC3\xA9", 3), "'ab'");
  EXPECT_EQ(QuoteClientText("ab\xC3\xA9", 4), "'ab\xC3\xA9'");
  // A four-byte character (U+1F600) cut anywhere inside it.
  for (size_t bytes = 1; bytes <= 3; ++bytes) EXPECT_EQ(QuoteClientText("\xF0\x9F\x98\x80", bytes), "''") << bytes;
  EXPECT_EQ(QuoteClientText("a', 'b"), "'a?, ?b'");
  EXPECT_EQ(QuoteClientText("a\nforged error line\r\x7F"),
            "'a?forged error line?"
            "?'");  // (no trigraph)
}

}  // namespace
}  // namespace es
