// EnsembleRunner (server/ensemble/ensemble_runner.h) on a fake MemberCalls
// played by the test: a fan-out calls every member once and combines their
// answers, ensemble.max_in_flight refuses requests beyond it and gives the
// place back once a call is over, member_timeout_ms with min_members answers
// from the quorum without a slow member, a cascade stops at the stage
// where its rows are decided, and an overload ladder answers at a cheaper
// rung when a request's deadline is nearer than the ensemble's measured
// latency (and in full when the request says exact), a cascade rung at the
// rung's own exit threshold.
#include "server/ensemble/ensemble_runner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/hosts/submission_burst.h"

namespace es {
namespace {

using std::chrono::milliseconds;

// Each member answers every row of its request with the same two class
// probabilities, FP32 [rows, 2], computed on version 1; members listed in
// `held` keep their answer until the test releases it.
class FakeMembers : public MemberCalls {
 public:
  void CallMember(const EnsembleMember& member, const std::shared_ptr<const InferRequest>& request,
                  MemberDone done) override {
    const int64_t rows = request->batch_rows();
    InferResponse response;
    InferOutput out{"p", DataType::kFp32, {rows, 2}, ""};
    const std::pair<float, float> p = answers.at(member.model);
    for (int64_t r = 0; r < rows; ++r) {
      out.data.append(reinterpret_cast<const char*>(&p.first), sizeof(float));
      out.data.append(reinterpret_cast<const char*>(&p.second), sizeof(float));
    }
    response.outputs.push_back(std::move(out));
    const SubmissionMark mark = SubmissionBurst::Take();  // as HostConnection takes it
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back({member.model, rows});
      marks_.push_back(mark);
      if (held.count(member.model) != 0) {
        waiting_.push_back([done = std::move(done), response]() mutable { done(1, Status::Ok(), std::move(response)); });
        return;
      }
    }
    done(1, Status::Ok(), std::move(response));
  }

  // Answers every held call so far.
  void ReleaseHeld() {
    std::vector<std::function<void()>> answers_now;
    {
      std::lock_guard<std::mutex> lock(mu_);
      answers_now.swap(waiting_);
    }
    for (auto& answer : answers_now) answer();
  }
  // (member, rows) of every call, in order.
  std::vector<std::pair<std::string, int64_t>> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

  // The submission mark armed for each call (SubmissionBurst), in order.
  std::vector<SubmissionMark> marks() const {
    std::lock_guard<std::mutex> lock(mu_);
    return marks_;
  }

  std::map<std::string, std::pair<float, float>> answers;
  std::map<std::string, bool> held;

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<std::string, int64_t>> calls_;
  std::vector<SubmissionMark> marks_;
  std::vector<std::function<void()>> waiting_;
};

// The models the runner finds by name (overload rungs).
class MapCatalog : public ModelCatalog {
 public:
  const ModelConfig* Find(const std::string& name) const override {
    auto it = models.find(name);
    return it == models.end() ? nullptr : it->second;
  }
  std::vector<int64_t> ReadyVersions(const ModelConfig& model) const override { return model.ServedVersions(); }
  std::map<std::string, const ModelConfig*> models;
};

// An ensemble of three members; input FP32 [rows, 1], output FP32 [rows, 2].
ModelConfig Trio() {
  ModelConfig c;
  c.name = "trio";
  c.platform = "ensemble";
  c.max_batch_size = 8;
  c.inputs = {{"x", DataType::kFp32, {1}}};
  c.outputs = {{"p", DataType::kFp32, {2}}};
  c.ensemble.members = {{"a", 1.0, 0}, {"b", 1.0, 0}, {"c", 1.0, 0}};
  c.ensemble.combine = CombineRule::kMean;
  return c;
}

// The same members as a cascade "casc" of stages {a}, {b, c}: a row leaves
// at a stage whose members' mean is at least 0.9 sure.
ModelConfig TrioCascade() {
  ModelConfig c = Trio();
  c.name = "casc";
  c.ensemble.combine = CombineRule::kCascade;
  c.ensemble.stages = {{0}, {1, 2}};
  c.ensemble.exit_threshold = 0.9;
  return c;
}

// Where one request's answer lands; waited for on a condition.
struct Answer {
  std::mutex mu;
  std::condition_variable cv;
  int count = 0;
  Status status;
  InferResponse response;

