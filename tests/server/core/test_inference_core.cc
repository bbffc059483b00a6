// InferenceCore (server/core/inference_core.h) without hosts, on a fake
// ModelCatalog: composite models' requests go to the CompositeRunner plugged
// in (and are UNIMPLEMENTED, naming the model, without one), a request past
// its deadline is answered DEADLINE_EXCEEDED before it goes anywhere,
// ModelReady of an ensemble follows its members' readiness and quorum, and
// a member call for a model that is not loaded or has no ready version is
// UNAVAILABLE.
#include "server/core/inference_core.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace es {
namespace {

using Clock = std::chrono::steady_clock;

// The models the test says, each with the ready versions the test says.
class FakeCatalog : public ModelCatalog {
 public:
  const ModelConfig* Find(const std::string& name) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(name);
    return it == models_.end() ? nullptr : it->second;
  }
  std::vector<int64_t> ReadyVersions(const ModelConfig& model) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ready_.find(model.name);
    return it == ready_.end() ? std::vector<int64_t>{} : it->second;
  }
  void Serve(const ModelConfig* model, std::vector<int64_t> ready) {
    std::lock_guard<std::mutex> lock(mu_);
    models_[model->name] = model;
    ready_[model->name] = std::move(ready);
  }
  void SetReady(const std::string& name, std::vector<int64_t> ready) {
    std::lock_guard<std::mutex> lock(mu_);
    ready_[name] = std::move(ready);
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, const ModelConfig*> models_;
  std::map<std::string, std::vector<int64_t>> ready_;
};

// Records the requests it runs and answers each at once with one output
// named after the model, so the caller can tell who answered.
class FakeRunner : public CompositeRunner {
 public:
  void Run(const std::shared_ptr<const InferRequest>& request, InferDone done) override {
    seen.push_back(request.get());
    InferResponse response;
    response.outputs.push_back({"from-runner:" + request->model->name, DataType::kFp32, {1}, std::string(4, '\0')});
    done(Status::Ok(), std::move(response));
  }
  std::vector<const InferRequest*> seen;
};

ModelConfig TorchScript(const std::string& name) {
  ModelConfig c;
  c.name = name;
  c.platform = "torchscript";
  c.max_batch_size = 4;
  c.inputs = {{"x", DataType::kFp32, {1}}};
  c.outputs = {{"p", DataType::kFp32, {2}}};
  c.versions = {1};
  c.hosts = {"cpu0"};  // not in the core's (empty) host map: never up
  return c;
}

ModelConfig Ensemble(const std::string& name, const std::vector<std::string>& members, int64_t min_members = 0) {
  ModelConfig c;
  c.name = name;
  c.platform = "ensemble";
  c.max_batch_size = 4;
  c.inputs = {{"x", DataType::kFp32, {1}}};
  c.outputs = {{"p", DataType::kFp32, {2}}};
  c.versions = {1};
  for (const std::string& m : members) c.ensemble.members.emplace_back().model = m;
  c.ensemble.min_members = min_members;
  return c;
}

// What one call got back.
struct Answer {
  int count = 0;
  int64_t version = -1;  // member calls only
  Status status;
  InferResponse response;
  InferDone Done() {
    return [this](const Status& s, InferResponse r) {
      ++count;
      status = s;
      response = std::move(r);
    };
  }
  MemberCalls::MemberDone MemberDone() {
    return [this](int64_t v, const Status& s, InferResponse r) {
      ++count;
      version = v;
      status = s;
      response = std::move(r);
    };
  }
};

class InferenceCoreTest : public ::testing::Test {
 protected:
  InferenceCoreTest() : core_(&config_, &catalog_, {}, nullptr) {}

  static std::shared_ptr<InferRequest> Request(const ModelConfig& model,
                                               Clock::time_point deadline = Clock::time_point::max()) {
    auto request = std::make_shared<InferRequest>();
    request->model = &model;
    request->version = 1;
    request->deadline = deadline;
    return request;
  }

