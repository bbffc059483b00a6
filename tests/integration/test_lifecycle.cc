// Acceptance: model versions, and the router as the one source of
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
//  - explicit mode: only --load-model models at start; RepositoryModelLoad
//    loads an ensemble with its members and rolls a new version in;
//    unload with unload_dependents takes the ensemble along; a broken
//    model.pt leaves the old version serving with the error as its reason;
//    none mode refuses load and unload.
//  - poll mode: a version folder renamed into place is served within a few
//    polls, the old one leaves; a removed model folder is unloaded (its
//    ensembles stay loaded, not ready; a removed ensemble leaves its members).
//  - Rollouts under load (explicit loads and poll) fail no request, and
//    every answer is the version its response names.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/integration/metrics/metrics_support.h"

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

grpc::Status UnloadModel(Stub& stub, const std::string& model, bool dependents = false) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, milliseconds(60000));
  inference::RepositoryModelUnloadRequest req;
  req.set_model_name(model);
  if (dependents) (*req.mutable_parameters())["unload_dependents"].set_bool_param(true);
  inference::RepositoryModelUnloadResponse resp;
  return stub.RepositoryModelUnload(&ctx, req, &resp);
}

// "version:STATE" of each index entry of `model`; the reasons beside.
std::vector<std::string> IndexOf(Stub& stub, const std::string& model, std::string* reasons = nullptr) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  inference::RepositoryIndexResponse index;
  EXPECT_TRUE(stub.RepositoryIndex(&ctx, inference::RepositoryIndexRequest(), &index).ok());
  std::vector<std::string> entries;
  for (const auto& m : index.models()) {
    if (m.name() != model) continue;
    entries.push_back(m.version() + ":" + m.state());
    if (reasons != nullptr) *reasons += m.reason() + "\n";
  }
  return entries;
}