  InferDone Done() {
    return [this](const Status& s, InferResponse r) {
      std::lock_guard<std::mutex> lock(mu);
      ++count;
      status = s;
      response = std::move(r);
      cv.notify_all();
    };
  }
  bool Wait(milliseconds timeout = milliseconds(5000)) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [&] { return count > 0; });
  }
  int answers() {
    std::lock_guard<std::mutex> lock(mu);
    return count;
  }
};

class EnsembleRunnerTest : public ::testing::Test {
 protected:
  EnsembleRunnerTest() {
    members_.answers = {{"a", {1, 0}}, {"b", {1, 0}}, {"c", {0, 1}}};
  }
  ~EnsembleRunnerTest() override { members_.ReleaseHeld(); }

  // A request of `rows` rows (values 0, 1, ...).
  std::shared_ptr<InferRequest> Request(const ModelConfig& model, int64_t rows) {
    inputs_.push_back(std::make_unique<std::vector<float>>());
    std::vector<float>* values = inputs_.back().get();
    for (int64_t r = 0; r < rows; ++r) values->push_back(static_cast<float>(r));
    auto request = std::make_shared<InferRequest>();
    request->model = &model;
    request->version = 1;
    InferInput in;
    in.spec = &model.inputs[0];
    in.datatype = DataType::kFp32;
    in.shape = {rows, 1};
    in.data = reinterpret_cast<const uint8_t*>(values->data());
    in.bytes = values->size() * sizeof(float);
    request->inputs.push_back(in);
    return request;
  }

  // Runs `request` with its deadline 5 ms away (nearer than a learnt rung
  // 0 of about 40 ms) and waits for its answer, which must be OK.
  void RunHurried(EnsembleRunner* runner, const std::shared_ptr<InferRequest>& request, Answer* answer) {
    request->deadline = std::chrono::steady_clock::now() + milliseconds(5);
    runner->Run(request, answer->Done());
    ASSERT_TRUE(answer->Wait());
    ASSERT_TRUE(answer->status.ok()) << answer->status.ToString();
  }

  // Runs one request of `rows` rows on `model` to its answer; only the
  // member calls it made are looked at.
  void RunToTheAnswer(const ModelConfig& model, int64_t rows) {
    EnsembleRunner runner(&members_, &catalog_);
    Answer answer;
    runner.Run(Request(model, rows), answer.Done());
    ASSERT_TRUE(answer.Wait());
  }

  // The member calls made after the first `before` calls.
  std::vector<std::pair<std::string, int64_t>> CallsSince(size_t before) const {
    const auto calls = members_.calls();
    return {calls.begin() + static_cast<long>(before), calls.end()};
  }

  static float At(const InferOutput& o, size_t i) {
    float v = 0;
    std::memcpy(&v, o.data.data() + i * sizeof(float), sizeof(float));
    return v;
  }

  FakeMembers members_;
  MapCatalog catalog_;
  std::vector<std::unique_ptr<std::vector<float>>> inputs_;
};

TEST_F(EnsembleRunnerTest, FanOutCallsEveryMemberOnceAndAnswersTheirMean) {
  const ModelConfig model = Trio();
  EnsembleRunner runner(&members_, &catalog_);
  Answer answer;
  runner.Run(Request(model, 2), answer.Done());
  ASSERT_TRUE(answer.Wait());
  EXPECT_EQ(answer.answers(), 1);
  ASSERT_TRUE(answer.status.ok()) << answer.status.ToString();
  EXPECT_EQ(members_.calls(), (std::vector<std::pair<std::string, int64_t>>{{"a", 2}, {"b", 2}, {"c", 2}}));
  ASSERT_FALSE(answer.response.outputs.empty());
  const InferOutput& p = answer.response.outputs[0];
  EXPECT_EQ(p.name, "p");
  EXPECT_EQ(p.datatype, DataType::kFp32);
  EXPECT_EQ(p.shape, (std::vector<int64_t>{2, 2}));
  for (size_t row = 0; row < 2; ++row) {
    EXPECT_FLOAT_EQ(At(p, 2 * row), 2.0f / 3) << "row " << row;
    EXPECT_FLOAT_EQ(At(p, 2 * row + 1), 1.0f / 3) << "row " << row;
  }
  ASSERT_NE(answer.response.ensemble, nullptr);
  EXPECT_EQ(answer.response.ensemble->members_used, 3);
  EXPECT_FALSE(answer.response.ensemble->degraded);
  EXPECT_EQ(answer.response.member_versions, "a:1,b:1,c:1");
}

