// OverloadController (server/ensemble/overload_controller.h) on a fake clock:
// service times learnt from answers alone, moving down under a queue to the
// richest rung predicted within the budget and back up only after the dwell
// time, the two priority classes, deadlines, exact requests, shedding as the
// last resort, the work in flight, and the parallelism learnt from answers
// that started behind work.
#include "server/ensemble/overload_controller.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace es {
namespace {

using Clock = OverloadController::Clock;
using Ticket = OverloadController::Ticket;
constexpr size_t kShed = OverloadController::kShed;

constexpr double kTargetMs = 40;
constexpr double kLowerBudgetMs = kTargetMs * 0.8;  // lower_priority_share

OverloadSpec Spec() {
  OverloadSpec spec;
  spec.latency_target_ms = kTargetMs;
  spec.dwell_ms = 1000;
  spec.lower_priority_share = 0.8;
  spec.ladder = {{"ens", 0.94}, {"cascade", 0.92}, {"mlp", 0.88}};
  return spec;
}

class OverloadControllerTest : public ::testing::Test {
 public:
  Ticket Admit(int priority = 0) {
    OverloadController::Ask ask;
    ask.priority = priority;
    return controller_.Admit(ask);
  }
  // A request whose deadline is `ms` from now.
  Ticket AdmitWithin(int ms, int priority = 0) {
    OverloadController::Ask ask;
    ask.priority = priority;
    ask.deadline = now_ + std::chrono::milliseconds(ms);
    return controller_.Admit(ask);
  }
  Ticket AdmitExact() {
    OverloadController::Ask ask;
    ask.exact = true;
    return controller_.Admit(ask);
  }
  void Advance(int ms) { now_ += std::chrono::milliseconds(ms); }
  std::vector<double> Predictions() const {
    std::vector<double> p;
    for (size_t r = 0; r < controller_.rungs(); ++r) p.push_back(controller_.PredictMs(r));
    return p;
  }

 protected:

  // s_0 = 30, s_1 = 10, s_2 = 2 ms (or `s2`), each measured by one request
  // alone; the cheaper rungs are reached by deadlines nearer than the richer
  // ones take.
  void MeasureRungs(int s2 = 2) {
    Ticket t = Admit();
    ASSERT_EQ(t.rung, 0u);
    Advance(30);
    controller_.Finish(t, true);
    t = AdmitWithin(20);
    ASSERT_EQ(t.rung, 1u);
    Advance(10);
    controller_.Finish(t, true);
    t = AdmitWithin(5);
    ASSERT_EQ(t.rung, 2u);
    Advance(s2);
    controller_.Finish(t, true);
    ASSERT_DOUBLE_EQ(controller_.ServiceMs(0), 30);
    ASSERT_DOUBLE_EQ(controller_.ServiceMs(1), 10);
    ASSERT_DOUBLE_EQ(controller_.ServiceMs(2), s2);
    ASSERT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
  }

  Clock::time_point now_ = Clock::time_point{} + std::chrono::hours(1);
  OverloadController controller_{Spec(), [this] { return now_; }};
};

TEST_F(OverloadControllerTest, UnmeasuredLadderServesRungZeroAndMeasuresIt) {
  EXPECT_EQ(controller_.rungs(), 3u);
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(controller_.ServiceMs(r), 0) << "rung " << r;
  const Ticket a = Admit();
  const Ticket b = Admit(1);
  EXPECT_EQ(a.rung, 0u);
  EXPECT_EQ(b.rung, 0u);
  EXPECT_EQ(a.predicted_ms, 0);
  Advance(30);
  controller_.Finish(a, true);
  controller_.Finish(b, true);
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(0), 30);
  EXPECT_DOUBLE_EQ(controller_.PredictMs(0), 30);
  EXPECT_EQ(controller_.ServiceMs(1), 0) << "only the rung that answered is measured";
}

