// Start-up failures an operator must understand from one line: a host that
// exits during start-up before it can say why in its channel (a crash while
// loading, a missing library) is reported with its last line on stderr; a
// port in use is named before any host is spawned.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "tests/common/test_paths.h"
#include "tests/integration/server_process.h"

namespace es::it {
namespace {

TEST(HostStartupTest, AHostThatExitsDuringStartUpIsReportedWithItsLastStderrLine) {
  WatchdogScope watchdog(std::chrono::seconds(120), "AHostThatExitsDuringStartUpIsReportedWithItsLastStderrLine");
  TempDir dir("es_host_startup_");
  const std::string host = dir.Path("failing_host.sh");
  {
    std::ofstream script(host);
    script << "#!/bin/sh\n"
              "echo 'loading models...' >&2\n"
              "echo 'fatal: cannot open /dev/nvidia0: No such file or directory' >&2\n"
              "exit 3\n";
  }
  ASSERT_EQ(chmod(host.c_str(), 0755), 0);
  ServerProcess::Options options;
  options.hosts = {{"cpu0", 0, host}, {"cpu1", 1}};
  auto server = ServerProcess::Start(options);
  ASSERT_EQ(server, nullptr) << "the server started although host cpu0 exits at once";
  const std::string& error = ServerProcess::last_start_error();
  EXPECT_NE(error.find("exited with code 3 during start-up"), std::string::npos) << error;
  EXPECT_NE(error.find("its last words on stderr: 'fatal: cannot open /dev/nvidia0: No such file or directory'"),
            std::string::npos)
      << error;
}

// A listening socket on a free loopback port, closed when it goes.
class TakenPort {
 public:
  TakenPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd_, 1) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot take a port";
    }
    port_ = ntohs(addr.sin_port);
  }
  ~TakenPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(HostStartupTest, APortInUseIsNamedBeforeAnyHostStarts) {
  WatchdogScope watchdog(std::chrono::seconds(60), "APortInUseIsNamedBeforeAnyHostStarts");
  TempDir dir("es_port_in_use_");
  dir.Write("repo/.keep", "");
  const std::string config = dir.Write("server.yaml", "repository: repo\nhosts:\n  - {name: cpu0}\n");
  TakenPort taken;
  for (const char* listener : {"--grpc-port", "--http-port", "--metrics-port"}) {
    const std::string port = std::to_string(taken.port());
    std::vector<std::string> argv = {
        es::test_paths::kServerBin, "--config", config, "--grpc-port", "0", "--http-port", "0", "--metrics-port", "0"};
    for (size_t i = 3; i < argv.size(); i += 2) {
      if (argv[i] == listener) argv[i + 1] = port;
    }
    std::string output;
    const int rc = RunCommand(argv, std::chrono::seconds(30), &output);
    EXPECT_NE(rc, 0) << listener << ": " << output;
    const std::string what = std::string(listener) == "--grpc-port"   ? "gRPC"
                             : std::string(listener) == "--http-port" ? "HTTP"
                                                                      : "metrics";
    EXPECT_NE(output.find("cannot listen for " + what + " on 127.0.0.1:" + port + ": address already in use"),
              std::string::npos)
        << output;
    EXPECT_EQ(output.find("host 'cpu0'"), std::string::npos) << "a host was started: " << output;
  }
}

}  // namespace
}  // namespace es::it