// The fan-out's member calls are one submission burst: each carries the
// burst's number, all but the last say more follow; with a member timeout
// (the call may answer before every member is back) none is marked.
TEST_F(EnsembleRunnerTest, FanOutMarksItsMemberCallsAsOneBurstUnlessItMayAnswerEarly) {
  RunToTheAnswer(Trio(), 1);
  std::vector<SubmissionMark> marks = members_.marks();
  ASSERT_EQ(marks.size(), 3u);
  EXPECT_NE(marks[0].burst, 0u);
  for (size_t m = 0; m < 3; ++m) {
    EXPECT_EQ(marks[m].burst, marks[0].burst) << "member " << m;
    EXPECT_EQ(marks[m].more_follow, m < 2) << "member " << m;
  }
  EXPECT_EQ(SubmissionBurst::Take().burst, 0u) << "no mark left armed after the fan-out";

  ModelConfig timed = Trio();
  timed.ensemble.member_timeout_ms = 1000;
  RunToTheAnswer(timed, 1);
  marks = members_.marks();
  ASSERT_EQ(marks.size(), 6u);
  for (size_t m = 3; m < 6; ++m) EXPECT_EQ(marks[m].burst, 0u) << "member call " << m;
}

// Each stage of a cascade is a burst of its own.
TEST_F(EnsembleRunnerTest, EachCascadeStageIsABurst) {
  members_.answers["a"] = {0.6f, 0.4f};  // unsure: the rows go on to stage 1
  RunToTheAnswer(TrioCascade(), 2);
  const std::vector<SubmissionMark> marks = members_.marks();
  ASSERT_EQ(marks.size(), 3u);
  EXPECT_FALSE(marks[0].more_follow);  // stage 0's only call
  EXPECT_NE(marks[1].burst, 0u);
  EXPECT_NE(marks[1].burst, marks[0].burst);
  EXPECT_EQ(marks[2].burst, marks[1].burst);
  EXPECT_TRUE(marks[1].more_follow);
  EXPECT_FALSE(marks[2].more_follow);
}

TEST_F(EnsembleRunnerTest, BeyondMaxInFlightIsResourceExhaustedAndThePlaceComesBackAfterTheAnswer) {
  ModelConfig model = Trio();
  model.ensemble.max_in_flight = 1;
  members_.held = {{"c", true}};
  EnsembleRunner runner(&members_, &catalog_);
  Answer first;
  runner.Run(Request(model, 1), first.Done());
  EXPECT_EQ(first.answers(), 0) << "member c has not answered yet";

  Answer refused;
  runner.Run(Request(model, 1), refused.Done());
  ASSERT_EQ(refused.answers(), 1) << "the refusal should not wait";
  EXPECT_EQ(refused.status.code(), StatusCode::kResourceExhausted) << refused.status.ToString();
  EXPECT_NE(refused.status.message().find("'trio'"), std::string::npos) << refused.status.message();
  EXPECT_NE(refused.status.message().find("max_in_flight"), std::string::npos) << refused.status.message();
  EXPECT_EQ(members_.calls().size(), 3u) << "a refused request reached members";

  members_.ReleaseHeld();
  ASSERT_TRUE(first.Wait());
  EXPECT_TRUE(first.status.ok()) << first.status.ToString();

  members_.held.clear();
  Answer again;
  runner.Run(Request(model, 1), again.Done());
  ASSERT_TRUE(again.Wait());
  EXPECT_TRUE(again.status.ok()) << "the place was not given back: " << again.status.ToString();
}

TEST_F(EnsembleRunnerTest, MemberTimeoutAnswersFromTheQuorumWithoutTheSlowMember) {
  ModelConfig model = Trio();
  model.ensemble.min_members = 2;
  model.ensemble.member_timeout_ms = 20;
  members_.held = {{"c", true}};
  EnsembleRunner runner(&members_, &catalog_);
  Answer answer;
  runner.Run(Request(model, 1), answer.Done());
  // Only the timeout can answer: c never does while the test waits.
  ASSERT_TRUE(answer.Wait()) << "no answer from the quorum after member_timeout_ms";
  ASSERT_TRUE(answer.status.ok()) << answer.status.ToString();
  ASSERT_NE(answer.response.ensemble, nullptr);
  EXPECT_EQ(answer.response.ensemble->members_used, 2);
  EXPECT_TRUE(answer.response.ensemble->degraded);
  EXPECT_FLOAT_EQ(At(answer.response.outputs[0], 0), 1.0f) << "the mean of a and b alone";
  EXPECT_EQ(answer.response.member_versions, "a:1,b:1");
  members_.ReleaseHeld();  // the straggler is dropped
  EXPECT_EQ(answer.answers(), 1);
}

