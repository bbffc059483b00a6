// TraceSettingsReply (server/kserve/trace_settings_reply.h): a trace level
// that would trace into nothing (no trace file in mode triton, no collector
// URL in mode opentelemetry) is refused with what to start the server with,
// and nothing of that update applied; the other settings stay changeable
// without an output, and the level with one.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "server/kserve/trace_settings_reply.h"

namespace es {
namespace {

inference::TraceSettingRequest With(const std::string& name, const std::string& value) {
  inference::TraceSettingRequest r;
  (*r.mutable_settings())[name].add_value(value);
  return r;
}

TraceSettings Output(std::string mode, std::string file, std::string url) {
  TraceSettings s;
  s.mode = std::move(mode);
  s.file = std::move(file);
  s.url = std::move(url);
  return s;
}

TEST(TraceSettingsReplyTest, TimestampsWithoutATraceFileIsRefusedAndNothingApplied) {
  Tracer tracer(Output("triton", "", ""));
  TraceSettingsReply reply(&tracer, nullptr);
  inference::TraceSettingRequest r = With("trace_level", "TIMESTAMPS");
  (*r.mutable_settings())["trace_rate"] = With("trace_rate", "7").settings().at("trace_rate");
  inference::TraceSettingResponse resp;
  const Status s = reply.Update(r, &resp);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("TIMESTAMPS has nowhere to go"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--trace-file"), std::string::npos) << s.message();
  EXPECT_FALSE(tracer.Settings("").timestamps);
  EXPECT_EQ(tracer.Settings("").rate, 1000u) << "the rate of the refused update is not applied either";
}

TEST(TraceSettingsReplyTest, TimestampsWithoutACollectorUrlIsRefusedInOpenTelemetryMode) {
  Tracer tracer(Output("opentelemetry", "/tmp/not-used.json", ""));
  TraceSettingsReply reply(&tracer, nullptr);
  inference::TraceSettingResponse resp;
  const Status s = reply.Update(With("trace_level", "TIMESTAMPS"), &resp);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--trace-url"), std::string::npos) << s.message();
}

TEST(TraceSettingsReplyTest, OtherSettingsChangeWithoutAnOutputAndTheLevelWithOne) {
  Tracer unwritten(Output("triton", "", ""));
  TraceSettingsReply no_output(&unwritten, nullptr);
  inference::TraceSettingResponse resp;
  ASSERT_TRUE(no_output.Update(With("trace_rate", "5"), &resp).ok());
  EXPECT_EQ(unwritten.Settings("").rate, 5u);
  ASSERT_TRUE(no_output.Update(With("trace_level", "OFF"), &resp).ok()) << "turning it off is always taken";

  // Never started (no file is opened before a trace is written).
  Tracer written(Output("triton", "/nonexistent-dir/trace.json", ""));
  TraceSettingsReply with_output(&written, nullptr);
  ASSERT_TRUE(with_output.Update(With("trace_level", "TIMESTAMPS"), &resp).ok());
  EXPECT_TRUE(written.Settings("").timestamps);
  EXPECT_EQ(resp.settings().at("trace_level").value(0), "TIMESTAMPS");
  ASSERT_TRUE(with_output.Update(With("trace_level", "OFF"), &resp).ok());
}

}  // namespace
}  // namespace es
