// test_deploy_live: what the deployment files ask of a running server, asked
// of a real one. tests/deploy/validate.js --describe lists every server argv
// the Dockerfile, compose and the manifests use, every health-check argv
// (the image's HEALTHCHECK, compose's) and every gRPC probe's service name;
// this test starts the real ensemble-server (integration fixture: demo
// repository, two CPU hosts, free loopback ports) with each distinct set of
// those flags (the ports and --config replaced by the fixture's), runs each
// health check with its --server pointed at that server, and makes each
// gRPC probe's grpc.health.v1 call, as the kubelet would.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/test_paths.h"
#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"

namespace {

using es::it::ServerProcess;
using es::it::WatchdogScope;
using std::chrono::seconds;

const std::string kSource = es::test_paths::kSourceDir;
const std::string kBinDir = es::test_paths::kBinDir;

nlohmann::json Describe() {
  es::it::TempDir dir;
  const std::string file = (dir.path() / "describe.json").string();
  std::string output;
  es::it::RunCommand({es::test_paths::kNodeBin, kSource + "/tests/deploy/validate.js", "--root", kSource, "--bin-dir",
                      kBinDir, "--describe", file},
                     seconds(60), &output);
  const std::string text = es::it::ReadTextFile(file);
  if (text.empty()) {
    ADD_FAILURE() << "validate.js --describe wrote nothing:\n" << output;
    return nlohmann::json::object();
  }
  return nlohmann::json::parse(text);
}

// A server argv without what the fixture sets itself: --config and the ports.
std::vector<std::string> WithoutConfigAndPorts(const std::vector<std::string>& args) {
  static const std::set<std::string> kOwn = {"--config", "--http-port", "--grpc-port", "--metrics-port"};
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string name = args[i].substr(0, args[i].find('='));
    if (kOwn.count(name) != 0) {
      if (args[i].find('=') == std::string::npos) ++i;  // its value is the next word
      continue;
    }
    out.push_back(args[i]);
  }
  return out;
}

// Runs a health check's argv against `server`, its --server replaced; the
// exit code (0 ready, 3 not ready, 1 no answer).
int RunHealthcheck(const std::vector<std::string>& argv, const std::string& http, const std::string& grpc,
                   std::string* output) {
  std::vector<std::string> run = {kBinDir + "/" + argv[0]};
  bool use_http = false;
  for (const auto& a : argv) use_http = use_http || a == "--http";
  for (size_t i = 1; i < argv.size(); ++i) {
    run.push_back(argv[i]);
    if (argv[i] == "--server" && i + 1 < argv.size()) {
      run.push_back(use_http ? http : grpc);
      ++i;
    }
  }
  return es::it::RunCommand(run, seconds(30), output);
}

grpc::Status Probe(const ServerProcess& server, const std::string& service,
                   grpc::health::v1::HealthCheckResponse* resp) {
  auto health = server.HealthStub();
  grpc::ClientContext ctx;
  es::it::SetDeadline(&ctx);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  return health->Check(&ctx, req, resp);
}

TEST(DeployLive, ContainerFlagsHealthChecksAndProbesWorkAgainstARealServer) {
  WatchdogScope watchdog(seconds(300), "DeployLive");
  const nlohmann::json described = Describe();
  ASSERT_TRUE(described.contains("serverArgs"));
  ASSERT_GE(described["healthchecks"].size(), 2u) << "the Dockerfile's and compose's health checks";
  ASSERT_GE(described["grpcProbes"].size(), 2u) << "the Deployments' gRPC probes";

  std::set<std::vector<std::string>> flag_sets;
  for (const auto& s : described["serverArgs"]) {
    flag_sets.insert(WithoutConfigAndPorts(s["args"].get<std::vector<std::string>>()));
  }
  // At least the plain image and the poll mode of compose and the Deployments.
  EXPECT_GE(flag_sets.size(), 2u);
  for (const auto& flags : flag_sets) {
    std::string shown;
    for (const auto& f : flags) shown.append(f).push_back(' ');
    SCOPED_TRACE("server flags: " + shown);
    ServerProcess::Options options;
    options.extra_args = flags;
    auto server = ServerProcess::Start(options);
    ASSERT_TRUE(server) << ServerProcess::last_start_error();

    for (const auto& h : described["healthchecks"]) {
      const auto argv = h["argv"].get<std::vector<std::string>>();
      std::string output;
      int code = -1;
      // Ready once the demo models are loaded: the image's start period.
      for (int attempt = 0; attempt < 60 && code != 0; ++attempt) {
        if (attempt > 0) std::this_thread::sleep_for(std::chrono::seconds(1));
        code = RunHealthcheck(argv, server->http_address(), server->address(), &output);
      }
      EXPECT_EQ(code, 0) << h["where"].get<std::string>() << ": " << output << "\n" << server->LogTail();
    }
    for (const auto& p : described["grpcProbes"]) {
      grpc::health::v1::HealthCheckResponse resp;
      const grpc::Status s = Probe(*server, p["service"].get<std::string>(), &resp);
      EXPECT_TRUE(s.ok()) << p["where"].get<std::string>() << ": " << s.error_message();
      EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING) << p["where"].get<std::string>();
    }

    // The same checks can fail: a service the server does not know, and a
    // health check aimed where nothing listens.
    grpc::health::v1::HealthCheckResponse resp;
    EXPECT_EQ(Probe(*server, "inference.Bogus", &resp).error_code(), grpc::StatusCode::NOT_FOUND);
    std::string nowhere = "127.0.0.1:";
    nowhere.append(std::to_string(es::it::ClosedLoopbackPort()));
    std::string output;
    EXPECT_NE(
        RunHealthcheck(described["healthchecks"][0]["argv"].get<std::vector<std::string>>(), nowhere, nowhere, &output),
        0)
        << output;
  }
}

}  // namespace