TEST_F(EnsembleRunnerTest, WithoutMemberTimeoutTheQuorumStillWaitsForTheSlowMember) {
  ModelConfig model = Trio();
  model.ensemble.min_members = 2;
  members_.held = {{"c", true}};
  EnsembleRunner runner(&members_, &catalog_);
  Answer answer;
  runner.Run(Request(model, 1), answer.Done());
  EXPECT_FALSE(answer.Wait(milliseconds(50)));
  members_.ReleaseHeld();
  ASSERT_TRUE(answer.Wait());
  ASSERT_TRUE(answer.status.ok()) << answer.status.ToString();
  EXPECT_EQ(answer.response.ensemble->members_used, 3);
}

// A cascade of stages {a}, {b, c}: with a confident first member (0.95 >=
// 0.9) every row leaves after stage 0 and b, c are never called; with an
// unsure one (0.6) the rows go on to stage 1.
TEST_F(EnsembleRunnerTest, CascadeStopsAtTheStageWhereItsRowsAreDecided) {
  const ModelConfig model = TrioCascade();
  EnsembleRunner runner(&members_, &catalog_);

  members_.answers["a"] = {0.95f, 0.05f};
  Answer decided;
  runner.Run(Request(model, 3), decided.Done());
  ASSERT_TRUE(decided.Wait());
  ASSERT_TRUE(decided.status.ok()) << decided.status.ToString();
  EXPECT_EQ(members_.calls(), (std::vector<std::pair<std::string, int64_t>>{{"a", 3}}));
  EXPECT_EQ(decided.response.outputs[0].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_FLOAT_EQ(At(decided.response.outputs[0], 0), 0.95f);
  ASSERT_NE(decided.response.cascade, nullptr);
  EXPECT_EQ(decided.response.cascade->stages_used, 1);
  EXPECT_EQ(decided.response.cascade->member_rows_saved, 6);

  members_.answers["a"] = {0.6f, 0.4f};
  Answer undecided;
  runner.Run(Request(model, 3), undecided.Done());
  ASSERT_TRUE(undecided.Wait());
  ASSERT_TRUE(undecided.status.ok()) << undecided.status.ToString();
  EXPECT_EQ(members_.calls(),
            (std::vector<std::pair<std::string, int64_t>>{{"a", 3}, {"a", 3}, {"b", 3}, {"c", 3}}));
  ASSERT_NE(undecided.response.cascade, nullptr);
  EXPECT_EQ(undecided.response.cascade->stages_used, 2);
  // Each row: the mean of a (0.6), b (1) and c (0).
  EXPECT_FLOAT_EQ(At(undecided.response.outputs[0], 0), (0.6f + 1.0f + 0.0f) / 3);
}

// The trio with a ladder: itself, then member a alone (a single model with
// the ensemble's tensors).
struct Laddered {
  ModelConfig trio = Trio();
  ModelConfig a;
  Laddered() {
    trio.overload.latency_target_ms = 1000;
    trio.overload.ladder = {{"trio", 0.9}, {"a", 0.8}};
    a.name = "a";
    a.platform = "torchscript";
    a.max_batch_size = 8;
    a.inputs = trio.inputs;
    a.outputs = trio.outputs;
    a.versions = {1};
  }
};

// Requests of the laddered trio answered in about 40 ms each (member c
// held): rung 0's service time learnt (a rung's first two answers are cold,
// not learnt: three measured). `last` gets the third answer.
void LearnRungZero(EnsembleRunner* runner, FakeMembers* members,
                   const std::function<std::shared_ptr<InferRequest>()>& request, Answer* last) {
  Answer cold[2];
  for (Answer* answer : {&cold[0], &cold[1], last}) {
    members->held = {{"c", true}};
    runner->Run(request(), answer->Done());
    std::this_thread::sleep_for(milliseconds(40));
    members->ReleaseHeld();
    ASSERT_TRUE(answer->Wait());
    members->held.clear();
  }
}

// Rung 0's latency measured (about 40 ms: member c held), then a request
// whose deadline is 5 ms away is answered by rung 1 (member a alone), and
// says so; the same request marked exact is answered by the whole trio.
TEST_F(EnsembleRunnerTest, LadderAnswersANearDeadlineFromACheaperRungUnlessExact) {
  Laddered models;
  catalog_.models = {{"trio", &models.trio}, {"a", &models.a}};
  EnsembleRunner runner(&members_, &catalog_);

  Answer slow;
  ASSERT_NO_FATAL_FAILURE(LearnRungZero(&runner, &members_, [&] { return Request(models.trio, 1); }, &slow));
  ASSERT_TRUE(slow.status.ok()) << slow.status.ToString();
  EXPECT_EQ(slow.response.served_by, "trio");
  EXPECT_DOUBLE_EQ(slow.response.served_accuracy, 0.9);
  ASSERT_GE(runner.ladder().ControllerFor(models.trio)->ServiceMs(0), 30.0);

  const size_t calls_before = members_.calls().size();
  Answer cheap;
  ASSERT_NO_FATAL_FAILURE(RunHurried(&runner, Request(models.trio, 2), &cheap));
  EXPECT_EQ(cheap.response.served_by, "a");
  EXPECT_DOUBLE_EQ(cheap.response.served_accuracy, 0.8);
  EXPECT_EQ(cheap.response.member_versions, "a:1");
  EXPECT_EQ(CallsSince(calls_before), (std::vector<std::pair<std::string, int64_t>>{{"a", 2}}));
  EXPECT_FLOAT_EQ(At(cheap.response.outputs[0], 0), 1.0f) << "member a's own answer";

  std::shared_ptr<InferRequest> exact = Request(models.trio, 1);
  exact->deadline = std::chrono::steady_clock::now() + milliseconds(5);
  exact->exact = true;
  Answer full;
  runner.Run(exact, full.Done());
  ASSERT_TRUE(full.Wait());
  ASSERT_TRUE(full.status.ok()) << full.status.ToString();
  EXPECT_EQ(full.response.served_by, "trio");
  EXPECT_EQ(full.response.member_versions, "a:1,b:1,c:1");
}

// A cascade rung with its own exit_threshold: the cascade answers with the
// rung's threshold, not its config's, and the answer names the rung so.
TEST_F(EnsembleRunnerTest, LadderServesACascadeRungAtTheRungsExitThreshold) {
  Laddered models;
  const ModelConfig casc = TrioCascade();  // member a's 0.7 alone would not decide a row
  models.trio.overload.ladder = {{"trio", 0.9}, {"casc", 0.85, 0.6}};
  catalog_.models = {{"trio", &models.trio}, {"casc", &casc}};
  EnsembleRunner runner(&members_, &catalog_);
  members_.answers["a"] = {0.7f, 0.3f};
  Answer slow;
  ASSERT_NO_FATAL_FAILURE(LearnRungZero(&runner, &members_, [&] { return Request(models.trio, 1); }, &slow));

  const size_t calls_before = members_.calls().size();
  Answer answer;
  ASSERT_NO_FATAL_FAILURE(RunHurried(&runner, Request(models.trio, 2), &answer));
  EXPECT_EQ(answer.response.served_by, "casc@0.6");
  EXPECT_DOUBLE_EQ(answer.response.served_accuracy, 0.85);
  EXPECT_EQ(CallsSince(calls_before), (std::vector<std::pair<std::string, int64_t>>{{"a", 2}}))
      << "at the rung's threshold 0.6, member a's 0.7 decides both rows in the first stage";
  EXPECT_FLOAT_EQ(At(answer.response.outputs[0], 0), 0.7f);
}

// A rung that is not loaded when chosen is skipped: the ensemble answers.
TEST_F(EnsembleRunnerTest, LadderAnswersInFullWhenTheChosenRungIsNotLoaded) {
  Laddered models;
  catalog_.models = {{"trio", &models.trio}};
  EnsembleRunner runner(&members_, &catalog_);
  Answer slow;
  ASSERT_NO_FATAL_FAILURE(LearnRungZero(&runner, &members_, [&] { return Request(models.trio, 1); }, &slow));

  Answer answer;
  ASSERT_NO_FATAL_FAILURE(RunHurried(&runner, Request(models.trio, 1), &answer));
  EXPECT_EQ(answer.response.served_by, "trio");
  EXPECT_EQ(answer.response.member_versions, "a:1,b:1,c:1");
}

}  // namespace
}  // namespace es
