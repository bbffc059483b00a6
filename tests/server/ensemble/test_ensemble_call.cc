// EnsembleCall (server/ensemble/ensemble_call.h): when an ensemble answers from its
// members' answers, driven by hand (no hosts): every member, a quorum
// (min_members) after a failure or after member_timeout_ms, the errors when
// the quorum cannot be met; and CallbackTimer (server/core/callback_timer.h),
// which fires the timeouts.
#include "server/ensemble/ensemble_call.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <thread>

#include "server/core/callback_timer.h"

namespace es {
namespace {

using std::chrono::milliseconds;

// An ensemble of three members with one FP32 [1, 2] output.
ModelConfig Ensemble(int64_t min_members, CombineRule rule = CombineRule::kMean) {
  ModelConfig c;
  c.name = "trio";
  c.platform = "ensemble";
  c.max_batch_size = 4;
  c.outputs = {{"p", DataType::kFp32, {2}}};
  c.ensemble.members = {{"a", 1.0, 0}, {"b", 1.0, 0}, {"c", 2.0, 0}};
  c.ensemble.combine = rule;
  c.ensemble.min_members = min_members;
  return c;
}

InferResponse Answer(float p0, float p1) {
  InferResponse r;
  std::string bytes(2 * sizeof(float), '\0');
  std::memcpy(bytes.data(), &p0, sizeof(float));
  std::memcpy(bytes.data() + sizeof(float), &p1, sizeof(float));
  r.outputs.push_back({"p", DataType::kFp32, {1, 2}, bytes});
  return r;
}

float At(const InferOutput& o, int i) {
  float v;
  std::memcpy(&v, o.data.data() + i * sizeof(float), sizeof(float));
  return v;
}

struct Outcome {
  int answers = 0;
  int released = 0;
  Status status;
  InferResponse response;
};

struct Harness {
  explicit Harness(const ModelConfig& config, bool member_outputs = false) {
    auto request = std::make_shared<InferRequest>();
    request->model = &config;
    request->return_member_outputs = member_outputs;
    call = std::make_shared<EnsembleCall>(
        request,
        [this](const Status& s, InferResponse r) {
          ++out.answers;
          out.status = s;
          out.response = std::move(r);
        },
        [this] { ++out.released; });
  }
  Outcome out;
  std::shared_ptr<EnsembleCall> call;
};

TEST(EnsembleCallTest, WithoutQuorumEveryMemberIsWaitedForAndCombined) {
  ModelConfig config = Ensemble(0);
  Harness h(config);
  h.call->MemberAnswered(0, 1, Status::Ok(), Answer(1, 0));
  h.call->MemberAnswered(2, 1, Status::Ok(), Answer(0, 1));
  EXPECT_EQ(h.out.answers, 0);
  h.call->MemberAnswered(1, 1, Status::Ok(), Answer(1, 0));
  ASSERT_EQ(h.out.answers, 1);
  ASSERT_TRUE(h.out.status.ok()) << h.out.status.ToString();
  EXPECT_EQ(h.out.released, 1);
  EXPECT_FLOAT_EQ(At(h.out.response.outputs[0], 0), 2.0f / 3);
  ASSERT_NE(h.out.response.ensemble, nullptr);
  EXPECT_EQ(h.out.response.ensemble->members_used, 3);
  EXPECT_FALSE(h.out.response.ensemble->degraded);
  EXPECT_EQ(h.out.response.member_versions, "a:1,b:1,c:1");
}

TEST(EnsembleCallTest, WithoutQuorumAFailedMemberFailsTheRequestNamingIt) {
  ModelConfig config = Ensemble(0);
  Harness h(config);
  h.call->MemberAnswered(1, 1, Status::Unavailable("host cpu1 is down"), {});
  h.call->MemberAnswered(0, 1, Status::Ok(), Answer(1, 0));
  EXPECT_EQ(h.out.answers, 0);  // a failure alone does not answer: the others still compute
  h.call->MemberAnswered(2, 1, Status::Ok(), Answer(1, 0));
  ASSERT_EQ(h.out.answers, 1);
  EXPECT_EQ(h.out.status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(h.out.status.message(), "ensemble 'trio' member 'b': host cpu1 is down");
  EXPECT_EQ(h.out.released, 1);
}

TEST(EnsembleCallTest, AQuorumAnswersWithoutAFailedMemberReweighted) {
  ModelConfig config = Ensemble(2, CombineRule::kWeightedMean);
  Harness h(config, /*member_outputs=*/true);
  h.call->MemberAnswered(0, 1, Status::Ok(), Answer(1, 0));
  h.call->MemberAnswered(1, 1, Status::Unavailable("host cpu1 is down"), {});
  EXPECT_EQ(h.out.answers, 0);  // c may still answer: wait for it
  h.call->MemberAnswered(2, 1, Status::Ok(), Answer(0, 1));
  ASSERT_EQ(h.out.answers, 1);
  ASSERT_TRUE(h.out.status.ok()) << h.out.status.ToString();
  // Weights 1 (a) and 2 (c), re-normalised over the two: 1/3 and 2/3.
  EXPECT_FLOAT_EQ(At(h.out.response.outputs[0], 0), 1.0f / 3);
  EXPECT_FLOAT_EQ(At(h.out.response.outputs[0], 1), 2.0f / 3);
  const EnsembleReport& report = *h.out.response.ensemble;
  EXPECT_EQ(report.members_used, 2);
  EXPECT_TRUE(report.degraded);
  ASSERT_EQ(report.members.size(), 3u);
  EXPECT_TRUE(report.members[0].used);
  EXPECT_FALSE(report.members[1].used);
  EXPECT_GT(report.members[1].latency_ns, 0u);  // it answered (an error)
  // Only the members used are in member_versions and the member outputs.
  EXPECT_EQ(h.out.response.member_versions, "a:1,c:1");
  std::vector<std::string> names;
  for (const auto& o : h.out.response.outputs) names.push_back(o.name);
  EXPECT_EQ(names, (std::vector<std::string>{"p", "a.p", "c.p"}));
}

TEST(EnsembleCallTest, WhenTheQuorumCannotBeMetEveryFailureIsNamed) {
  ModelConfig config = Ensemble(2);
  Harness h(config);
  h.call->MemberAnswered(0, 1, Status::Unavailable("host cpu0 is down"), {});
  EXPECT_EQ(h.out.answers, 0);
  h.call->MemberAnswered(2, 1, Status::DeadlineExceeded("too slow"), {});
  EXPECT_EQ(h.out.answers, 0);  // b is still computing: waited for, unless member_timeout_ms passes
  h.call->TimedOut();
  ASSERT_EQ(h.out.answers, 1);  // b alone cannot make 2
  EXPECT_EQ(h.out.status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(h.out.status.message(),
            "ensemble 'trio': 2 of 3 members failed, fewer than min_members 2 can answer; "
            "member 'a': host cpu0 is down; member 'c': too slow");
  EXPECT_EQ(h.out.released, 0);  // b still holds the admission slot
  h.call->MemberAnswered(1, 1, Status::Ok(), Answer(1, 0));
  EXPECT_EQ(h.out.answers, 1);
  EXPECT_EQ(h.out.released, 1);
}

TEST(EnsembleCallTest, AfterTheMemberTimeoutTheQuorumAnswersWithoutTheSlowMember) {
  ModelConfig config = Ensemble(2);
  Harness h(config);
  h.call->MemberAnswered(0, 1, Status::Ok(), Answer(1, 0));
  h.call->TimedOut();
  EXPECT_EQ(h.out.answers, 0);  // one member is not a quorum of two: keep waiting
  h.call->MemberAnswered(2, 1, Status::Ok(), Answer(0, 1));
  ASSERT_EQ(h.out.answers, 1);  // the quorum, past the timeout: b is not waited for
  ASSERT_TRUE(h.out.status.ok());
  EXPECT_EQ(h.out.response.ensemble->members_used, 2);
  EXPECT_TRUE(h.out.response.ensemble->degraded);
  EXPECT_EQ(h.out.response.ensemble->members[1].latency_ns, 0u);  // b had not answered
  EXPECT_EQ(h.out.released, 0);  // b, still computing, keeps the admission slot
  h.call->MemberAnswered(1, 1, Status::Ok(), Answer(1, 0));  // late: dropped
  EXPECT_EQ(h.out.answers, 1);
  EXPECT_EQ(h.out.released, 1);
}

TEST(EnsembleCallTest, ATimeoutWithTheQuorumInAnswersAtOnce) {
  ModelConfig config = Ensemble(2);
  Harness h(config);
  h.call->MemberAnswered(0, 1, Status::Ok(), Answer(1, 0));
  h.call->MemberAnswered(1, 1, Status::Ok(), Answer(1, 0));
  EXPECT_EQ(h.out.answers, 0);  // before the timeout every member is waited for
  h.call->TimedOut();
  ASSERT_EQ(h.out.answers, 1);
  EXPECT_EQ(h.out.response.ensemble->members_used, 2);
}

TEST(EnsembleCallTest, AMemberAnsweringTwiceCountsOnce) {
  ModelConfig config = Ensemble(2);
  Harness h(config);
  h.call->MemberAnswered(0, 1, Status::Ok(), Answer(1, 0));
  h.call->MemberAnswered(0, 1, Status::Ok(), Answer(1, 0));
  h.call->TimedOut();
  EXPECT_EQ(h.out.answers, 0);
}

TEST(CallbackTimerTest, RunsCallbacksInTheOrderOfTheirMomentsNeverEarly) {
  CallbackTimer timer;
  std::mutex mu;
  std::vector<int> order;
  std::atomic<int> early{0};
  const auto now = CallbackTimer::Clock::now();
  for (int k : {3, 1, 2}) {
    const auto when = now + milliseconds(30 * k);
    timer.Schedule(when, [&, k, when] {
      if (CallbackTimer::Clock::now() < when) early.fetch_add(1);
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(k);
    });
  }
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (order.size() == 3) break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(early.load(), 0);
}

TEST(CallbackTimerTest, PendingCallbacksAreDroppedAtDestruction) {
  std::atomic<int> ran{0};
  {
    CallbackTimer timer;
    timer.Schedule(CallbackTimer::Clock::now() + std::chrono::hours(1), [&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 0);
}

}  // namespace
}  // namespace es