// Clients asking `versioned` for its highest version, without a pause, until
// stopped: every answer must be OK and computed by the version it names.
class Traffic {
 public:
  Traffic(const ServerProcess& server, int clients) {
    for (int c = 0; c < clients; ++c) {
      threads_.emplace_back([this, stub = std::shared_ptr<Stub>(server.NewConnectionStub())] {
        while (!stop_.load()) {
          const VersionedAnswer a = AskVersioned(*stub, "");
          std::lock_guard<std::mutex> lock(mu_);
          ++calls_;
          if (!a.status.ok()) {
            failures_.push_back(Describe(a.status));
          } else if (a.version != std::to_string(static_cast<int>(a.added))) {
            failures_.push_back("version " + a.version + " answered x + " + std::to_string(a.added));
          } else {
            versions_.insert(a.version);
          }
        }
      });
    }
  }
  ~Traffic() { Stop(); }
  void Stop() {
    stop_.store(true);
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::vector<std::string> failures() {
    std::lock_guard<std::mutex> lock(mu_);
    return failures_;
  }
  std::set<std::string> versions() {
    std::lock_guard<std::mutex> lock(mu_);
    return versions_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::mutex mu_;
  int calls_ = 0;
  std::vector<std::string> failures_;
  std::set<std::string> versions_;
};

// Waits until `versioned` answers "" with `version`; false after `timeout`.
bool WaitForVersion(Stub& stub, const std::string& version, std::chrono::seconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    const VersionedAnswer a = AskVersioned(stub, "");
    if (a.status.ok() && a.version == version) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return false;
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
  std::unique_ptr<ServerProcess> Start(std::vector<std::string> args = {}) {
    ServerProcess::Options options;
    options.repository = repo().string();
    options.extra_args = std::move(args);
    return ServerProcess::Start(options);
  }
  // Moves versioned's version folders 2 and 3 out of the repository, to be
  // renamed back in (atomically, as docs/lifecycle.md says) by the test.
  void SetVersionsAside() {
    fs::create_directories(aside());
    for (const char* v : {"2", "3"}) fs::rename(repo() / "versioned" / v, aside() / v);
  }
  void BringBack(const std::string& version) { fs::rename(aside() / version, repo() / "versioned" / version); }
  fs::path aside() const { return dir_.path() / "aside"; }
  TempDir dir_{"es_lifecycle_"};
};

TEST_F(LifecycleTest, PolicyServesSeveralVersionsAndRequestsPickOne) {
  WatchdogScope watchdog(seconds(120), "LifecycleTest: versions side by side");
  AppendToConfig("versioned", "version_policy: {latest: {num_versions: 2}}\n");
  // An ensemble that pins one member to version 2 and lets the other (a copy
  // of the same model) follow its newest (3): it answers the mean, x + 2.5.
  fs::copy(repo() / "versioned", repo() / "versioned_b", fs::copy_options::recursive);
  fs::create_directories(repo() / "pinned");
  ASSERT_TRUE(WriteTextFile(repo() / "pinned" / "config.yaml",
                            "platform: ensemble\nmax_batch_size: 8\n"
                            "ensemble:\n  combine: mean\n  members:\n"
                            "    - {model: versioned, version: 2}\n    - {model: versioned_b}\n"));
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
  {
    const std::vector<float> x = {1, 2, 3, 4};
    InferResult r = Infer(*stub, RawRequest("pinned", {1, 4}, x));
    ASSERT_TRUE(r.status.ok()) << Describe(r.status);
    Fp32Tensor out;
    ASSERT_TRUE(GetFp32Output(r.response, "output", &out));
    EXPECT_EQ(out.values, (std::vector<float>{3.5f, 4.5f, 5.5f, 6.5f}));
    // Which member versions computed it, in the response.
    ASSERT_TRUE(r.response.parameters().count("member_versions"));
    EXPECT_EQ(r.response.parameters().at("member_versions").string_param(), "versioned:2,versioned_b:3");
  }
  // Version 1 has a folder but the policy keeps only the newest two.
  EXPECT_TRUE(HasError(AskVersioned(*stub, "1").status, grpc::StatusCode::NOT_FOUND,
                       {"model 'versioned' has no served version '1'", "served: 2, 3"}));
  EXPECT_TRUE(HasError(AskVersioned(*stub, "x7").status, grpc::StatusCode::NOT_FOUND, {"'x7'"}));

  // Statistics are per version: each has its own figures.
  for (const auto& [version, code] :
       std::vector<std::pair<std::string, grpc::StatusCode>>{{"2", grpc::StatusCode::OK},
                                                             {"3", grpc::StatusCode::OK},
                                                             {"1", grpc::StatusCode::NOT_FOUND}}) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::ModelStatisticsRequest req;
    req.set_name("versioned");
    req.set_version(version);
    inference::ModelStatisticsResponse resp;
    const grpc::Status status = stub->ModelStatistics(&ctx, req, &resp);
    EXPECT_EQ(status.error_code(), code) << version << ": " << Describe(status);
    if (!status.ok()) continue;
    ASSERT_EQ(resp.model_stats_size(), 1) << version;
    EXPECT_EQ(resp.model_stats(0).version(), version);
    EXPECT_GE(resp.model_stats(0).inference_stats().success().count(), 1u) << version;
  }

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
  SetVersionsAside();  // only version 1 on disk at start
  auto server = Start();
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();
  VersionedAnswer before = AskVersioned(*stub, "");
  ASSERT_TRUE(before.status.ok()) << Describe(before.status);
  EXPECT_EQ(before.version, "1");

  // A new version appears (renamed into place, as docs/lifecycle.md says to),
  // and the host serving the model dies.
  BringBack("2");
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

TEST_F(LifecycleTest, ExplicitModeLoadsAndUnloadsOnRequest) {
  WatchdogScope watchdog(seconds(240), "LifecycleTest: explicit mode");
  SetVersionsAside();
  auto server = Start({"--model-control-mode", "explicit", "--load-model", "versioned"});
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();
  EXPECT_EQ(IndexOf(*stub, "versioned"), (std::vector<std::string>{"1:READY"}));
  std::string reasons;
  EXPECT_EQ(IndexOf(*stub, "demo_ensemble", &reasons), (std::vector<std::string>{":UNAVAILABLE"}));
  EXPECT_NE(reasons.find("not loaded"), std::string::npos) << reasons;
  EXPECT_TRUE(HasError(Infer(*stub, ImageRequest("demo_ensemble", RandomImages(2, 1))).status,
                       grpc::StatusCode::NOT_FOUND, {"unknown model 'demo_ensemble'"}));

  // Loading the ensemble loads its members.
  ASSERT_TRUE(LoadModel(*stub, "demo_ensemble").ok()) << server->LogTail();
  EXPECT_EQ(IndexOf(*stub, "mlp"), (std::vector<std::string>{"1:READY"}));
  EXPECT_TRUE(Infer(*stub, ImageRequest("demo_ensemble", RandomImages(2, 1))).status.ok());
  {
    // A model loaded while the server runs has its statistics too.
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::ModelStatisticsRequest req;
    req.set_name("demo_ensemble");
    inference::ModelStatisticsResponse resp;
    ASSERT_TRUE(stub->ModelStatistics(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.model_stats_size(), 1);
    EXPECT_EQ(resp.model_stats(0).inference_stats().success().count(), 1u);
  }

  // A new version folder, then a load: the new version serves, the old leaves (latest 1).
  BringBack("2");
  ASSERT_TRUE(LoadModel(*stub, "versioned").ok()) << server->LogTail();
  EXPECT_EQ(IndexOf(*stub, "versioned"), (std::vector<std::string>{"2:READY"}));
  VersionedAnswer a = AskVersioned(*stub, "");
  ASSERT_TRUE(a.status.ok()) << Describe(a.status);
  EXPECT_EQ(a.version, "2");
  EXPECT_EQ(a.added, 2.f);

  // A broken version 3: the load fails naming the file, version 2 keeps serving.
  fs::create_directories(repo() / "versioned" / "3");
  ASSERT_TRUE(WriteTextFile(repo() / "versioned" / "3" / "model.pt", "not a TorchScript archive"));
  const grpc::Status broken = LoadModel(*stub, "versioned");
  EXPECT_FALSE(broken.ok());
  EXPECT_NE(broken.error_message().find("version 3"), std::string::npos) << Describe(broken);
  a = AskVersioned(*stub, "");
  ASSERT_TRUE(a.status.ok()) << Describe(a.status);
  EXPECT_EQ(a.version, "2");
  reasons.clear();
  EXPECT_EQ(IndexOf(*stub, "versioned", &reasons), (std::vector<std::string>{"2:READY"}));
  EXPECT_NE(reasons.find("version 3"), std::string::npos) << reasons;
  auto scrape = metrics_test::Scrape::From(server->metrics_address());
  ASSERT_TRUE(scrape);
  EXPECT_EQ(scrape->Value("ensemble_model_load_failures_total", {}), std::optional<double>(1.0));
  EXPECT_EQ(
      scrape->Value("ensemble_model_version_state", {{"model", "versioned"}, {"version", "2"}, {"state", "READY"}}),
      std::optional<double>(1.0));

  // Unloading a member leaves its ensemble loaded but not ready; loading it
  // again makes the ensemble ready.
  ASSERT_TRUE(UnloadModel(*stub, "mlp").ok());
  EXPECT_EQ(ModelReady(*stub, "demo_ensemble"), std::optional<bool>(false));
  EXPECT_TRUE(HasError(Infer(*stub, ImageRequest("demo_ensemble", RandomImages(2, 1))).status,
                       grpc::StatusCode::UNAVAILABLE,
                       {"ensemble 'demo_ensemble' is not ready: member 'mlp' is not loaded"}));
  reasons.clear();
  EXPECT_EQ(IndexOf(*stub, "mlp", &reasons), (std::vector<std::string>{":UNAVAILABLE"}));
  EXPECT_NE(reasons.find("unloaded"), std::string::npos) << reasons;
  ASSERT_TRUE(LoadModel(*stub, "mlp").ok());
  EXPECT_TRUE(Infer(*stub, ImageRequest("demo_ensemble", RandomImages(2, 1))).status.ok());
  // Unloading the ensemble with unload_dependents takes its members along.
  ASSERT_TRUE(UnloadModel(*stub, "demo_ensemble", /*dependents=*/true).ok());
  EXPECT_TRUE(HasError(Infer(*stub, ImageRequest("demo_ensemble", RandomImages(2, 1))).status,
                       grpc::StatusCode::NOT_FOUND, {"unknown model 'demo_ensemble'"}));
  EXPECT_EQ(IndexOf(*stub, "mlp"), (std::vector<std::string>{":UNAVAILABLE"}));
  EXPECT_EQ(IndexOf(*stub, "cnn"), (std::vector<std::string>{":UNAVAILABLE"}));
  EXPECT_EQ(IndexOf(*stub, "versioned"), (std::vector<std::string>{"2:READY"}));  // not a member
  EXPECT_TRUE(HasError(UnloadModel(*stub, "no_such_model"), grpc::StatusCode::NOT_FOUND, {"no_such_model"}));
  EXPECT_TRUE(ProcessAlive(server->pid()));
}

TEST_F(LifecycleTest, NoneModeRefusesLoadAndUnload) {
  WatchdogScope watchdog(seconds(120), "LifecycleTest: none mode");
  auto server = Start();
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();
  EXPECT_TRUE(HasError(LoadModel(*stub, "versioned"), grpc::StatusCode::UNAVAILABLE,
                       {"explicit model load is not allowed", "model_control_mode is none"}));
  EXPECT_TRUE(HasError(UnloadModel(*stub, "versioned"), grpc::StatusCode::UNAVAILABLE, {"model_control_mode is none"}));
  EXPECT_TRUE(AskVersioned(*stub, "").status.ok());
}

TEST_F(LifecycleTest, ExplicitRolloutUnderLoadFailsNoRequest) {
  WatchdogScope watchdog(seconds(240), "LifecycleTest: explicit rollout under load");
  SetVersionsAside();
  auto server = Start({"--model-control-mode", "explicit", "--load-model", "versioned"});
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();
  Traffic traffic(*server, 4);
  for (const std::string v : {"2", "3"}) {
    std::this_thread::sleep_for(milliseconds(300));
    BringBack(v);
    ASSERT_TRUE(LoadModel(*stub, "versioned").ok()) << server->LogTail();
  }
  std::this_thread::sleep_for(milliseconds(300));
  traffic.Stop();
  std::printf("explicit rollout 1 -> 2 -> 3 under 4 clients: %d calls, %zu failed\n", traffic.calls(),
              traffic.failures().size());
  EXPECT_TRUE(traffic.failures().empty()) << traffic.failures().front();
  EXPECT_EQ(traffic.versions(), (std::set<std::string>{"1", "2", "3"}));
}

TEST_F(LifecycleTest, PollModeRollsNewVersionsInUnderLoad) {
  WatchdogScope watchdog(seconds(240), "LifecycleTest: poll mode");
  SetVersionsAside();
  auto server = Start({"--model-control-mode", "poll", "--repository-poll-secs", "1"});
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();
  Traffic traffic(*server, 4);
  for (const std::string v : {"2", "3"}) {
    BringBack(v);
    ASSERT_TRUE(WaitForVersion(*stub, v, seconds(20))) << "version " << v << " not served\n" << server->LogTail();
  }
  // A config.yaml change that alters what the version computes with (its
  // dims), written aside and renamed over: loaded under a new host key
  // beside the old, then switched to, still under load.
  const fs::path config = repo() / "versioned" / "config.yaml";
  std::string yaml = ReadTextFile(config);
  for (size_t at = yaml.find("dims: [4]"); at != std::string::npos; at = yaml.find("dims: [4]")) {
    yaml.replace(at, 9, "dims: [-1]");
  }
  ASSERT_TRUE(WriteTextFile(repo() / "versioned" / ".config.yaml.new", yaml));
  fs::rename(repo() / "versioned" / ".config.yaml.new", config);
  const auto until_switch = std::chrono::steady_clock::now() + seconds(20);
  while (server->LogTail(400000).find("model 'versioned@1' version 3") == std::string::npos &&
         std::chrono::steady_clock::now() < until_switch) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  std::this_thread::sleep_for(milliseconds(1500));  // traffic on the new config, the old one retired
  traffic.Stop();
  std::printf("poll rollout 1 -> 2 -> 3, then a config change, under 4 clients: %d calls, %zu failed\n",
              traffic.calls(), traffic.failures().size());
  EXPECT_TRUE(traffic.failures().empty()) << traffic.failures().front();
  EXPECT_NE(server->LogTail(400000).find("loaded model 'versioned@1' version 3"), std::string::npos)
      << server->LogTail();
  EXPECT_EQ(IndexOf(*stub, "versioned"), (std::vector<std::string>{"3:READY"}));

  // A model folder that goes away is unloaded at the next poll. Waited for
  // until the model is unknown (ModelReady fails), not merely not ready: its
  // versions are unloaded first, and for those few milliseconds a request
  // gets UNAVAILABLE ("no version ready"), as during any unload.
  fs::rename(repo() / "wide_mlp", dir_.path() / "wide_mlp");
  const auto until = std::chrono::steady_clock::now() + seconds(20);
  while (ModelReady(*stub, "wide_mlp").has_value() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(HasError(Infer(*stub, RawRequest("wide_mlp", {1, 1, 28, 28}, std::vector<float>(784, 0.f))).status,
                       grpc::StatusCode::NOT_FOUND, {"wide_mlp"}));
  // The ensemble that uses it stays loaded, not ready (a member is not
  // ready), as after an explicit unload of a member.
  EXPECT_EQ(ModelReady(*stub, "demo_ensemble"), std::optional<bool>(false));

  // An ensemble folder that goes away takes the ensemble only: its members
  // have folders of their own and stay served, poll after poll.
  fs::rename(repo() / "demo_ensemble", dir_.path() / "demo_ensemble");
  const auto gone = std::chrono::steady_clock::now() + seconds(20);
  while (!HasError(Infer(*stub, RawRequest("demo_ensemble", {1, 1, 28, 28}, std::vector<float>(784, 0.f))).status,
                   grpc::StatusCode::NOT_FOUND, {"demo_ensemble"}) &&
         std::chrono::steady_clock::now() < gone) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  int not_ready = 0;
  for (int i = 0; i < 30; ++i) {  // three polls
    not_ready += ModelReady(*stub, "mlp") != std::optional<bool>(true);
    not_ready += ModelReady(*stub, "cnn") != std::optional<bool>(true);
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_EQ(not_ready, 0) << server->LogTail();
}

// 100 unloads and loads of a real model leave its host's memory where it
// was: a version's runner and its warm-up buffers are freed on unload.
TEST_F(LifecycleTest, HundredLoadsAndUnloadsKeepHostMemoryFlat) {
  WatchdogScope watchdog(seconds(300), "LifecycleTest: load/unload memory");
  auto server = Start({"--model-control-mode", "explicit", "--load-model", "mlp"});
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();
  const pid_t host = server->HostPids().at("cpu0");
  // One cycle first: what a load allocates once (allocator pools, LibTorch's
  // lazily made state) is there before the baseline.
  ASSERT_TRUE(UnloadModel(*stub, "mlp").ok());
  ASSERT_TRUE(LoadModel(*stub, "mlp").ok());
  const long before = RssKiB(host);
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(UnloadModel(*stub, "mlp").ok()) << i;
    ASSERT_TRUE(LoadModel(*stub, "mlp").ok()) << i << "\n" << server->LogTail();
  }
  ASSERT_TRUE(Infer(*stub, ImageRequest("mlp", RandomImages(4, 2))).status.ok());
  const long after = RssKiB(host);
  EXPECT_EQ(server->HostPids().at("cpu0"), host) << "the host restarted";
  std::printf("host cpu0 RSS: %ld KiB after the first reload, %ld KiB after 100 more (%+.1f%%)\n", before, after,
              100.0 * static_cast<double>(after - before) / static_cast<double>(before));
  EXPECT_LE(after, before + before / 10) << "RSS grew more than 10%";
}

}  // namespace
}  // namespace es::it