TEST_F(OverloadControllerTest, LaterAnswersAloneMoveTheServiceTimeGradually) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  Ticket t = AdmitExact();  // rung 0, whatever its prediction
  Advance(50);
  controller_.Finish(t, true);
  EXPECT_GT(controller_.ServiceMs(0), 30);
  EXPECT_LT(controller_.ServiceMs(0), 50);
  const double before = controller_.ServiceMs(0);
  t = AdmitExact();
  ASSERT_EQ(t.work_ahead_ms, 0);
  Advance(20);
  controller_.Finish(t, true);
  EXPECT_LT(controller_.ServiceMs(0), before) << "a faster answer lowers it";
}

TEST_F(OverloadControllerTest, AnswerFasterThanTheServiceTimeBehindWorkLowersIt) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  const Ticket first = AdmitExact();
  const Ticket behind = AdmitExact();
  ASSERT_DOUBLE_EQ(behind.work_ahead_ms, 30);
  Advance(20);  // faster than rung 0 alone, although it started behind work
  controller_.Finish(behind, true);
  EXPECT_LT(controller_.ServiceMs(0), 30);
  controller_.Finish(first, false);
}

TEST_F(OverloadControllerTest, QueueMovesNewRequestsToCheaperRungs) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  std::vector<size_t> rungs(4);
  for (size_t& rung : rungs) rung = Admit().rung;
  // W = 0: rung 0 (30 <= 32); then W = 30: 60, 40 > 32, rung 2's 32 fits.
  EXPECT_EQ(rungs, (std::vector<size_t>{0, 2, 2, 2}));
  EXPECT_EQ(controller_.CurrentRung(0), 2u);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 30 + 2 + 2 + 2);
  EXPECT_EQ(controller_.CurrentRung(1), 0u) << "the classes move separately";
}

// Under growing load each request of `priority` gets the richest rung
// predicted within its class's budget (the lower class takes the cheapest
// rung up to the whole target); `expected`: the rungs until the first shed.
void ExpectRichestWithinBudget(OverloadControllerTest* test, int priority, const std::vector<size_t>& expected) {
  const double budget = priority == 1 ? kTargetMs : kLowerBudgetMs;
  std::vector<size_t> seen;
  for (int i = 0; i < 20; ++i) {
    const std::vector<double> before = test->Predictions();
    const Ticket t = test->Admit(priority);
    if (t.rung == kShed) break;
    seen.push_back(t.rung);
    EXPECT_DOUBLE_EQ(t.predicted_ms, before[t.rung]);
    const double limit = t.rung + 1 < before.size() ? budget : kTargetMs;
    EXPECT_LE(before[t.rung], limit) << "request " << i;
    for (size_t richer = 0; richer < t.rung; ++richer) {
      EXPECT_GT(before[richer], budget) << "request " << i << " skipped rung " << richer;
    }
  }
  EXPECT_EQ(seen, expected);
}

TEST_F(OverloadControllerTest, HighestPriorityGetsTheRichestRungWithinTheTarget) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  // W = 0: 30 fits; W = 30: rung 0 at 60 misses, rung 1 at 40 fits; then
  // W = 40: even rung 2 at 42 misses.
  ExpectRichestWithinBudget(this, 1, {0, 1});
}

TEST_F(OverloadControllerTest, LowerPriorityGetsTheRichestRungWithinItsShare) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  // Budget 32: W = 0: 30 fits; W = 30: only rung 2 at 32 does; past that
  // rung 2 serves up to the whole target (W = 30 + 5 * 2).
  ExpectRichestWithinBudget(this, 0, {0, 2, 2, 2, 2, 2});
}

