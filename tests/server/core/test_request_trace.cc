// Tracer and RequestTrace (server/core/request_trace.h): which requests are
// sampled (level, rate, count, a model's own settings over the server's,
// nothing without a file), the file Triton's tools read (a JSON array, two
// objects per trace, a member's parent_id, log_frequency's numbered files),
// and the settings' parsing (errors naming the setting; an empty list
// clearing a model's value or restoring a server default).
#include "server/core/request_trace.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/temp_dir.h"

namespace es {
namespace {

using json = nlohmann::json;

TraceSettings On(const std::string& file, uint64_t rate = 1, int64_t count = -1) {
  TraceSettings s;
  s.timestamps = true;
  s.file = file;
  s.rate = rate;
  s.count = count;
  return s;
}

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

TEST(TracerTest, TheRateTracesOneRequestInNAndTheCountStopsIt) {
  testing::TempDir dir;
  Tracer rate(On(dir.Path("a.json"), /*rate=*/3));
  int traced = 0;
  for (int i = 0; i < 9; ++i) traced += rate.Sample("m", 1, "") != nullptr ? 1 : 0;
  EXPECT_EQ(traced, 3);

  Tracer counted(On(dir.Path("b.json"), /*rate=*/1, /*count=*/2));
  EXPECT_NE(counted.Sample("m", 1, ""), nullptr);
  EXPECT_NE(counted.Sample("m", 1, ""), nullptr);
  EXPECT_EQ(counted.Sample("m", 1, ""), nullptr) << "the count is spent";
  EXPECT_EQ(counted.Settings("").count, 0);

  TraceSettings off = On(dir.Path("c.json"));
  off.timestamps = false;
  EXPECT_EQ(Tracer(off).Sample("m", 1, ""), nullptr);
  EXPECT_EQ(Tracer(On("")).Sample("m", 1, ""), nullptr) << "no file: nowhere to write";
}

TEST(TracerTest, AModelsOwnSettingsOverrideTheServers) {
  testing::TempDir dir;
  TraceSettings server = On(dir.Path("t.json"));
  server.timestamps = false;
  Tracer tracer(server);
  TraceOverride a;
  a.timestamps = true;
  tracer.SetModel("a", a);
  EXPECT_NE(tracer.Sample("a", 1, ""), nullptr);
  EXPECT_EQ(tracer.Sample("b", 1, ""), nullptr);
  EXPECT_TRUE(tracer.Settings("a").timestamps);
  EXPECT_FALSE(tracer.Settings("b").timestamps);
  tracer.SetModel("a", TraceOverride{});
  EXPECT_EQ(tracer.Sample("a", 1, ""), nullptr) << "the override removed: the server's OFF";
}

TEST(TracerTest, TheFileIsTritonsJsonArrayWithMembersLinkedToTheirEnsemble) {
  testing::TempDir dir;
  const std::string file = dir.Path("trace.json");
  {
    Tracer tracer(On(file));
    std::shared_ptr<RequestTrace> ensemble = tracer.Sample("ens", 1, "req-7");
    ASSERT_NE(ensemble, nullptr);
    ensemble->Mark("REQUEST_START", 100);
    std::shared_ptr<RequestTrace> member = tracer.Child(*ensemble, "mlp");
    member->set_version(3);
    member->Mark("QUEUE_START", 110);
    member->Mark("COMPUTE_END", 150);
    tracer.Finish(member);
    ensemble->Mark("REQUEST_END", 200);
    tracer.Finish(ensemble);
    tracer.Stop();
    EXPECT_EQ(tracer.written(), 2u);
  }
  const json trace = ReadJson(file);
  ASSERT_TRUE(trace.is_array()) << "a whole JSON array once the tracer stopped";
  ASSERT_EQ(trace.size(), 4u);
  EXPECT_EQ(trace[0]["model_name"], "mlp");
  EXPECT_EQ(trace[0]["model_version"], 3);
  EXPECT_EQ(trace[0]["parent_id"], trace[2]["id"]) << "the member's parent is the ensemble's trace";
  EXPECT_EQ(trace[1]["id"], trace[0]["id"]);
  EXPECT_EQ(trace[1]["timestamps"][1], (json{{"name", "COMPUTE_END"}, {"ns", 150}}));
  EXPECT_EQ(trace[2]["model_name"], "ens");
  EXPECT_EQ(trace[2]["request_id"], "req-7");
  EXPECT_FALSE(trace[2].contains("parent_id"));
  EXPECT_EQ(trace[3]["timestamps"][0]["name"], "REQUEST_START");
}

TEST(TracerTest, LogFrequencyWritesNumberedFilesOfThatManyTraces) {
  testing::TempDir dir;
  const std::string file = dir.Path("t.json");
  TraceSettings s = On(file);
  s.log_frequency = 2;
  {
    Tracer tracer(s);
    for (int i = 0; i < 3; ++i) tracer.Finish(tracer.Sample("m", 1, std::to_string(i)));
    tracer.Stop();
  }
  EXPECT_EQ(ReadJson(file + ".0").size(), 4u) << "two traces, two objects each";
  EXPECT_EQ(ReadJson(file + ".1").size(), 2u) << "the last one, closed at the stop";
}

TEST(TraceSettingTest, ValuesAreCheckedAndEmptyListsClearOrRestore) {
  TraceOverride o;
  EXPECT_TRUE(ApplyTraceSetting("trace_level", {"TIMESTAMPS"}, &o, false).ok());
  EXPECT_TRUE(*o.timestamps);
  EXPECT_TRUE(ApplyTraceSetting("trace_rate", {"5"}, &o, false).ok());
  EXPECT_EQ(*o.rate, 5u);
  EXPECT_TRUE(ApplyTraceSetting("trace_count", {"-1"}, &o, false).ok());
  EXPECT_TRUE(ApplyTraceSetting("log_frequency", {"0"}, &o, false).ok());
  EXPECT_TRUE(ApplyTraceSetting("trace_rate", {}, &o, /*server_level=*/false).ok());
  EXPECT_FALSE(o.rate.has_value()) << "a model's value cleared: the server's applies";
  EXPECT_TRUE(ApplyTraceSetting("trace_rate", {}, &o, /*server_level=*/true).ok());
  EXPECT_EQ(*o.rate, 1000u) << "a server value restored to its default";

  const std::vector<std::pair<std::pair<std::string, std::vector<std::string>>, std::string>> bad = {
      {{"trace_level", {"TENSORS"}}, "'trace_level': 'TENSORS' is not OFF or TIMESTAMPS"},
      {{"trace_rate", {"0"}}, "'trace_rate': '0' is not a whole number of 1 or more"},
      {{"trace_rate", {"ten"}}, "'trace_rate': 'ten'"},
      {{"trace_count", {"-2"}}, "'trace_count': '-2'"},
      {{"trace_rate", {"1", "2"}}, "'trace_rate' takes one value"},
      {{"trace_file", {"/tmp/x"}}, "'trace_file' is set when the server starts"},
      {{"trace_colour", {"red"}}, "unknown trace setting 'trace_colour'"},
  };
  for (const auto& [setting, expected] : bad) {
    const Status s = ApplyTraceSetting(setting.first, setting.second, &o, false);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << setting.first;
    EXPECT_NE(s.message().find(expected), std::string::npos) << s.message();
  }
}

TEST(TraceConfigFlagTest, TritonsFormsAreReadAndOthersNamed) {
  const std::vector<std::pair<std::string, std::pair<std::string, std::string>>> good = {
      {"level=TIMESTAMPS", {"level", "TIMESTAMPS"}},
      {"rate=100", {"rate", "100"}},
      {"count=-1", {"count", "-1"}},
      {"mode=opentelemetry", {"mode", "opentelemetry"}},
      {"triton,file=/tmp/t.json", {"file", "/tmp/t.json"}},
      {"triton,log-frequency=50", {"log_frequency", "50"}},
      {"file=/tmp/t.json", {"file", "/tmp/t.json"}},
      {"opentelemetry,url=localhost:4318/v1/traces", {"url", "localhost:4318/v1/traces"}},
      {"opentelemetry,url=http://c:4318/v1/traces?a=b", {"url", "http://c:4318/v1/traces?a=b"}},
  };
  for (const auto& [flag, want] : good) {
    auto parsed = ParseTraceConfigFlag(flag);
    ASSERT_TRUE(parsed.ok()) << flag << ": " << parsed.status().ToString();
    EXPECT_EQ(*parsed, want) << flag;
  }
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"level", "expected NAME=VALUE"},
      {"rate=", "no value for 'rate'"},
      {"zipkin,url=x", "unknown trace mode 'zipkin'"},
      {"opentelemetry,resource=service.name=x", "opentelemetry setting 'resource' is not supported"},
      {"triton,url=x", "unknown setting 'url' of mode triton"},
      {"url=x", "unknown setting 'url'"},
      {"colour=red", "unknown setting 'colour'"},
  };
  for (const auto& [flag, why] : bad) {
    auto parsed = ParseTraceConfigFlag(flag);
    ASSERT_FALSE(parsed.ok()) << flag;
    EXPECT_NE(parsed.status().message().find(why), std::string::npos) << parsed.status().message();
    EXPECT_NE(parsed.status().message().find("'" + flag + "'"), std::string::npos) << "names the flag's value";
  }
}

}  // namespace
}  // namespace es