  ServerConfig config_;
  FakeCatalog catalog_;
  InferenceCore core_;
};

TEST_F(InferenceCoreTest, CompositeRequestIsRunByThePluggedInRunner) {
  const ModelConfig ens = Ensemble("ens", {"a", "b"});
  catalog_.Serve(&ens, {1});
  FakeRunner runner;
  core_.SetCompositeRunner(&runner);
  auto request = Request(ens);
  Answer answer;
  core_.Infer(request, answer.Done());
  ASSERT_EQ(answer.count, 1);
  ASSERT_TRUE(answer.status.ok()) << answer.status.ToString();
  ASSERT_EQ(runner.seen.size(), 1u);
  EXPECT_EQ(runner.seen[0], request.get()) << "the runner got another request than the one sent";
  ASSERT_EQ(answer.response.outputs.size(), 1u);
  EXPECT_EQ(answer.response.outputs[0].name, "from-runner:ens");
}

TEST_F(InferenceCoreTest, CompositeRequestWithoutARunnerIsUnimplementedNamingTheModel) {
  const ModelConfig ens = Ensemble("ens", {"a", "b"});
  catalog_.Serve(&ens, {1});
  Answer answer;
  core_.Infer(Request(ens), answer.Done());
  ASSERT_EQ(answer.count, 1);
  EXPECT_EQ(answer.status.code(), StatusCode::kUnimplemented) << answer.status.ToString();
  EXPECT_NE(answer.status.message().find("'ens'"), std::string::npos) << answer.status.message();
}

TEST_F(InferenceCoreTest, RequestPastItsDeadlineIsDeadlineExceededAndGoesNowhere) {
  const ModelConfig ens = Ensemble("ens", {"a", "b"});
  const ModelConfig single = TorchScript("single");
  catalog_.Serve(&ens, {1});
  catalog_.Serve(&single, {1});
  FakeRunner runner;
  core_.SetCompositeRunner(&runner);
  const Clock::time_point passed = Clock::now() - std::chrono::milliseconds(1);
  for (const ModelConfig* model : {&ens, &single}) {
    Answer answer;
    core_.Infer(Request(*model, passed), answer.Done());
    ASSERT_EQ(answer.count, 1) << model->name;
    EXPECT_EQ(answer.status.code(), StatusCode::kDeadlineExceeded) << answer.status.ToString();
    EXPECT_NE(answer.status.message().find("'" + model->name + "'"), std::string::npos) << answer.status.message();
    EXPECT_EQ(core_.InFlight(model->HostKey(), 1), 0);
  }
  EXPECT_TRUE(runner.seen.empty()) << "an expired request reached the composite runner";
}

// Members "x" and "y" are zero-member composites here: ready exactly while
// the catalog lists a ready version of them, so the test sets each member's
// readiness through the catalog (a TorchScript member needs a live host).
TEST_F(InferenceCoreTest, EnsembleIsReadyWhileItsQuorumOfMembersIsReady) {
  const ModelConfig x = Ensemble("x", {});
  const ModelConfig y = Ensemble("y", {});
  const ModelConfig all = Ensemble("all", {"x", "y"});          // min_members: every member
  const ModelConfig one = Ensemble("one", {"x", "y"}, 1);       // one member suffices
  const ModelConfig missing = Ensemble("missing", {"x", "gone"}, 2);
  catalog_.Serve(&x, {1});
  catalog_.Serve(&y, {1});
  catalog_.Serve(&all, {1});
  catalog_.Serve(&one, {1});
  catalog_.Serve(&missing, {1});
  EXPECT_TRUE(core_.ModelReady(all));
  EXPECT_TRUE(core_.ModelReady(one));
  EXPECT_FALSE(core_.ModelReady(missing)) << "a member the catalog does not know counts as not ready";

  catalog_.SetReady("y", {});
  EXPECT_FALSE(core_.ModelReady(all)) << "every member is needed without min_members";
  EXPECT_TRUE(core_.ModelReady(one)) << "x alone meets min_members 1";

  catalog_.SetReady("x", {});
  EXPECT_FALSE(core_.ModelReady(one));

  catalog_.SetReady("x", {1});
  catalog_.SetReady("y", {1});
  catalog_.SetReady("all", {});
  EXPECT_FALSE(core_.ModelReady(all)) << "an ensemble with no ready version of its own is not ready";
}