TEST_F(OverloadControllerTest, MovesBackUpOnlyAfterTheDwellTime) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  const Clock::time_point moved = now_;
  const Ticket a = Admit(1);
  const Ticket b = Admit(1);
  ASSERT_EQ(a.rung, 0u);
  ASSERT_EQ(b.rung, 1u);  // moved down at `moved`
  Advance(30);
  controller_.Finish(a, true);
  Advance(10);
  controller_.Finish(b, true);
  ASSERT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
  ASSERT_LE(controller_.PredictMs(0), kTargetMs) << "rung 0 fits again";

  // Drained, but within the dwell time: the class stays down.
  for (int at_ms : {40, 500, 999}) {
    now_ = moved + std::chrono::milliseconds(at_ms);
    const Ticket t = Admit(1);
    EXPECT_EQ(t.rung, 1u) << at_ms << " ms after the move down";
    controller_.Finish(t, false);
  }
  now_ = moved + std::chrono::milliseconds(1000);
  const Ticket t = Admit(1);
  EXPECT_EQ(t.rung, 0u);
  EXPECT_EQ(controller_.CurrentRung(1), 0u);
  controller_.Finish(t, false);
}

TEST_F(OverloadControllerTest, HighestPriorityKeepsTheRichRungLonger) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  const Ticket load = AdmitWithin(20);  // rung 1: W = 10
  ASSERT_EQ(load.rung, 1u);
  // Rung 0 is predicted at 40: within the target, over the lower share (32).
  ASSERT_DOUBLE_EQ(controller_.PredictMs(0), 40);
  const Ticket high = Admit(1);
  EXPECT_EQ(high.rung, 0u);
  controller_.Finish(high, false);
  for (int priority : {0, 2}) {
    const Ticket low = Admit(priority);
    EXPECT_EQ(low.rung, 1u) << "priority " << priority;
    EXPECT_LE(low.predicted_ms, kLowerBudgetMs);
    controller_.Finish(low, false);
  }
  controller_.Finish(load, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
}

TEST_F(OverloadControllerTest, NearDeadlinePicksTheRichestRungWithinIt) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  Ticket t = AdmitWithin(15);  // rung 0: 30 > 15; rung 1: 10 fits
  EXPECT_EQ(t.rung, 1u);
  EXPECT_LE(t.predicted_ms, 15);
  controller_.Finish(t, false);
  t = AdmitWithin(100);  // a far deadline changes nothing
  EXPECT_EQ(t.rung, 0u);
  controller_.Finish(t, false);
  t = AdmitWithin(1);  // nothing fits: the cheapest, not refused
  EXPECT_EQ(t.rung, 2u);
  controller_.Finish(t, false);
  EXPECT_EQ(controller_.CurrentRung(0), 0u) << "a deadline does not move the class";
}

TEST_F(OverloadControllerTest, DeadlineNeverMakesARequestRicherThanTheLoadAllows) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_EQ(Admit().rung, 0u);  // W = 30: the lower class moves to rung 2
  const Ticket t = AdmitWithin(60 * 60 * 1000);
  EXPECT_EQ(t.rung, 2u);
}

TEST_F(OverloadControllerTest, ExactIsAlwaysRungZeroAndNeverShed) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  std::vector<Ticket> tickets;
  while (tickets.size() < 50) {
    tickets.push_back(Admit());
    if (tickets.back().rung == kShed) break;
  }
  ASSERT_EQ(tickets.back().rung, kShed) << "the load sheds ordinary requests";
  tickets.pop_back();
  for (int i = 0; i < 10; ++i) {
    const Ticket t = AdmitExact();
    EXPECT_EQ(t.rung, 0u);
    EXPECT_GT(t.predicted_ms, kTargetMs);
    tickets.push_back(t);
  }
  EXPECT_GT(controller_.WorkInFlightMs(), 10 * 30) << "exact requests count their work";
  for (const Ticket& t : tickets) controller_.Finish(t, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
}

