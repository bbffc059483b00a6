// Acceptance of Triton's logging extension (docs/logging.md) through the
// real server and its real hosts, with the clients users have: the gRPC
// LogSettings RPC and curl on /v2/logging.
//
//  - --log-file: the router's lines and its hosts' go to the file (the
//    hosts' through the router, whole lines), and log_file reads it back.
//  - log_format json and log_verbose_level 1, set over gRPC, reach the
//    hosts at once: a host's own debug line about its new settings, and its
//    line for a model loaded afterwards, are JSON objects naming the host.
//  - log_info false, set with curl, silences the hosts' info lines (an
//    unload's) until it is set back, after which they come again (a load's).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"

namespace es::it {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> lines;
  const std::string text = ReadTextFile(path);
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  return lines;
}

// Waits (at most 20 s) for a line of the log that `match` accepts.
bool WaitForLine(const std::string& path, const std::function<bool(const std::string&)>& match) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const std::string& line : Lines(path)) {
      if (match(line)) return true;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  return false;
}

// A JSON line of the log with this level, a source starting with
// `source_prefix`, and a message containing `text`.
std::function<bool(const std::string&)> JsonLine(const std::string& level, const std::string& source_prefix,
                                                 const std::string& text) {
  return [=](const std::string& line) {
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    return j.is_object() && j.value("level", "") == level && j.value("source", "").rfind(source_prefix, 0) == 0 &&
           j.value("message", "").find(text) != std::string::npos;
  };
}

int CountContaining(const std::string& path, const std::string& text) {
  int n = 0;
  for (const std::string& line : Lines(path)) n += line.find(text) != std::string::npos ? 1 : 0;
  return n;
}

// POST /v2/logging with curl; the answer's JSON (discarded on failure).
json PostLogging(const ServerProcess& server, const std::string& body) {
  std::string out;
  const int rc =
      RunCommand({"/usr/bin/curl", "-sS", "-X", "POST", "-d", body, "http://" + server.http_address() + "/v2/logging"},
                 seconds(30), &out);
  EXPECT_EQ(rc, 0) << out;
  return json::parse(out, nullptr, /*allow_exceptions=*/false);
}

TEST(LoggingTest, SettingsChangeTheRoutersAndTheHostsLogWhileTheyRun) {
  WatchdogScope watchdog(seconds(240), "LoggingTest");
  TempDir logs;
  const std::string log = logs.Path("server.log");
  ServerProcess::Options options;
  options.extra_args = {"--model-control-mode", "explicit", "--load-model", "mlp", "--log-file", log};
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server) << ServerProcess::last_start_error() << "\n" << ReadTextFile(log);
  auto stub = server->Stub();
  // The start-up lines, in the default format: the router's and a host's.
  ASSERT_TRUE(WaitForLine(log, [](const std::string& line) {
    return line.find("[host cpu") != std::string::npos &&
           line.find("loaded model 'mlp' version 1") != std::string::npos;
  })) << ReadTextFile(log);

  inference::LogSettingsResponse settings;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
    ASSERT_TRUE(stub->LogSettings(&ctx, inference::LogSettingsRequest(), &settings).ok());
  }
  EXPECT_EQ(settings.settings().at("log_file").string_param(), log);
  EXPECT_EQ(settings.settings().at("log_format").string_param(), "default");

  inference::LogSettingsRequest json_verbose;
  (*json_verbose.mutable_settings())["log_format"].set_string_param("json");
  (*json_verbose.mutable_settings())["log_verbose_level"].set_uint32_param(1);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
    const grpc::Status s = stub->LogSettings(&ctx, json_verbose, &settings);
    ASSERT_TRUE(s.ok()) << Describe(s);
  }
  EXPECT_EQ(settings.settings().at("log_format").string_param(), "json");
  // Each host took the settings the router sent it: its own debug line, as JSON.
  EXPECT_TRUE(WaitForLine(log, JsonLine("debug", "host cpu0", "log settings: info=1"))) << ReadTextFile(log);
  EXPECT_TRUE(WaitForLine(log, JsonLine("debug", "host cpu1", "log settings: info=1"))) << ReadTextFile(log);
  EXPECT_TRUE(WaitForLine(log, JsonLine("info", "router", "log settings: info=1"))) << ReadTextFile(log);

  ASSERT_TRUE(LoadModel(*stub, "cnn").ok());  // the demo places cnn on cpu1
  EXPECT_TRUE(WaitForLine(log, JsonLine("info", "host cpu1", "loaded model 'cnn' version 1"))) << ReadTextFile(log);

  // Info lines off (curl, as a user would): the hosts' unload line is not written.
  json answer = PostLogging(*server, R"({"log_info": false})");
  EXPECT_EQ(answer.value("log_info", true), false) << answer.dump();
  {
    inference::RepositoryModelUnloadRequest unload;
    unload.set_model_name("cnn");
    inference::RepositoryModelUnloadResponse unloaded;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(60));
    const grpc::Status s = stub->RepositoryModelUnload(&ctx, unload, &unloaded);
    ASSERT_TRUE(s.ok()) << Describe(s);
  }
  answer = PostLogging(*server, R"({"log_info": true})");
  EXPECT_EQ(answer.value("log_info", false), true) << answer.dump();
  // On again: the next load's line comes, after where the unload's would be.
  ASSERT_TRUE(LoadModel(*stub, "cnn").ok());
  const int loads_before = 1;
  EXPECT_TRUE(WaitForLine(log, [&](const std::string&) {
    return CountContaining(log, "loaded model 'cnn' version 1") > loads_before;
  })) << ReadTextFile(log);
  EXPECT_EQ(CountContaining(log, "unloaded model 'cnn'"), 0) << ReadTextFile(log);

  // A wrong value is refused naming the setting, over HTTP as over gRPC.
  answer = PostLogging(*server, R"({"log_verbose_level": -1})");
  EXPECT_NE(answer.value("error", "").find("log_verbose_level"), std::string::npos) << answer.dump();
}

}  // namespace
}  // namespace es::it