TEST_F(InferenceCoreTest, TorchScriptMemberWithoutALiveHostIsNotReady) {
  const ModelConfig a = TorchScript("a");
  const ModelConfig ens = Ensemble("ens", {"a"});
  catalog_.Serve(&a, {1});
  catalog_.Serve(&ens, {1});
  EXPECT_FALSE(core_.ModelReady(a));
  EXPECT_FALSE(core_.ModelReady(ens));
}

TEST_F(InferenceCoreTest, PinnedRequestForAVersionNoLongerReadyIsUnavailableAndLeavesNothingInFlight) {
  const ModelConfig single = TorchScript("single");
  catalog_.Serve(&single, {2});
  auto request = Request(single);
  request->version_pinned = true;
  Answer answer;
  core_.Infer(request, answer.Done());
  ASSERT_EQ(answer.count, 1);
  EXPECT_EQ(answer.status.code(), StatusCode::kUnavailable) << answer.status.ToString();
  EXPECT_NE(answer.status.message().find("'single' version 1"), std::string::npos) << answer.status.message();
  EXPECT_EQ(core_.InFlight(single.HostKey(), 1), 0);
}

// Unpinned, the request moves to the highest ready version and says so in
// its answer (here an error: the model's host is not in the core's map).
TEST_F(InferenceCoreTest, UnpinnedRequestRunsOnTheHighestReadyVersionAndReportsIt) {
  const ModelConfig single = TorchScript("single");
  catalog_.Serve(&single, {2, 3});
  Answer answer;
  core_.Infer(Request(single), answer.Done());
  ASSERT_EQ(answer.count, 1);
  EXPECT_EQ(answer.status.code(), StatusCode::kUnavailable) << answer.status.ToString();
  EXPECT_EQ(answer.response.version, 3);
  EXPECT_EQ(core_.InFlight(single.HostKey(), 1), 0);
  EXPECT_EQ(core_.InFlight(single.HostKey(), 3), 0) << "the answered request is still counted in flight";
}

TEST_F(InferenceCoreTest, MemberCallToAModelNotLoadedIsUnavailableNamingIt) {
  const ModelConfig ens = Ensemble("ens", {"ghost"});
  catalog_.Serve(&ens, {1});
  Answer answer;
  core_.CallMember(ens.ensemble.members[0], Request(ens), answer.MemberDone());
  ASSERT_EQ(answer.count, 1);
  EXPECT_EQ(answer.status.code(), StatusCode::kUnavailable) << answer.status.ToString();
  EXPECT_NE(answer.status.message().find("'ghost'"), std::string::npos) << answer.status.message();
  EXPECT_EQ(answer.version, 0) << "the call reached no version";
}

TEST_F(InferenceCoreTest, MemberCallToAModelWithNoReadyVersionIsUnavailable) {
  const ModelConfig a = TorchScript("a");
  const ModelConfig ens = Ensemble("ens", {"a"});
  catalog_.Serve(&a, {});
  catalog_.Serve(&ens, {1});
  Answer answer;
  core_.CallMember(ens.ensemble.members[0], Request(ens), answer.MemberDone());
  ASSERT_EQ(answer.count, 1);
  EXPECT_EQ(answer.status.code(), StatusCode::kUnavailable) << answer.status.ToString();
  EXPECT_EQ(answer.version, 0);
  EXPECT_EQ(core_.InFlight(a.HostKey(), 1), 0);
}

}  // namespace
}  // namespace es
