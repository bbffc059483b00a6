// ParseCommandLine: one line naming the mistake, exit 2; --help exits 0.
#include "common/command_line.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace es {
namespace {

// Runs ParseCommandLine on `args` (after the program name) for `app`;
// returns the exit code (or -1 for "go on") and what went to stderr.
int RunParse(CLI::App& app, std::vector<std::string> args, std::string* err) {
  args.insert(args.begin(), "tool");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  const std::optional<int> code = ParseCommandLine(app, static_cast<int>(argv.size()), argv.data(), "tool");
  *err = testing::internal::GetCapturedStderr();
  testing::internal::GetCapturedStdout();
  return code ? *code : -1;
}

// An app with a required --config and an optional --port.
int Parse(std::vector<std::string> args, std::string* err) {
  CLI::App app{"test"};
  std::string config;
  int port = 0;
  app.add_option("--config", config, "config")->required();
  app.add_option("--port", port, "port");
  return RunParse(app, std::move(args), err);
}

TEST(CommandLineTest, UnknownOptionIsNamedEvenWhenARequiredOneIsMissing) {
  std::string err;
  EXPECT_EQ(Parse({"--bogus"}, &err), 2);
  EXPECT_EQ(err, "tool: unknown option '--bogus' (see --help)\n");
  EXPECT_EQ(Parse({"--config", "x", "--bogus=3"}, &err), 2);
  EXPECT_EQ(err, "tool: unknown option '--bogus' (see --help)\n");
}

TEST(CommandLineTest, OtherMistakesAreOneLineAndKnownOptionsPass) {
  std::string err;
  EXPECT_EQ(Parse({}, &err), 2);
  EXPECT_EQ(err, "tool: --config is required (see --help)\n");
  EXPECT_EQ(Parse({"--config", "x", "--port", "-1"}, &err), -1) << err;  // a negative value is not an option
  EXPECT_EQ(Parse({"--config=x"}, &err), -1) << err;
  EXPECT_EQ(Parse({"--help"}, &err), 0);
}

// An app with subcommands (as ensemble-cli): a global --server, a
// subcommand `ready` with a positional and its own --verbose flag.
int ParseWithSubcommands(std::vector<std::string> args, std::string* err) {
  CLI::App app{"test"};
  app.require_subcommand(1);
  app.fallthrough();
  std::string server;
  app.add_option("--server", server, "server");
  std::string model;
  bool verbose = false;
  auto* ready = app.add_subcommand("ready", "ready?");
  ready->add_option("model", model, "model");
  ready->add_flag("--verbose", verbose, "more");
  app.add_subcommand("live", "live?");
  return RunParse(app, std::move(args), err);
}

TEST(CommandLineTest, SubcommandAppsNameTheUnknownWordOrOption) {
  std::string err;
  EXPECT_EQ(ParseWithSubcommands({"--bogus"}, &err), 2);
  EXPECT_EQ(err, "tool: unknown option '--bogus' (see --help)\n");
  EXPECT_EQ(ParseWithSubcommands({"bogus"}, &err), 2);
  EXPECT_EQ(err, "tool: unknown subcommand 'bogus' (see --help)\n");
  EXPECT_EQ(ParseWithSubcommands({"--server", "h:1", "ready", "m", "--bogus"}, &err), 2);
  EXPECT_EQ(err, "tool: unknown option '--bogus' (see --help)\n");
  EXPECT_EQ(ParseWithSubcommands({"--server", "h:1", "ready", "m", "--verbose"}, &err), -1) << err;
  EXPECT_EQ(ParseWithSubcommands({"ready", "m", "--server=h:1"}, &err), -1) << err;  // fallthrough
  EXPECT_EQ(ParseWithSubcommands({}, &err), 2);
  EXPECT_NE(err.find("subcommand"), std::string::npos) << err;
}

}  // namespace
}  // namespace es
