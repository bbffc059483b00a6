// SharedServerSuite<Suite>: a GoogleTest fixture whose tests share one server
// process, started once for the suite (starting one costs seconds: LibTorch,
// loading and warm-up in the hosts) and stopped after its last test.
//
//   class ServingTest : public SharedServerSuite<ServingTest> {
//    public:  // called by the base
//     // Optional: makes the repository under `dir` and sets the options;
//     // returns "" or why the server cannot start. Default: the demo
//     // repository with the default options.
//     static std::string PrepareServer(const std::filesystem::path& dir, ServerProcess::Options* options);
//   };
//
// A test's SetUp fails (naming the reason) when the server did not start.
// Each suite (each Suite type) has its own server: the statics are per type.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "tests/common/temp_dir.h"
#include "tests/integration/server_process.h"

namespace es::it {

template <typename Suite>
class SharedServerSuite : public ::testing::Test {
 protected:
  static std::string PrepareServer(const std::filesystem::path&, ServerProcess::Options*) { return ""; }

  static void SetUpTestSuite() {
    const std::string suite = ::testing::UnitTest::GetInstance()->current_test_suite()->name();
    WatchdogScope watchdog(std::chrono::seconds(240), suite + ": starting the server");
    suite_dir_ = new TempDir("es_" + suite + "_");
    ServerProcess::Options options;
    setup_error_ = Suite::PrepareServer(suite_dir_->path(), &options);
    if (!setup_error_.empty()) return;
    server_ = ServerProcess::Start(options).release();
    if (server_ == nullptr) setup_error_ = ServerProcess::last_start_error();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete suite_dir_;
    suite_dir_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr) << setup_error_; }

  static inline ServerProcess* server_ = nullptr;
  static inline TempDir* suite_dir_ = nullptr;  // the suite's own files (its repository)
  static inline std::string setup_error_;
};

}  // namespace es::it
