// Acceptance (issue 14): model versions, and the router as the one source of
// truth about what each host holds.
//
//  - version_policy serves several versions side by side; a request picks
//    one with model_version ("" = the highest), the answer names the
//    version that computed it, and an unserved version is NOT_FOUND naming
//    the served ones.
//  - A host never reads the repository by itself: a version folder added
//    while the server runs, then a SIGKILLed host, and the restarted host
//    holds what the router gave it before (the model keeps serving the
//    version it served), not what the disk now says.
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"

namespace es::it {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// `versioned` (make_test_models.py): version k answers x + k.
struct VersionedAnswer {
  grpc::Status status;
  std::string version;  // the response's model_version
  float added = 0;      // what the model added to the input
};

VersionedAnswer AskVersioned(Stub& stub, const std::string& version) {
  const std::vector<float> x = {1, 2, 3, 4};
  inference::ModelInferRequest request = RawRequest("versioned", {1, 4}, x);
  request.set_model_version(version);
  InferResult r = Infer(stub, request);
  VersionedAnswer answer{r.status, r.response.model_version(), 0};
  Fp32Tensor out;
  if (r.status.ok() && GetFp32Output(r.response, "output", &out) && out.values.size() == 4) {
    answer.added = out.values[0] - x[0];
  }
  return answer;
}

class LifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(MakeTestRepository(repo(), {"versioned"}, &error)) << error;
  }
  fs::path repo() const { return dir_.path() / "repo"; }
  void AppendToConfig(const std::string& model, const std::string& yaml) {
    const fs::path config = repo() / model / "config.yaml";
    ASSERT_TRUE(WriteTextFile(config, ReadTextFile(config) + yaml));
  }
  std::unique_ptr<ServerProcess> Start() {
    ServerProcess::Options options;
    options.repository = repo().string();
    return ServerProcess::Start(options);
  }
  TempDir dir_{"es_lifecycle_"};
};

TEST_F(LifecycleTest, PolicyServesSeveralVersionsAndRequestsPickOne) {
  WatchdogScope watchdog(seconds(120), "LifecycleTest: versions side by side");
  AppendToConfig("versioned", "version_policy: {latest: {num_versions: 2}}\n");
  auto server = Start();
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();
  for (const auto& [asked, served, added] :
       std::vector<std::tuple<std::string, std::string, float>>{{"2", "2", 2.f}, {"3", "3", 3.f}, {"", "3", 3.f}}) {
    SCOPED_TRACE("model_version '" + asked + "'");
    const VersionedAnswer a = AskVersioned(*stub, asked);
    ASSERT_TRUE(a.status.ok()) << Describe(a.status);
    EXPECT_EQ(a.version, served);
    EXPECT_EQ(a.added, added);
  }
  // Version 1 has a folder but the policy keeps only the newest two.
  EXPECT_TRUE(HasError(AskVersioned(*stub, "1").status, grpc::StatusCode::NOT_FOUND,
                       {"model 'versioned' has no served version '1'", "served: 2, 3"}));
  EXPECT_TRUE(HasError(AskVersioned(*stub, "x7").status, grpc::StatusCode::NOT_FOUND, {"'x7'"}));

  // Metadata lists the served versions; the index has one READY entry per version.
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::ModelMetadataRequest req;
    req.set_name("versioned");
    inference::ModelMetadataResponse resp;
    ASSERT_TRUE(stub->ModelMetadata(&ctx, req, &resp).ok());
    EXPECT_EQ(std::vector<std::string>(resp.versions().begin(), resp.versions().end()),
              (std::vector<std::string>{"2", "3"}));
  }
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::RepositoryIndexResponse index;
    ASSERT_TRUE(stub->RepositoryIndex(&ctx, inference::RepositoryIndexRequest(), &index).ok());
    std::vector<std::string> entries;
    for (const auto& m : index.models()) {
      if (m.name() == "versioned") entries.push_back(m.version() + ":" + m.state());
    }
    EXPECT_EQ(entries, (std::vector<std::string>{"2:READY", "3:READY"}));
  }
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::ModelReadyRequest req;
    req.set_name("versioned");
    req.set_version("1");
    inference::ModelReadyResponse resp;
    EXPECT_TRUE(HasError(stub->ModelReady(&ctx, req, &resp), grpc::StatusCode::NOT_FOUND, {"served: 2, 3"}));
  }
}

TEST_F(LifecycleTest, ARestartedHostHoldsWhatTheRouterGaveItNotWhatTheDiskSays) {
  WatchdogScope watchdog(seconds(180), "LifecycleTest: one source of truth");
  // Only version 1 on disk at start; 2 and 3 wait outside the repository.
  const fs::path aside = dir_.path() / "aside";
  fs::create_directories(aside);
  fs::rename(repo() / "versioned" / "2", aside / "2");
  fs::rename(repo() / "versioned" / "3", aside / "3");
  auto server = Start();
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();
  VersionedAnswer before = AskVersioned(*stub, "");
  ASSERT_TRUE(before.status.ok()) << Describe(before.status);
  EXPECT_EQ(before.version, "1");

  // A new version appears (renamed into place, as docs/lifecycle.md says to),
  // and the host serving the model dies.
  fs::rename(aside / "2", repo() / "versioned" / "2");
  const std::map<std::string, pid_t> hosts = server->HostPids();
  ASSERT_TRUE(hosts.count("cpu0"));
  ASSERT_EQ(kill(hosts.at("cpu0"), SIGKILL), 0);
  ASSERT_FALSE(server->WaitForHosts(milliseconds(30000), {{"cpu0", hosts.at("cpu0")}}).empty()) << server->LogTail();

  // Once the new incarnation is up, the model answers as before.
  VersionedAnswer after;
  const auto until = std::chrono::steady_clock::now() + seconds(30);
  do {
    after = AskVersioned(*stub, "");
    if (after.status.ok()) break;
    std::this_thread::sleep_for(milliseconds(50));
  } while (std::chrono::steady_clock::now() < until);
  ASSERT_TRUE(after.status.ok()) << Describe(after.status) << "\n" << server->LogTail();
  EXPECT_EQ(after.version, "1");
  EXPECT_EQ(after.added, 1.f);
  EXPECT_TRUE(HasError(AskVersioned(*stub, "2").status, grpc::StatusCode::NOT_FOUND, {"served: 1"}));
  // The host was told what to load: the router's log shows the restart and
  // the host's own line for the load it was asked to do.
  const std::string log = server->LogTail(400000);
  EXPECT_NE(log.find("loaded model 'versioned' version 1"), std::string::npos) << server->LogTail();
  EXPECT_EQ(log.find("model 'versioned' version 2"), std::string::npos) << server->LogTail();
}

}  // namespace
}  // namespace es::it