TEST_F(OverloadControllerTest, ShedsOnlyWhenTheCheapestRungMissesTheTarget) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  std::vector<Ticket> admitted;
  Ticket shed;
  for (int i = 0; i < 50; ++i) {
    const double cheapest = controller_.PredictMs(2);
    const Ticket t = Admit();
    if (t.rung == kShed) {
      EXPECT_GT(cheapest, kTargetMs);
      shed = t;
      break;
    }
    EXPECT_LE(cheapest, kTargetMs) << "served while the cheapest rung meets the target";
    admitted.push_back(t);
  }
  ASSERT_EQ(shed.rung, kShed);
  // W = 30 + 5 * 2 = 40: rung 2 would take 42.
  EXPECT_EQ(admitted.size(), 6u);
  EXPECT_EQ(Admit(1).rung, kShed) << "the highest priority is shed too: nothing meets the target";

  // Finishing a shed ticket changes nothing.
  const double work = controller_.WorkInFlightMs();
  Advance(5);
  controller_.Finish(shed, true);
  controller_.Finish(shed, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), work);
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(2), 2);

  // Every admitted ticket finished, well or not: nothing left in flight.
  for (size_t i = 0; i < admitted.size(); ++i) controller_.Finish(admitted[i], i % 2 == 0);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
  EXPECT_NE(Admit().rung, kShed);
}

TEST_F(OverloadControllerTest, FailedAnswersLeaveOnlyTheirWork) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  const Ticket t = Admit();
  ASSERT_DOUBLE_EQ(controller_.WorkInFlightMs(), 30);
  Advance(500);
  controller_.Finish(t, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(0), 30) << "a failure's latency is not learnt";
}

// Two exact requests at once: the first alone (30 ms), the second behind the
// first's 30 ms of work. While it takes s + W (one at a time) the machine's
// parallelism is 1; once it takes s + W/2, it approaches 2.
TEST_F(OverloadControllerTest, ParallelismIsLearntFromAnswersBehindWork) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  EXPECT_DOUBLE_EQ(controller_.Parallelism(), 1);
  auto round = [&](int behind_latency_ms) {
    const Ticket alone = AdmitExact();
    const Ticket behind = AdmitExact();
    ASSERT_DOUBLE_EQ(behind.work_ahead_ms, 30);
    Advance(30);
    controller_.Finish(alone, true);
    Advance(behind_latency_ms - 30);
    controller_.Finish(behind, true);
  };
  for (int i = 0; i < 5; ++i) round(30 + 30);
  EXPECT_NEAR(controller_.Parallelism(), 1, 1e-9);
  double last = controller_.Parallelism();
  for (int i = 0; i < 30; ++i) {
    round(30 + 15);
    EXPECT_GT(controller_.Parallelism(), last) << "round " << i;
    last = controller_.Parallelism();
  }
  EXPECT_NEAR(controller_.Parallelism(), 2, 0.05);
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(0), 30);
  // The prediction uses it: W / P behind rung 0's own 30 ms.
  const Ticket t = AdmitExact();
  EXPECT_NEAR(controller_.PredictMs(0), 30 + 30 / 2.0, 0.5);
  controller_.Finish(t, false);
}

// Service times need not fall along the ladder: with rung 2 measured
// slower (12 ms) than rung 1 (10 ms), a load where rung 1 still meets the
// target but rung 2 would not serves at rung 1 instead of shedding.
TEST_F(OverloadControllerTest, ALadderMeasuredOutOfOrderServesItsFastestRungBeforeShedding) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs(12));
  // 30 ms of work in flight: one exact request at rung 0.
  const Ticket load = AdmitExact();
  ASSERT_DOUBLE_EQ(controller_.WorkInFlightMs(), 30);
  // The lower class's budget is 32: no rung is within it (60/40/42), and
  // the fastest, rung 1, still meets the whole target.
  const Ticket t = Admit();
  EXPECT_EQ(t.rung, 1u) << "predictions 0/1/2: " << Predictions()[0] << "/" << Predictions()[1] << "/"
                        << Predictions()[2];
  controller_.Finish(t, false);
  controller_.Finish(load, false);
}

}  // namespace
}  // namespace es
