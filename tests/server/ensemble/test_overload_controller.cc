// OverloadController (server/ensemble/overload_controller.h) on a fake clock:
// service times learnt from answers alone (a faster one lowers it by half;
// a cheap rung's first answer behind work at most a measured richer rung's),
// moving down under a queue to the richest rung predicted within the budget
// (a cheaper one before a richer one)
// and back up only after the dwell time, the two priority classes,
// deadlines, exact requests, shedding as the last resort (when no rung meets
// the target; the fallback is the fastest rung, not the last), the work in
// flight, the parallelism P_r learnt per rung from that rung's answers that
// started behind work (P_0 = 1 and P_r = 1024 for the cheap rungs until
// then; P_0 never above 1), the probes that measure a richer rung again
// once per dwell, and the rungs held off while the arrival rate is well
// past what they carried, and each rung's tail ratio (the p99 of its
// answers' latency over their prediction) in the choice of a rung, its usual
// tail (the 90th percentile) in a class's stay while few of its answers were
// late.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <tuple>
#include <utility>
#include <vector>

#include "server/ensemble/overload_controller.h"

namespace es {
namespace {

using Clock = OverloadController::Clock;
using Ticket = OverloadController::Ticket;
constexpr size_t kShed = OverloadController::kShed;

constexpr double kTargetMs = 40;
constexpr double kLowerBudgetMs = kTargetMs * 0.8;  // lower_priority_share
constexpr double kMaxParallelism = 1024;            // a cheap rung's P before it answered behind work

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
  Clock::time_point Now() const { return now_; }
  void Finish(const Ticket& t, bool ok) { controller_.Finish(t, ok); }
  // At each of `offsets_ms` after `from`, a request of `priority` gets
  // `rung` and is no probe (within a dwell time: no move, no probe).
  void ExpectHeldWithoutProbe(Clock::time_point from, std::initializer_list<int> offsets_ms, size_t rung,
                              int priority = 1) {
    for (int at_ms : offsets_ms) {
      now_ = from + std::chrono::milliseconds(at_ms);
      const Ticket t = Admit(priority);
      EXPECT_EQ(t.rung, rung) << at_ms << " ms after " << "the last move or probe";
      EXPECT_EQ(t.probe_class, -1) << at_ms << " ms after the last move or probe";
      controller_.Finish(t, false);
    }
  }
  // Two highest-priority requests at once, both then failed: with rung 0 at
  // 30 ms (P_0 = 1) the second finds it over the target and moves the class
  // down.
  void Burst() {
    const Ticket a = Admit(1);
    const Ticket b = Admit(1);
    controller_.Finish(a, false);
    controller_.Finish(b, false);
  }
  // At `at`, a highest-priority request moves the class up to `rung` (a
  // move, not a probe).
  void ExpectMoveUp(Clock::time_point at, size_t rung) {
    now_ = at;
    const Ticket t = Admit(1);
    EXPECT_EQ(t.rung, rung);
    EXPECT_EQ(t.probe_class, -1) << "a move up, not a probe";
    EXPECT_EQ(controller_.CurrentRung(1), rung);
    controller_.Finish(t, false);
  }
  // At `at`, a lower-class request is served at `rung` (the class's probe
  // when `probe`; else no probe), and the class is then on `current`.
  void ExpectLowerClassRequest(Clock::time_point at, size_t rung, bool probe, size_t current) {
    now_ = at;
    const Ticket t = Admit();
    EXPECT_EQ(t.rung, rung);
    EXPECT_EQ(t.probe_class, probe ? 1 : -1) << (probe ? "a probe" : "no probe");
    EXPECT_EQ(controller_.CurrentRung(0), current);
    controller_.Finish(t, false);
  }
  std::vector<double> Predictions() const {
    std::vector<double> p;
    for (size_t r = 0; r < controller_.rungs(); ++r) p.push_back(controller_.PredictMs(r));
    return p;
  }

 protected:
  // s_0 = 30, s_1 = 10 (or `s1`), s_2 = 2 ms (or `s2`), each measured by one
  // request alone; the cheaper rungs are reached by deadlines nearer than the
  // richer ones take. No answer started behind work: P_0 = 1, P_1 = P_2 = 1024.
  void MeasureRungs(int s2 = 2, int s1 = 10) {
    Ticket t = Admit();
    ASSERT_EQ(t.rung, 0u);
    Advance(30);
    controller_.Finish(t, true);
    t = AdmitWithin(20);
    ASSERT_EQ(t.rung, 1u);
    Advance(s1);
    controller_.Finish(t, true);
    t = AdmitWithin(5);
    ASSERT_EQ(t.rung, 2u);
    Advance(s2);
    controller_.Finish(t, true);
    ASSERT_DOUBLE_EQ(controller_.ServiceMs(0), 30);
    ASSERT_DOUBLE_EQ(controller_.ServiceMs(1), s1);
    ASSERT_DOUBLE_EQ(controller_.ServiceMs(2), s2);
    ASSERT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
    ASSERT_DOUBLE_EQ(controller_.Parallelism(0), 1);
    ASSERT_DOUBLE_EQ(controller_.Parallelism(1), kMaxParallelism);
    ASSERT_DOUBLE_EQ(controller_.Parallelism(2), kMaxParallelism);
  }

  // After MeasureRungs: rungs 1 and 2 each answer once behind 10 ms of work
  // (a rung-1 request in flight) in s_r + 10 ms: they wait for all of it, so
  // P_1 = P_2 = 10 / 10 = 1, as if the whole ladder shared one machine (the
  // old model's numbers). Highest-priority requests with deadlines pick the
  // rungs; with W <= 10 rung 0's 30 + 10 stays within their target, so
  // neither class moves.
  void TeachCheapRungsToWaitForAllWork() {
    const int s2 = static_cast<int>(controller_.ServiceMs(2));
    const Ticket load = AdmitWithin(20, 1);  // rung 0's 30 > 20: rung 1, W = 10
    ASSERT_EQ(load.rung, 1u);
    Ticket t = AdmitWithin(15, 1);  // rung 0: 40 > 15; rung 1: 10 + 10/1024
    ASSERT_EQ(t.rung, 1u);
    ASSERT_DOUBLE_EQ(t.work_ahead_ms, 10);
    Advance(10 + 10);
    controller_.Finish(t, true);
    ASSERT_DOUBLE_EQ(controller_.Parallelism(1), 1);
    t = AdmitWithin(15, 1);  // rung 1 now 10 + 10 = 20 > 15; rung 2: s_2 + 10/1024
    ASSERT_EQ(t.rung, 2u);
    ASSERT_DOUBLE_EQ(t.work_ahead_ms, 10);
    Advance(s2 + 10);
    controller_.Finish(t, true);
    ASSERT_DOUBLE_EQ(controller_.Parallelism(2), 1);
    controller_.Finish(load, false);
    ASSERT_DOUBLE_EQ(controller_.Parallelism(0), 1);
    ASSERT_DOUBLE_EQ(controller_.ServiceMs(1), 10);
    ASSERT_DOUBLE_EQ(controller_.ServiceMs(2), s2);
    ASSERT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
    ASSERT_EQ(controller_.CurrentRung(0), 0u);
    ASSERT_EQ(controller_.CurrentRung(1), 0u);
  }

  // A cold start: rung 0's first answer takes 60 ms, so s_0 = 60 misses the
  // whole target (40); the highest class moves to rung 1 at `*moved` and
  // measures it (s_1 = 10). Rung 2 stays unmeasured (but rung 1 comes first).
  void MeasureColdRungZero(Clock::time_point* moved) {
    Ticket t = Admit(1);
    ASSERT_EQ(t.rung, 0u);
    Advance(60);
    controller_.Finish(t, true);
    ASSERT_DOUBLE_EQ(controller_.ServiceMs(0), 60);
    *moved = now_;
    t = Admit(1);
    ASSERT_EQ(t.rung, 1u);
    ASSERT_EQ(controller_.CurrentRung(1), 1u);
    Advance(10);
    controller_.Finish(t, true);
    ASSERT_DOUBLE_EQ(controller_.ServiceMs(1), 10);
    ASSERT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
  }

  // After MeasureRungs and TeachCheapRungsToWaitForAllWork (here): with
  // `via_rung_one`, 10 ms of rung-1 work in flight move the lower class to
  // rung 1 first (rung 0 at 40 misses its budget of 32, rung 1 at 20 is
  // within it); then behind an exact request (W = 30) it moves to rung 2 (2 +
  // 30, within its budget), whose answer then takes 200 ms: P_2 = 0.5.
  void PutTheLowerClassOnRungTwoAtItsFloor(bool via_rung_one = true) {
    ASSERT_NO_FATAL_FAILURE(MeasureRungs());
    ASSERT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());  // P = 1 everywhere
    if (via_rung_one) {
      const Ticket work = AdmitWithin(20, 1);
      const Ticket moved = Admit();
      ASSERT_EQ(work.rung, 1u);
      ASSERT_EQ(moved.rung, 1u);
      for (const Ticket& done : {work, moved}) controller_.Finish(done, false);
    }
    const Ticket full = AdmitExact();
    const Ticket t = Admit();
    ASSERT_EQ(t.rung, 2u);
    Advance(200);
    controller_.Finish(full, false);
    controller_.Finish(t, true);
    ASSERT_DOUBLE_EQ(controller_.Parallelism(2), 0.5);
    ASSERT_EQ(controller_.CurrentRung(0), 2u);
  }
  // Then 20 ms of rung-1 work in flight (highest-priority requests with near
  // deadlines): rung 2 at 2 + 20 / 0.5 = 42 (over the lower budget and the
  // target), rung 1 at 30 (within the budget of 32). The two requests.
  std::pair<Ticket, Ticket> RungOneWork() {
    const Ticket a = AdmitWithin(20, 1);
    const Ticket b = AdmitWithin(25, 1);
    EXPECT_EQ(a.rung, 1u);
    EXPECT_EQ(b.rung, 1u);
    return {a, b};
  }

  // Two rungs measured slow: s_0 = 60 and s_1 = 50 both miss the target
  // (40), so the highest class moves to rung 2 at `*bottom` (s_2 = 2).
  void DescendAColdLadder(Clock::time_point* bottom) {
    Ticket t = Admit(1);
    Advance(60);
    controller_.Finish(t, true);
    t = Admit(1);
    ASSERT_EQ(t.rung, 1u);
    Advance(50);
    controller_.Finish(t, true);
    *bottom = now_;
    t = Admit(1);
    ASSERT_EQ(t.rung, 2u);
    Advance(2);
    controller_.Finish(t, true);
    ASSERT_EQ(controller_.CurrentRung(1), 2u);
  }
  // Two exact requests alone answer in 20 ms: s_0 60 -> 40 -> 30.
  void RemeasureRungZeroAlone() {
    for (int i = 0; i < 2; ++i) {
      const Ticket t = AdmitExact();
      Advance(20);
      controller_.Finish(t, true);
    }
  }

  Clock::time_point now_ = Clock::time_point{} + std::chrono::hours(1);
  // No cold answers: each test decides what its answers teach.
  OverloadController controller_{Spec(), [this] { return now_; }, 0};
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

// A cheap rung first used in a burst answers behind the queue the burst
// left: that latency is not what the rung costs, and as its service time
// it would make the rung look dearer than the richer ones.
TEST_F(OverloadControllerTest, AFirstAnswerBehindWorkCostsAtMostAMeasuredRicherRung) {
  Ticket t = Admit();
  Advance(30);
  Finish(t, true);                   // s_0 = 30
  const Ticket load = AdmitExact();  // W = 30
  t = AdmitWithin(20);               // rung 0 misses 20: rung 1, unmeasured
  ASSERT_EQ(t.rung, 1u);
  ASSERT_DOUBLE_EQ(t.work_ahead_ms, 30);
  Advance(50);  // behind the queue: 50 - 30/1024, more than rung 0 alone
  Finish(t, true);
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(1), 30) << "at most rung 0's";
  t = AdmitWithin(5);  // rung 2, unmeasured, behind rung 0's 30 ms still in flight
  ASSERT_EQ(t.rung, 2u);
  Advance(4);
  Finish(t, true);
  EXPECT_NEAR(controller_.ServiceMs(2), 4 - 30.0 / kMaxParallelism, 1e-9) << "below the richer rungs: as measured";
  Finish(load, false);
}

TEST_F(OverloadControllerTest, AFirstAnswerBehindWorkCostsAtMostTheCheapestMeasuredRicherRung) {
  Ticket t = Admit();
  Advance(30);
  Finish(t, true);  // s_0 = 30
  t = AdmitWithin(20);
  ASSERT_EQ(t.rung, 1u);
  Advance(10);
  Finish(t, true);                   // s_1 = 10, alone
  const Ticket load = AdmitExact();  // W = 30
  t = AdmitWithin(5);                // rungs 0 and 1 miss 5: rung 2, unmeasured
  ASSERT_EQ(t.rung, 2u);
  Advance(50);
  Finish(t, true);
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(2), 10) << "at most rung 1's, the cheaper of the two";
  Finish(load, false);
}

TEST_F(OverloadControllerTest, AFirstAnswerAloneMeasuresADearerRungAsItIs) {
  Ticket t = Admit();
  Advance(30);
  Finish(t, true);      // s_0 = 30
  t = AdmitWithin(20);  // rung 1, unmeasured, nothing in flight
  ASSERT_EQ(t.rung, 1u);
  ASSERT_DOUBLE_EQ(t.work_ahead_ms, 0);
  Advance(45);
  Finish(t, true);
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(1), 45) << "alone: what it took";
}

TEST_F(OverloadControllerTest, LaterAnswersAloneMoveTheServiceTimeGradually) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  Ticket t = AdmitExact();  // rung 0, whatever its prediction
  Advance(50);
  controller_.Finish(t, true);
  // Slower: weight 0.2, 30 + 0.2 * (50 - 30).
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(0), 34);
  t = AdmitExact();
  ASSERT_EQ(t.work_ahead_ms, 0);
  Advance(20);
  controller_.Finish(t, true);
  // Faster: no answer is faster than the rung alone, so weight 0.5,
  // 34 + 0.5 * (20 - 34) = 27 (with 0.2 it would be 31.2).
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(0), 27) << "a faster answer lowers it by half the gap";
  EXPECT_DOUBLE_EQ(controller_.Parallelism(0), 1) << "answers alone teach no parallelism";
}

TEST_F(OverloadControllerTest, AnswerFasterThanTheServiceTimeBehindWorkLowersIt) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  const Ticket first = AdmitExact();
  const Ticket behind = AdmitExact();
  ASSERT_DOUBLE_EQ(behind.work_ahead_ms, 30);
  Advance(20);  // faster than rung 0 alone, although it started behind work
  controller_.Finish(behind, true);
  // 30 + 0.5 * (20 - 30).
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(0), 25);
  // It hardly waited: excess max(20 - 30, 0.05 * 30) = 1.5, 30 / 1.5 = 20,
  // but P_0 is at most 1.
  EXPECT_DOUBLE_EQ(controller_.Parallelism(0), 1);
  EXPECT_DOUBLE_EQ(controller_.Parallelism(1), kMaxParallelism) << "only rung 0 answered";
  controller_.Finish(first, false);
}

TEST_F(OverloadControllerTest, QueueMovesNewRequestsToCheaperRungs) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  std::vector<size_t> rungs(4);
  for (size_t& rung : rungs) rung = Admit().rung;
  // W = 0: rung 0 (30 <= 32); then W = 30: rung 0 at 30 + 30/1 = 60 > 32,
  // rung 1 at 10 + 30/1024 fits (it has not answered behind work: taken to
  // wait for none); W = 40, 50: the same.
  EXPECT_EQ(rungs, (std::vector<size_t>{0, 1, 1, 1}));
  EXPECT_EQ(controller_.CurrentRung(0), 1u);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 30 + 10 + 10 + 10);
  EXPECT_EQ(controller_.CurrentRung(1), 0u) << "the classes move separately";
}

TEST_F(OverloadControllerTest, QueueMovesFurtherDownOnceTheCheapRungsAreShownToWait) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());
  std::vector<size_t> rungs(4);
  for (size_t& rung : rungs) rung = Admit().rung;
  // P = 1 everywhere: W = 0: rung 0; W = 30: 60, 40 > 32, rung 2's 32 fits;
  // W = 32, 34: no rung within 32, the fastest (rung 2) meets the target.
  EXPECT_EQ(rungs, (std::vector<size_t>{0, 2, 2, 2}));
  EXPECT_EQ(controller_.CurrentRung(0), 2u);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 30 + 2 + 2 + 2);
}

// Under growing load each request of `priority` gets the richest rung
// predicted within its class's budget, or when none is, the fastest rung
// while that meets the whole target; `expected`: the rungs until the first
// shed.
void ExpectRichestWithinBudget(OverloadControllerTest* test, int priority, const std::vector<size_t>& expected) {
  const double budget = priority == 1 ? kTargetMs : kLowerBudgetMs;
  std::vector<size_t> seen;
  for (int i = 0; i < 20; ++i) {
    const std::vector<double> before = test->Predictions();
    const size_t fastest = static_cast<size_t>(std::min_element(before.begin(), before.end()) - before.begin());
    const Ticket t = test->Admit(priority);
    if (t.rung == kShed) {
      EXPECT_GT(before[fastest], kTargetMs) << "request " << i << " shed while rung " << fastest << " fits";
      break;
    }
    seen.push_back(t.rung);
    ASSERT_LT(t.rung, before.size());
    EXPECT_DOUBLE_EQ(t.predicted_ms, before[t.rung]);
    for (size_t richer = 0; richer < t.rung; ++richer) {
      EXPECT_GT(before[richer], budget) << "request " << i << " skipped rung " << richer;
    }
    if (before[t.rung] > budget) {
      EXPECT_EQ(t.rung, fastest) << "request " << i << ": no rung within the budget, not the fastest";
      EXPECT_LE(before[t.rung], kTargetMs) << "request " << i;
    }
  }
  EXPECT_EQ(seen, expected);
}

TEST_F(OverloadControllerTest, HighestPriorityGetsTheRichestRungWithinTheTarget) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());
  // P = 1 everywhere. W = 0: 30 fits; W = 30: rung 0 at 60 misses, rung 1
  // at 40 fits; then W = 40: even rung 2 at 42 misses.
  ExpectRichestWithinBudget(this, 1, {0, 1});
}

TEST_F(OverloadControllerTest, LowerPriorityGetsTheRichestRungWithinItsShare) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());
  // P = 1 everywhere. Budget 32: W = 0: 30 fits; W = 30: only rung 2 at 32
  // does; past that rung 2 serves up to the whole target (W = 30 + 5 * 2).
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

  // Drained, but within the dwell time: the class stays down (and sends no
  // probe either).
  ExpectHeldWithoutProbe(moved, {40, 500, 999}, 1, 1);
  ExpectMoveUp(moved + std::chrono::milliseconds(1000), 0);
}

// Up one step per dwell time: a class at the bottom whose richer rungs both
// fit again goes to the middle rung first and to rung 0 a dwell time later.
// (Straight to the richest, the full ensemble's admissions pushed the middle
// rung, waiting behind the same hosts, over the budget too, and the class
// swung between the ladder's two ends once per dwell.)
TEST_F(OverloadControllerTest, ClimbsOneRungPerDwellTime) {
  Clock::time_point bottom;
  ASSERT_NO_FATAL_FAILURE(DescendAColdLadder(&bottom));
  // A dwell later, the probe measures rung 1 again (50 -> 30), and exact
  // requests measure rung 0 (60 -> 40 -> 30): both fit the target now.
  now_ = bottom + std::chrono::milliseconds(1000);
  const Ticket probe = Admit(1);
  ASSERT_EQ(probe.rung, 1u);
  ASSERT_EQ(probe.probe_class, 0);
  Advance(10);
  controller_.Finish(probe, true);
  RemeasureRungZeroAlone();
  ASSERT_DOUBLE_EQ(controller_.ServiceMs(0), 30);
  ASSERT_DOUBLE_EQ(controller_.ServiceMs(1), 30);
  ASSERT_LE(controller_.PredictMs(0), kTargetMs);

  const Clock::time_point middle = now_;
  ExpectMoveUp(middle, 1);  // one step up, not straight to rung 0
  ExpectHeldWithoutProbe(middle, {1, 500, 999}, 1, 1);
  ExpectMoveUp(middle + std::chrono::milliseconds(1000), 0);
}

// Rung 1 out of the lower class's reach: its mean fits the lower budget,
// its tail misses it with nothing in flight. Rung 0 measured cold (60 ms)
// puts the highest class on rung 1 (s_1 = 25), whose answers alone, one in
// ten in 33 ms, teach it a tail near 1.35 (33 / 25 x 1.35 is still within
// the highest class's 40 ms; its probes of rung 0 fail and measure
// nothing). T_1 x s_1 (about 34) misses the lower class's 32: its first
// request goes to rung 2, answered in 2 ms. Returns when it went there (rung
// 1's last answer came just before).
Clock::time_point PutRungOneOutOfTheLowerClassesReach(OverloadControllerTest* test,
                                                      const OverloadController& controller) {
  Ticket t = test->Admit(1);
  test->Advance(60);
  test->Finish(t, true);
  for (int i = 0; i < 400; ++i) {
    t = test->Admit(1);
    if (t.probe_class >= 0) {
      EXPECT_EQ(t.rung, 0u);
      test->Finish(t, false);
      t = test->Admit(1);
    }
    EXPECT_EQ(t.rung, 1u) << i;
    test->Advance(i % 10 == 5 ? 33 : 25);
    test->Finish(t, true);
  }
  EXPECT_NEAR(controller.ServiceMs(1), 25, 0.5);
  EXPECT_GT(controller.TailRatio(1) * controller.ServiceMs(1), kLowerBudgetMs);
  EXPECT_LE(controller.TailRatio(1) * controller.ServiceMs(1), kTargetMs);
  const Clock::time_point moved = test->Now();
  t = test->Admit();
  EXPECT_EQ(t.rung, 2u);
  test->Advance(2);
  test->Finish(t, true);
  return moved;
}

// A rung out of a class's reach is passed over by the climbs: nothing the
// class sends it could lower its tail. Rung 0 measured again at 30 ms, a
// dwell time later the lower class climbs straight to rung 0; before, it
// stayed on rung 2 for good, its probes measuring rung 1's service time and
// never its tail.
TEST_F(OverloadControllerTest, AClimbPassesOverARungWhoseTailAloneMissesTheBudget) {
  const Clock::time_point moved = PutRungOneOutOfTheLowerClassesReach(this, controller_);
  ASSERT_FALSE(HasFailure());
  RemeasureRungZeroAlone();
  ASSERT_DOUBLE_EQ(controller_.ServiceMs(0), 30);
  ExpectLowerClassRequest(moved + std::chrono::milliseconds(1000), 0, false, 0);  // past rung 1, out of reach
}

// And by the probes: with rung 0 still at its cold 60 ms, the lower class's
// probe a dwell time later goes to rung 0, the rung a climb would go to
// (one to rung 1 would measure its service time, never its tail).
TEST_F(OverloadControllerTest, AProbePassesOverARungOutOfReach) {
  const Clock::time_point moved = PutRungOneOutOfTheLowerClassesReach(this, controller_);
  ASSERT_FALSE(HasFailure());
  ExpectLowerClassRequest(moved + std::chrono::milliseconds(1000), 0, true, 2);
}

// A tail that puts a rung out of reach is forgotten once no answer has
// moved it for eight dwell times: rung 1 is in the lower class's reach
// again, and the class climbs to it (rung 0 still misses).
TEST_F(OverloadControllerTest, AStaleTailThatPutsARungOutOfReachIsForgotten) {
  const Clock::time_point moved = PutRungOneOutOfTheLowerClassesReach(this, controller_);
  ASSERT_FALSE(HasFailure());
  ExpectLowerClassRequest(moved + std::chrono::milliseconds(7990), 0, true, 2);  // a probe past rung 1
  EXPECT_GT(controller_.TailRatio(1), 1.28) << "still out of reach";
  ExpectLowerClassRequest(moved + std::chrono::milliseconds(8000), 1, false, 1);  // a climb to rung 1
  EXPECT_DOUBLE_EQ(controller_.TailRatio(1), 1) << "forgotten";
}

// When the next richer rung misses the budget and a richer one fits (a
// ladder measured out of order), the class does not climb past it: the
// probe, one rung up, measures it again, and the climbs follow one step per
// dwell time.
TEST_F(OverloadControllerTest, StepUpStopsBelowARungThatMissesTheBudgetUntilAProbeMeasuresIt) {
  Clock::time_point bottom;
  ASSERT_NO_FATAL_FAILURE(DescendAColdLadder(&bottom));
  RemeasureRungZeroAlone();  // rung 1 stays 50
  now_ = bottom + std::chrono::milliseconds(1000);
  const Ticket probe = Admit(1);
  EXPECT_EQ(probe.rung, 1u);
  EXPECT_EQ(probe.probe_class, 0) << "a probe of the rung that missed, not a climb past it";
  EXPECT_EQ(controller_.CurrentRung(1), 2u);
  Advance(10);
  controller_.Finish(probe, true);  // alone in 10 ms: s_1 50 -> 30
  ASSERT_DOUBLE_EQ(controller_.ServiceMs(1), 30);
  ExpectMoveUp(bottom + std::chrono::milliseconds(2000), 1);
  ExpectMoveUp(bottom + std::chrono::milliseconds(3000), 0);
}

// A climb undone within a dwell time (the load cannot sustain the richer
// rung) doubles the wait before the next one; a climb that holds a dwell
// time brings the wait back to one dwell.
TEST_F(OverloadControllerTest, AClimbUndoneWithinADwellTimeDoublesTheWaitBeforeTheNext) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());  // s_0 = 30, P_0 = 1: two rung-0 requests in flight miss the target
  // Load: each burst's second request finds rung 0 over the budget (30 + 30
  // > 40) and moves the class down (to rung 1) at once.
  Burst();
  ASSERT_EQ(controller_.CurrentRung(1), 1u);
  Clock::time_point down = now_;
  auto rung_at = [&](int ms_after_down) {
    now_ = down + std::chrono::milliseconds(ms_after_down);
    const Ticket t = Admit(1);
    controller_.Finish(t, false);
    return controller_.CurrentRung(1);
  };
  EXPECT_EQ(rung_at(1000), 0u) << "the first climb after one dwell time";
  Burst();  // undone at once: a failed climb
  ASSERT_EQ(controller_.CurrentRung(1), 1u);
  down = now_;
  EXPECT_EQ(rung_at(1000), 1u) << "one failed climb: the next waits two dwell times";
  EXPECT_EQ(rung_at(1999), 1u);
  EXPECT_EQ(rung_at(2000), 0u);
  Burst();  // failed again: four dwell times
  down = now_;
  EXPECT_EQ(rung_at(3999), 1u);
  EXPECT_EQ(rung_at(4000), 0u);
  // This climb holds a dwell time; the move down after it is no failure,
  // and the next climb waits one dwell time again.
  now_ += std::chrono::milliseconds(1000);
  Burst();
  ASSERT_EQ(controller_.CurrentRung(1), 1u);
  down = now_;
  EXPECT_EQ(rung_at(1000), 0u);
}

// For a dwell time after a climb, the new rung may use only a quarter of the
// room between its service time and the budget, or two service times of
// waiting if more: rung 1 (10 ms, budget 40) keeps 10 + max(7.5, 20) = 30
// ms. 30 ms of work in flight (40 ms predicted, within the budget) sends
// the class back below; once the climb has held a dwell time, the same
// work does not. (Rung 0, 30 ms, would keep the whole budget: two of its
// service times are more than the room.)
TEST_F(OverloadControllerTest, AFreshClimbIsUndoneBeforeItFillsTheBudget) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());  // P_0 = P_1 = P_2 = 1
  // Down to rung 2: 32 ms in flight, rung 1 predicted 42, rung 2 34.
  auto push_down = [&] {
    const Ticket exact = AdmitExact();
    const Ticket hurried = AdmitWithin(3, 1);
    const Ticket t = Admit(1);
    for (const Ticket& done : {exact, hurried, t}) controller_.Finish(done, false);
  };
  push_down();
  ASSERT_EQ(controller_.CurrentRung(1), 2u);
  Advance(1000);
  controller_.Finish(Admit(1), false);  // the climb, one step: rung 1
  ASSERT_EQ(controller_.CurrentRung(1), 1u);
  Ticket load = AdmitExact();  // 30 ms in flight
  EXPECT_DOUBLE_EQ(controller_.PredictMs(1), 40);
  const Ticket back = Admit(1);
  EXPECT_EQ(back.rung, 2u) << "40 ms predicted on probation (room to 30): back to rung 2";
  EXPECT_EQ(controller_.CurrentRung(1), 2u);
  controller_.Finish(back, false);
  controller_.Finish(load, false);
  // The undone climb was a failed one: the next to rung 1 comes two dwell
  // times later, and holds a dwell time; then the same load leaves it.
  Advance(1999);
  controller_.Finish(Admit(1), false);
  ASSERT_EQ(controller_.CurrentRung(1), 2u);
  Advance(1);
  controller_.Finish(Admit(1), false);
  ASSERT_EQ(controller_.CurrentRung(1), 1u);
  Advance(1000);
  load = AdmitExact();
  const Ticket t = Admit(1);  // (it may be the dwell's probe of rung 0)
  EXPECT_EQ(controller_.CurrentRung(1), 1u) << "40 ms is within the budget once the climb has held";
  controller_.Finish(t, false);
  controller_.Finish(load, false);
}

// Probation allows at least two service times of waiting: rung 0 (30 ms,
// budget 40) on probation keeps the whole budget, so 10 ms in flight (40
// predicted) leaves it there (a quarter of the room alone, 32.5 ms, undid
// ordinary queueing of a slow rung at half its capacity).
TEST_F(OverloadControllerTest, ProbationAllowsTwoServiceTimesOfWaiting) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  Burst();  // down to rung 1
  Advance(1000);
  controller_.Finish(Admit(1), false);  // the climb to rung 0
  ASSERT_EQ(controller_.CurrentRung(1), 0u);
  const Ticket load = AdmitWithin(20, 1);  // rung 1 by its deadline: 10 ms in flight
  ASSERT_EQ(load.rung, 1u);
  const Ticket t = Admit(1);
  EXPECT_EQ(t.rung, 0u);
  EXPECT_EQ(controller_.CurrentRung(1), 0u);
  controller_.Finish(t, false);
  controller_.Finish(load, false);
}

// The wait after failed climbs is per rung: climbs to the full ensemble
// that failed do not hold the class below the middle rung, which it climbs
// to a dwell time after it moved down to the bottom.
TEST_F(OverloadControllerTest, FailedClimbsToOneRungDoNotDelayClimbsToAnother) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());  // P_0 = P_1 = P_2 = 1
  Burst();
  ASSERT_EQ(controller_.CurrentRung(1), 1u);
  Advance(1000);
  controller_.Finish(Admit(1), false);  // climbs to rung 0...
  ASSERT_EQ(controller_.CurrentRung(1), 0u);
  Burst();  // ...and fails at once: the next climb to rung 0 waits two dwells
  ASSERT_EQ(controller_.CurrentRung(1), 1u);
  // 32 ms in flight: rung 1 (10 + 32) misses, rung 2 (2 + 32) fits.
  const Ticket exact = AdmitExact();
  const Ticket hurried = AdmitWithin(3, 1);
  ASSERT_EQ(hurried.rung, 2u);
  const Ticket t = Admit(1);
  EXPECT_EQ(t.rung, 2u);
  ASSERT_EQ(controller_.CurrentRung(1), 2u);
  for (const Ticket& done : {exact, hurried, t}) controller_.Finish(done, false);
  Advance(1000);
  controller_.Finish(Admit(1), false);
  EXPECT_EQ(controller_.CurrentRung(1), 1u) << "rung 1's climbs never failed: one dwell time";
}

TEST_F(OverloadControllerTest, HighestPriorityKeepsTheRichRungLonger) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  const Ticket load = AdmitWithin(20);  // rung 1: W = 10
  ASSERT_EQ(load.rung, 1u);
  // Rung 0 is predicted at 30 + 10/1 = 40: within the target, over the
  // lower share (32).
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
  ASSERT_EQ(Admit().rung, 0u);  // W = 30: rung 0 at 60 > 32, the lower class moves to rung 1
  const Ticket t = AdmitWithin(60 * 60 * 1000);
  EXPECT_EQ(t.rung, 1u);
}

TEST_F(OverloadControllerTest, ExactIsAlwaysRungZeroAndNeverShed) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());
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
    EXPECT_EQ(t.probe_class, -1);
    EXPECT_GT(t.predicted_ms, kTargetMs);
    tickets.push_back(t);
  }
  EXPECT_GT(controller_.WorkInFlightMs(), 10 * 30) << "exact requests count their work";
  for (const Ticket& t : tickets) controller_.Finish(t, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
}

TEST_F(OverloadControllerTest, ShedsOnlyWhenNoRungMeetsTheTarget) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());
  std::vector<Ticket> admitted;
  Ticket shed;
  for (int i = 0; i < 50; ++i) {
    const std::vector<double> before = Predictions();
    const double fastest = *std::min_element(before.begin(), before.end());
    const Ticket t = Admit();
    if (t.rung == kShed) {
      EXPECT_GT(fastest, kTargetMs);
      shed = t;
      break;
    }
    EXPECT_LE(fastest, kTargetMs) << "served while a rung meets the target";
    admitted.push_back(t);
  }
  ASSERT_EQ(shed.rung, kShed);
  // P = 1 everywhere: W = 30 + 5 * 2 = 40: rung 2, the fastest, would take 42.
  EXPECT_EQ(admitted.size(), 6u);
  EXPECT_EQ(shed.fastest, 2u) << "the refusal names the fastest rung";
  EXPECT_DOUBLE_EQ(shed.predicted_ms, 42);
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

// Before any answer behind work: rung 0 waits for all the work in flight
// (P_0 = 1), a cheap rung for none (P_r = 1024).
TEST_F(OverloadControllerTest, BeforeAnswersBehindWorkRungZeroWaitsForAllWorkTheCheapRungsForNone) {
  EXPECT_DOUBLE_EQ(controller_.Parallelism(0), 1);
  EXPECT_DOUBLE_EQ(controller_.Parallelism(1), kMaxParallelism);
  EXPECT_DOUBLE_EQ(controller_.Parallelism(2), kMaxParallelism);
  EXPECT_DOUBLE_EQ(controller_.Parallelism(3), 0) << "past the ladder";
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  const Ticket load = AdmitExact();  // W = 30
  EXPECT_DOUBLE_EQ(controller_.PredictMs(0), 30 + 30);
  EXPECT_DOUBLE_EQ(controller_.PredictMs(1), 10 + 30 / kMaxParallelism);
  EXPECT_DOUBLE_EQ(controller_.PredictMs(2), 2 + 30 / kMaxParallelism);
  controller_.Finish(load, false);
}

// A heavy queue (20 exact requests: W = 600) does not shed while the cheap
// rungs have not answered behind work: they are the safety valve, not
// refused on a guess. Once each has answered after waiting for all of it,
// the same queue rules it out, and with no rung left, requests are shed.
TEST_F(OverloadControllerTest, CheapRungsAreNotRefusedOnAGuess) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  std::vector<Ticket> exact(20);
  for (Ticket& t : exact) t = AdmitExact();
  ASSERT_DOUBLE_EQ(controller_.WorkInFlightMs(), 600);
  ASSERT_DOUBLE_EQ(controller_.PredictMs(0), 630);

  // Rung 1: 10 + 600/1024, about 10.6: within both budgets.
  Ticket t = Admit(1);
  EXPECT_EQ(t.rung, 1u);
  controller_.Finish(t, false);
  t = Admit();
  ASSERT_EQ(t.rung, 1u);
  EXPECT_NEAR(t.predicted_ms, 10 + 600 / kMaxParallelism, 1e-9);
  EXPECT_LE(t.predicted_ms, kLowerBudgetMs);
  // It waited for all 600 ms ahead: P_1 = 600 / 600.
  Advance(10 + 600);
  controller_.Finish(t, true);
  EXPECT_DOUBLE_EQ(controller_.Parallelism(1), 1);
  EXPECT_DOUBLE_EQ(controller_.PredictMs(1), 10 + 600);

  // Rung 2 is still unmeasured behind work: 2 + 600/1024.
  t = Admit();
  ASSERT_EQ(t.rung, 2u);
  Advance(2 + 600);
  controller_.Finish(t, true);
  EXPECT_DOUBLE_EQ(controller_.Parallelism(2), 1);

  // Now no rung meets the target (630 / 610 / 602): shed.
  EXPECT_EQ(Admit().rung, kShed);
  EXPECT_EQ(Admit(1).rung, kShed);
  for (const Ticket& e : exact) controller_.Finish(e, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
}

// Two exact requests at once: the first alone (30 ms), the second behind the
// first's 30 ms of work. While it takes s + 2W rung 0's parallelism is 0.5;
// once it takes s + W/2 it rises, but no higher than 1: the full ensemble
// runs on every host of its members, so it overlaps no work in flight (a
// P_0 above 1, learnt behind cheap rungs' work, let an 8x burst fill the
// work in flight with full-ensemble requests). Only rung 0's.
TEST_F(OverloadControllerTest, ParallelismIsLearntFromAnswersBehindWork) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  EXPECT_DOUBLE_EQ(controller_.Parallelism(0), 1);
  auto round = [&](int behind_latency_ms) {
    const Ticket alone = AdmitExact();
    const Ticket behind = AdmitExact();
    ASSERT_DOUBLE_EQ(behind.work_ahead_ms, 30);
    Advance(30);
    controller_.Finish(alone, true);
    Advance(behind_latency_ms - 30);
    controller_.Finish(behind, true);
  };
  for (int i = 0; i < 5; ++i) round(30 + 60);
  EXPECT_NEAR(controller_.Parallelism(0), 0.5, 1e-9);
  double last = controller_.Parallelism(0);
  for (int i = 0; i < 3; ++i) {
    round(30 + 15);
    EXPECT_GT(controller_.Parallelism(0), last) << "round " << i;
    last = controller_.Parallelism(0);
  }
  for (int i = 0; i < 30; ++i) round(30 + 15);  // 30 / 15 = 2 in the long run
  EXPECT_DOUBLE_EQ(controller_.Parallelism(0), 1) << "at most 1";
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(0), 30);
  EXPECT_DOUBLE_EQ(controller_.Parallelism(1), kMaxParallelism) << "rung 0's answers teach rung 0 only";
  EXPECT_DOUBLE_EQ(controller_.Parallelism(2), kMaxParallelism) << "rung 0's answers teach rung 0 only";
  // The prediction uses it: W / P_0 behind rung 0's own 30 ms.
  const Ticket t = AdmitExact();
  EXPECT_DOUBLE_EQ(controller_.PredictMs(0), 30 + 30);
  controller_.Finish(t, false);
}

// Per rung: a cheap rung (on another host, say) that hardly waits behind the
// full ensemble's work raises its own P, not rung 0's, and rung 0's
// prediction still counts all the work. With one shared P the full ensemble
// looked free (30 + 60 / 27 = 32 < 40): after each dwell every client went
// back to rung 0, and answers took several times the target.
TEST_F(OverloadControllerTest, ParallelismIsLearntPerRung) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());  // P = 1 everywhere
  std::vector<Ticket> load{AdmitExact()};                      // W = 30
  // Rung 0 at 60 misses the target, rung 1 at 10 + 30/1 = 40 meets it: the
  // highest class moves to rung 1, whose answers wait only 1 ms behind the
  // 30 ms of work (excess 1). P_1 = mean ahead / mean excess rises from
  // 10 / 10 towards 30 / 1 (after 20 answers 29.77 / 1.10, about 27).
  const Clock::time_point moved = now_;
  double last = controller_.Parallelism(1);
  for (int i = 0; i < 20; ++i) {
    const Ticket t = Admit(1);
    ASSERT_EQ(t.rung, 1u) << "answer " << i;
    ASSERT_DOUBLE_EQ(t.work_ahead_ms, 30);
    Advance(10 + 1);
    controller_.Finish(t, true);
    EXPECT_GT(controller_.Parallelism(1), last) << "answer " << i;
    last = controller_.Parallelism(1);
  }
  EXPECT_GT(controller_.Parallelism(1), 25);
  EXPECT_DOUBLE_EQ(controller_.Parallelism(0), 1) << "rung 1's answers say nothing of rung 0";
  EXPECT_DOUBLE_EQ(controller_.Parallelism(2), 1) << "nor of rung 2";
  EXPECT_DOUBLE_EQ(controller_.PredictMs(0), 30 + 30);
  EXPECT_NEAR(controller_.PredictMs(1), 10 + 30 / controller_.Parallelism(1), 1e-9);

  // More work: W = 60. Rung 0 counts all of it (90), rung 1 little (about 12).
  load.push_back(AdmitExact());
  EXPECT_DOUBLE_EQ(controller_.PredictMs(0), 30 + 60);
  EXPECT_LT(controller_.PredictMs(1), 13);
  // Past the dwell time the class stays at rung 1 (and W / P_0 = 60 > 40
  // rules out a probe); the lower class takes rung 1 as well (rung 2: 62).
  now_ = moved + std::chrono::milliseconds(1000);
  Ticket t = Admit(1);
  EXPECT_EQ(t.rung, 1u);
  EXPECT_EQ(t.probe_class, -1);
  EXPECT_EQ(controller_.CurrentRung(1), 1u);
  controller_.Finish(t, false);
  t = Admit();
  EXPECT_EQ(t.rung, 1u);
  controller_.Finish(t, false);
  for (const Ticket& l : load) controller_.Finish(l, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
}

// Service times need not fall along the ladder: with rung 2 measured
// slower (12 ms) than rung 1 (10 ms), a load where rung 1 still meets the
// target but rung 2 would not serves at rung 1 instead of shedding.
TEST_F(OverloadControllerTest, ALadderMeasuredOutOfOrderServesItsFastestRungBeforeShedding) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs(12));
  ASSERT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());  // P = 1 everywhere
  // 30 ms of work in flight: one exact request at rung 0.
  const Ticket load = AdmitExact();
  ASSERT_DOUBLE_EQ(controller_.WorkInFlightMs(), 30);
  // The lower class's budget is 32: no rung is within it (60/40/42), and
  // the fastest, rung 1, still meets the whole target (the last, rung 2,
  // would not).
  const Ticket t = Admit();
  EXPECT_EQ(t.rung, 1u) << "predictions 0/1/2: " << Predictions()[0] << "/" << Predictions()[1] << "/"
                        << Predictions()[2];
  controller_.Finish(t, false);
  controller_.Finish(load, false);
}

// A cold first answer (60 ms) keeps the highest class below rung 0, whose
// service time only its own answers measure. After the dwell time one
// request goes up as a probe; its fast answer alone (20 ms) lowers s_0 by
// half the gap, to 40, within the target: the class moves back up.
TEST_F(OverloadControllerTest, ProbeRemeasuresAnOverestimatedRungAndTheClassMovesBackUp) {
  Clock::time_point moved;
  ASSERT_NO_FATAL_FAILURE(MeasureColdRungZero(&moved));
  // No probe before the dwell time.
  ExpectHeldWithoutProbe(moved, {10, 500, 999}, 1, 1);
  now_ = moved + std::chrono::milliseconds(1000);
  const Ticket probe = Admit(1);
  EXPECT_EQ(probe.rung, 0u);
  EXPECT_EQ(probe.probe_class, 0);
  EXPECT_DOUBLE_EQ(probe.predicted_ms, 60);
  EXPECT_EQ(controller_.CurrentRung(1), 1u) << "only the probe goes up, not the class";
  // No second probe while one is in flight.
  const Ticket other = Admit(1);
  EXPECT_EQ(other.rung, 1u);
  EXPECT_EQ(other.probe_class, -1);
  Advance(20);
  controller_.Finish(other, false);
  ASSERT_DOUBLE_EQ(probe.work_ahead_ms, 0);
  controller_.Finish(probe, true);
  // 60 + 0.5 * (20 - 60) (with weight 0.2, 52: the class would stay down).
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(0), 40);
  const Ticket t = Admit(1);
  EXPECT_EQ(t.rung, 0u);
  EXPECT_EQ(t.probe_class, -1) << "a move up, not a probe";
  EXPECT_EQ(controller_.CurrentRung(1), 0u);
  controller_.Finish(t, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
}

// The lower class probes too, within its own budget (32), and its probe
// carries its class.
TEST_F(OverloadControllerTest, TheLowerClassProbesForItself) {
  Clock::time_point moved;
  ASSERT_NO_FATAL_FAILURE(MeasureColdRungZero(&moved));
  now_ = moved + std::chrono::milliseconds(1000);
  Ticket probe = Admit(1);
  ASSERT_EQ(probe.probe_class, 0);
  Advance(20);
  controller_.Finish(probe, true);  // s_0 = 40: the highest class fits again
  ASSERT_DOUBLE_EQ(controller_.ServiceMs(0), 40);
  // 40 > 32: the lower class moves down on its first request.
  const Clock::time_point low_moved = now_;
  Ticket t = Admit();
  EXPECT_EQ(t.rung, 1u);
  EXPECT_EQ(t.probe_class, -1);
  controller_.Finish(t, false);
  now_ = low_moved + std::chrono::milliseconds(1000);
  probe = Admit();
  EXPECT_EQ(probe.rung, 0u);
  EXPECT_EQ(probe.probe_class, 1);
  Advance(20);
  controller_.Finish(probe, true);
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(0), 30);  // 40 + 0.5 * (20 - 40) <= 32
  t = Admit();
  EXPECT_EQ(t.rung, 0u);
  EXPECT_EQ(controller_.CurrentRung(0), 0u);
  controller_.Finish(t, false);
}

// A probe whose answer does not bring the rung within the budget leaves the
// class down, and the next probe comes a dwell time after it, not sooner;
// a failed probe teaches nothing but frees the next one.
TEST_F(OverloadControllerTest, ProbesComeAtMostOncePerDwellTime) {
  Clock::time_point moved;
  ASSERT_NO_FATAL_FAILURE(MeasureColdRungZero(&moved));
  now_ = moved + std::chrono::milliseconds(1000);
  const Clock::time_point probed = now_;
  Ticket probe = Admit(1);
  ASSERT_EQ(probe.probe_class, 0);
  Advance(56);
  controller_.Finish(probe, true);
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(0), 58);  // 60 + 0.5 * (56 - 60): still > 40
  ExpectHeldWithoutProbe(probed, {56, 500, 999}, 1, 1);
  now_ = probed + std::chrono::milliseconds(1000);
  probe = Admit(1);
  EXPECT_EQ(probe.rung, 0u);
  EXPECT_EQ(probe.probe_class, 0);
  Advance(5);
  controller_.Finish(probe, false);
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(0), 58) << "a failed probe is not learnt";
  Ticket t = Admit(1);
  EXPECT_EQ(t.probe_class, -1) << "the failed probe was this dwell's";
  controller_.Finish(t, false);
  now_ = probed + std::chrono::milliseconds(2000);
  t = Admit(1);
  EXPECT_EQ(t.rung, 0u);
  EXPECT_EQ(t.probe_class, 0) << "the failed probe is no longer in flight";
  controller_.Finish(t, false);
}

// One probe of a class at a time: a probe still in flight (a stuck one,
// here 1.5 dwell times long) holds back the next even once the dwell time
// since it has passed and the work in flight allows it; its Finish, even a
// failure, frees the next. (Rung 1 probed from rung 2: a probe of rung 0
// adds s_0 to the work in flight, which with P_0 <= 1 rules the next out by
// itself.)
TEST_F(OverloadControllerTest, NoSecondProbeWhileOneIsInFlight) {
  Clock::time_point bottom;
  ASSERT_NO_FATAL_FAILURE(DescendAColdLadder(&bottom));  // s = 60, 50, 2: the class at rung 2
  now_ = bottom + std::chrono::milliseconds(1000);
  const Ticket probe = Admit(1);
  ASSERT_EQ(probe.rung, 1u);
  ASSERT_EQ(probe.probe_class, 0);
  // 1.5 dwell times later, W / P_1 = 50 / 1024 <= 40: only the probe in
  // flight holds the next back.
  now_ = bottom + std::chrono::milliseconds(2500);
  Ticket t = Admit(1);
  EXPECT_EQ(t.rung, 2u);
  EXPECT_EQ(t.probe_class, -1) << "a probe is still in flight";
  controller_.Finish(t, false);
  controller_.Finish(probe, false);
  t = Admit(1);
  EXPECT_EQ(t.rung, 1u);
  EXPECT_EQ(t.probe_class, 0) << "the stuck probe finished";
  controller_.Finish(t, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
}

// The probe is sent only while W / P of the richer rung alone is within the
// class's budget, whatever that rung's (suspect) service time: 50 ms of work
// rules rung 0 out for the highest class (50 / 1 > 40), 40 does not
// (although 60 + 40 = 100 is predicted).
TEST_F(OverloadControllerTest, NoProbeWhileTheWorkInFlightAloneRulesTheRicherRungOut) {
  Clock::time_point moved;
  ASSERT_NO_FATAL_FAILURE(MeasureColdRungZero(&moved));
  now_ = moved + std::chrono::milliseconds(1000);
  // Five lower-class requests at rung 1 (rung 0's 60 > 32): W = 50.
  std::vector<Ticket> load;
  for (int i = 0; i < 5; ++i) {
    load.push_back(Admit());
    ASSERT_EQ(load.back().rung, 1u);
    ASSERT_EQ(load.back().probe_class, -1);  // the lower class just moved
  }
  ASSERT_DOUBLE_EQ(controller_.WorkInFlightMs(), 50);
  Ticket t = Admit(1);
  EXPECT_EQ(t.rung, 1u);
  EXPECT_EQ(t.probe_class, -1);
  controller_.Finish(t, false);
  controller_.Finish(load.back(), false);
  load.pop_back();
  ASSERT_DOUBLE_EQ(controller_.WorkInFlightMs(), 40);
  t = Admit(1);
  EXPECT_EQ(t.rung, 0u);
  EXPECT_EQ(t.probe_class, 0);
  EXPECT_DOUBLE_EQ(t.predicted_ms, 60 + 40);
  controller_.Finish(t, false);
  for (const Ticket& l : load) controller_.Finish(l, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
}

// A class two rungs down probes one rung up (rung 1, not rung 0); once that
// rung is measured within the target it moves there, and only a dwell time
// later probes rung 0.
TEST_F(OverloadControllerTest, ProbeGoesOneRungUp) {
  Clock::time_point moved;
  ASSERT_NO_FATAL_FAILURE(DescendAColdLadder(&moved));
  Ticket t;

  now_ = moved + std::chrono::milliseconds(1000);
  const Ticket probe = Admit(1);
  EXPECT_EQ(probe.rung, 1u);
  EXPECT_EQ(probe.probe_class, 0);
  Advance(10);
  controller_.Finish(probe, true);
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(1), 30);  // 50 + 0.5 * (10 - 50)
  const Clock::time_point moved_up = now_;
  t = Admit(1);
  EXPECT_EQ(t.rung, 1u);
  EXPECT_EQ(t.probe_class, -1) << "a move up, not a probe";
  EXPECT_EQ(controller_.CurrentRung(1), 1u);
  controller_.Finish(t, false);
  now_ = moved_up + std::chrono::milliseconds(999);
  t = Admit(1);
  EXPECT_EQ(t.probe_class, -1) << "within the dwell time of the move up";
  controller_.Finish(t, false);
  now_ = moved_up + std::chrono::milliseconds(1000);
  t = Admit(1);
  EXPECT_EQ(t.rung, 0u);
  EXPECT_EQ(t.probe_class, 0);
  controller_.Finish(t, false);
}

// A request whose deadline needs a cheaper rung is not the probe: the probe
// waits for a request that can go up (the probe slot is not spent on it).
TEST_F(OverloadControllerTest, ADeadlineLimitedRequestDoesNotSpendTheProbe) {
  Clock::time_point moved;
  ASSERT_NO_FATAL_FAILURE(MeasureColdRungZero(&moved));
  now_ = moved + std::chrono::milliseconds(1000);
  const Ticket hurried = AdmitWithin(15, 1);  // rung 0 (60) cannot answer within 15
  EXPECT_EQ(hurried.rung, 1u);
  EXPECT_EQ(hurried.probe_class, -1);
  const Ticket probe = Admit(1);
  EXPECT_EQ(probe.rung, 0u);
  EXPECT_EQ(probe.probe_class, 0) << "the next request is the probe";
  controller_.Finish(hurried, false);
  controller_.Finish(probe, false);
}

// A probe that started behind work lowers its rung's service time when it
// is faster, but teaches no parallelism: measured against the doubted
// service time, its excess would say the rung hardly waits.
TEST_F(OverloadControllerTest, AProbeBehindWorkTeachesNoParallelism) {
  Clock::time_point moved;
  ASSERT_NO_FATAL_FAILURE(MeasureColdRungZero(&moved));
  now_ = moved + std::chrono::milliseconds(1000);
  const Ticket ahead = Admit(1);  // the probe: rung 0
  ASSERT_EQ(ahead.probe_class, 0);
  controller_.Finish(ahead, false);
  now_ = moved + std::chrono::milliseconds(2000);
  const Ticket load = Admit();  // lower class at rung 1: 10 ms of work in flight
  ASSERT_EQ(load.rung, 1u);
  const Ticket probe = Admit(1);
  ASSERT_EQ(probe.probe_class, 0);
  ASSERT_DOUBLE_EQ(probe.work_ahead_ms, 10);
  Advance(45);
  controller_.Finish(probe, true);  // 45 < 60: s_0 lowered to 52.5, P_0 untouched
  EXPECT_DOUBLE_EQ(controller_.ServiceMs(0), 52.5);
  EXPECT_DOUBLE_EQ(controller_.Parallelism(0), 1);
  controller_.Finish(load, false);
}

// A class held at a rung whose prediction misses its budget moves at once,
// also to a richer rung when that one is now the faster (a ladder measured
// out of order): the dwell time guards only moves away from a rung that
// still meets the budget.
TEST_F(OverloadControllerTest, ARungMissingItsBudgetIsLeftAtOnceEvenForARicherOne) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs(12));  // s = 30 / 10 / 12
  // Rung 1 shown to wait for all work: one answer 30 ms late behind 30 ms.
  const Ticket full = AdmitExact();
  Ticket t = AdmitWithin(15, 1);
  ASSERT_EQ(t.rung, 1u);
  Advance(40);
  controller_.Finish(t, true);
  ASSERT_DOUBLE_EQ(controller_.Parallelism(1), 1);
  // W = 30. The lower class (budget 32): 60 / 40 / 12.03: rung 2, a move down.
  t = Admit();
  ASSERT_EQ(t.rung, 2u);
  ASSERT_EQ(controller_.CurrentRung(0), 2u);
  // Rung 2 shown to wait too (42 ms behind 30): P_2 = 1.
  Advance(42);
  controller_.Finish(t, true);
  ASSERT_DOUBLE_EQ(controller_.Parallelism(2), 1);
  // Still W = 30, 42 ms after the move: 60 / 40 / 42. Rung 2 misses 32, and
  // the fastest is rung 1 (40, within the whole target): taken at once.
  t = Admit();
  EXPECT_EQ(t.rung, 1u);
  EXPECT_EQ(controller_.CurrentRung(0), 1u);
  controller_.Finish(t, false);
  controller_.Finish(full, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
}

// A class whose rung misses its budget moves down to a cheaper rung within
// it, even when a richer one is predicted within it too: a richer rung adds
// more work per request, and taken at once under load it fills the work in
// flight before the next admission can see it.
TEST_F(OverloadControllerTest, ARungMissingItsBudgetGoesToACheaperRungBeforeARicherOne) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs(2, 31));  // s = 30 / 31 / 2: rung 1 measured slower than rung 0
  // Behind an exact request (W = 30) rung 0 misses the lower budget (32):
  // the lower class moves to rung 1 (31 + 30 / 1024). That answer waits 60 ms
  // behind the 30 ms: P_1 = 0.5.
  const Ticket full = AdmitExact();
  Ticket t = Admit();
  ASSERT_EQ(t.rung, 1u);
  ASSERT_EQ(controller_.CurrentRung(0), 1u);
  Advance(91);
  controller_.Finish(full, false);
  controller_.Finish(t, true);
  ASSERT_DOUBLE_EQ(controller_.Parallelism(1), 0.5);
  // A highest-priority request with a near deadline puts 2 ms in flight:
  // rung 0 32 (within 32), rung 1 31 + 2 / 0.5 = 35 (over), rung 2 2.
  const Ticket cheap = AdmitWithin(5, 1);
  ASSERT_EQ(cheap.rung, 2u);
  ASSERT_DOUBLE_EQ(controller_.PredictMs(0), kLowerBudgetMs);
  ASSERT_DOUBLE_EQ(controller_.PredictMs(1), 35);
  t = Admit();
  EXPECT_EQ(t.rung, 2u) << "down to the cheaper rung within the budget, not up to the full ensemble";
  EXPECT_EQ(controller_.CurrentRung(0), 2u);
  controller_.Finish(t, false);
  controller_.Finish(cheap, false);
}

// A class whose rung misses its budget, with no cheaper rung within it,
// steps one rung up at once when that rung is within the budget and was
// shown lately to carry the load (a cheap rung waiting behind its host's
// queue can miss where the richer one does not).
TEST_F(OverloadControllerTest, ARungMissingItsBudgetStepsOneUpToARungWithinIt) {
  ASSERT_NO_FATAL_FAILURE(PutTheLowerClassOnRungTwoAtItsFloor());
  const auto [a, b] = RungOneWork();
  const Ticket t = Admit();
  EXPECT_EQ(t.rung, 1u) << "one step up at once, neither shed nor left on rung 2";
  EXPECT_EQ(controller_.CurrentRung(0), 1u);
  for (const Ticket& done : {t, a, b}) controller_.Finish(done, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
}

// ... but not to a rung the class has not left lately: nothing shows that
// rung carries the load (it is within the budget only because it waits less
// for the work in flight); the request is shed.
TEST_F(OverloadControllerTest, NoStepUpAtOnceToARungNotShownLatelyToCarryTheLoad) {
  ASSERT_NO_FATAL_FAILURE(PutTheLowerClassOnRungTwoAtItsFloor(/*via_rung_one=*/false));
  const auto [a, b] = RungOneWork();
  const Ticket t = Admit();
  EXPECT_EQ(t.rung, kShed);
  EXPECT_EQ(controller_.CurrentRung(0), 2u);
  for (const Ticket& done : {a, b}) controller_.Finish(done, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
}

// The step up at once comes at most once per dwell time: back on the
// cheaper rung within a dwell time of the step (the richer rung, behind
// work, missed its budget while the cheaper one did not), the class that
// finds the cheaper rung over its budget again does not step up a second
// time (the request is shed: no rung it can use now meets the target); a
// dwell time after the first step it steps up again.
TEST_F(OverloadControllerTest, TheStepUpAtOnceComesAtMostOncePerDwellTime) {
  ASSERT_NO_FATAL_FAILURE(PutTheLowerClassOnRungTwoAtItsFloor());
  auto [a, b] = RungOneWork();
  Ticket t = Admit();
  ASSERT_EQ(t.rung, 1u) << "the step up";
  const Clock::time_point stepped = now_;
  for (const Ticket& done : {t, a, b}) controller_.Finish(done, false);
  // Rung 2 learns a high parallelism: highest-priority requests hurried to
  // it, each answered in its service time behind another one in flight.
  for (int i = 0; i < 40 && controller_.Parallelism(2) < 4; ++i) {
    const Ticket x = AdmitWithin(3, 1);
    const Ticket y = AdmitWithin(3, 1);
    ASSERT_EQ(y.rung, 2u);
    Advance(2);
    controller_.Finish(y, true);
    controller_.Finish(x, false);
  }
  ASSERT_GE(controller_.Parallelism(2), 4);
  // 30 ms in flight: rung 1 at 40 misses the lower budget (32), rung 2
  // (2 + 30 / P_2) is within it: the class moves down; that request's answer
  // then takes 200 ms: P_2 back to 0.5.
  const Ticket exact = AdmitExact();
  t = Admit();
  ASSERT_EQ(t.rung, 2u);
  ASSERT_EQ(controller_.CurrentRung(0), 2u);
  Advance(200);
  controller_.Finish(t, true);
  controller_.Finish(exact, false);
  ASSERT_DOUBLE_EQ(controller_.Parallelism(2), 0.5);
  ASSERT_LT(now_ - stepped, std::chrono::milliseconds(1000));
  std::tie(a, b) = RungOneWork();  // rung 2 at 42 again, rung 1 at 30
  t = Admit();
  EXPECT_EQ(t.rung, kShed) << "no second step up within a dwell time of the first";
  EXPECT_EQ(controller_.CurrentRung(0), 2u);
  now_ = stepped + std::chrono::milliseconds(1000);
  t = Admit();
  EXPECT_EQ(t.rung, 1u) << "a dwell time after the first step, the next";
  EXPECT_EQ(controller_.CurrentRung(0), 1u);
  for (const Ticket& done : {t, a, b}) controller_.Finish(done, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
}

// Arrivals every `gap_ms` from `from_ms` to `to_ms` after `origin`, each of
// the highest priority and answered at once (nothing stays in flight): the
// rungs they got (where the rung changed), none a probe.
using Moves = std::vector<std::pair<int, size_t>>;

class OverloadControllerRateTest : public OverloadControllerTest {
 protected:
  Moves Stream(Clock::time_point origin, int from_ms, int to_ms, int gap_ms) {
    return StreamEvery(origin, from_ms, to_ms, std::chrono::microseconds(1000 * gap_ms));
  }
  // Highest-priority arrivals every `gap` from `from_ms` to `to_ms` after
  // `origin`, each answered at once: where the class moved (ms, rung).
  Moves StreamEvery(Clock::time_point origin, int from_ms, int to_ms, std::chrono::microseconds gap) {
    Moves moves;
    const auto end = origin + std::chrono::milliseconds(to_ms);
    for (now_ = origin + std::chrono::milliseconds(from_ms); now_ < end; now_ += gap) {
      const int at = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(now_ - origin).count());
      const Ticket t = Admit(1);
      EXPECT_EQ(t.probe_class, -1) << at << " ms";
      controller_.Finish(t, false);
      if (moves.empty() || moves.back().second != t.rung) moves.emplace_back(at, t.rung);
    }
    now_ -= gap;  // the last arrival's time
    return moves;
  }
  // After MeasureRungs and P_0 = P_1 = P_2 = 1: 32 ms in flight (a
  // lower-priority request hurried to rung 2): rung 0 62, rung 1 42, rung 2
  // 34, and the class leaves rung 0 for rung 2 (rung 1 it never left).
  // Returns when it left.
  Clock::time_point LeaveRungZero() {
    const Ticket exact = AdmitExact();
    const Ticket hurried = AdmitWithin(3);
    EXPECT_EQ(hurried.rung, 2u);
    const Ticket pushed = Admit(1);
    EXPECT_EQ(pushed.rung, 2u);
    for (const Ticket& done : {exact, hurried, pushed}) controller_.Finish(done, false);
    return now_;
  }
  // The highest class carries arrivals every `carried` on rung 1 for 1.5 s
  // (rung 0, left at a trickle, is held off), is pushed to rung 2 by 32 ms
  // in flight, and climbs back to rung 1 a dwell time later at arrivals
  // every `back`; then 30 ms in flight (rung 1 at 40, the budget, over its
  // probation keep of 30; rung 2 at 32): the rung the class is on after it.
  size_t ClimbBack(std::chrono::microseconds carried, std::chrono::microseconds back) {
    EXPECT_NO_FATAL_FAILURE(MeasureRungs());
    EXPECT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());  // P = 1 everywhere
    // 20 ms of rung-1 work in flight (lower-priority requests with deadlines):
    // rung 0 at 50 misses 40, and the highest class moves to rung 1 (30).
    const Ticket a = AdmitWithin(20);
    const Ticket b = AdmitWithin(25);
    EXPECT_EQ(a.rung, 1u);
    EXPECT_EQ(b.rung, 1u);
    const Ticket moved = Admit(1);
    EXPECT_EQ(moved.rung, 1u);
    for (const Ticket& done : {a, b, moved}) controller_.Finish(done, false);
    EXPECT_EQ(StreamEvery(now_, 1, 1500, carried), (Moves{{1, 1u}}));
    const Ticket exact = AdmitExact();
    const Ticket hurried = AdmitWithin(3);
    const Ticket pushed = Admit(1);
    EXPECT_EQ(pushed.rung, 2u);
    for (const Ticket& done : {exact, hurried, pushed}) controller_.Finish(done, false);
    const Moves climb = StreamEvery(now_, 1, 1100, back);
    EXPECT_EQ(climb.size(), 2u);
    EXPECT_EQ(climb.back().second, 1u) << "the climb back, a dwell time later (not held off)";
    const Ticket full = AdmitExact();
    const Ticket t = Admit(1);
    const size_t rung = controller_.CurrentRung(1);
    EXPECT_EQ(t.rung, rung);
    controller_.Finish(t, false);
    controller_.Finish(full, false);
    return rung;
  }
  // The class carries `gap_ms` arrivals on rung 0 for two seconds, then leaves it.
  Clock::time_point CarryThenLeaveRungZero(int gap_ms) {
    EXPECT_NO_FATAL_FAILURE(MeasureRungs());
    EXPECT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());
    const Clock::time_point start = now_;
    EXPECT_EQ(Stream(start, 0, 2000, gap_ms), (Moves{{0, 0u}}));
    now_ = start + std::chrono::milliseconds(2000);
    return LeaveRungZero();
  }
};

// Pushed off rung 0 by a load five times what it carried: no climb to it,
// nor probe, while the rate stays well above that (rung 1, never left,
// is climbed to as ever: a closed-loop client is not pinned on a guess),
// for at most 2^3 dwell times after it was left...
TEST_F(OverloadControllerRateTest, ARungPushedOffByAGrownLoadIsHeldOffWhileTheLoadStays) {
  const Clock::time_point left = CarryThenLeaveRungZero(10);                      // 0.1 per ms
  EXPECT_EQ(Stream(left, 2, 8400, 2), (Moves{{2, 2u}, {1000, 1u}, {8000, 0u}}));  // 0.5 per ms
  EXPECT_GT(controller_.ArrivalsPerMs(), 0.45);
}

// A class on its cheapest rung whose prediction misses the whole target
// does not step up at once to a rung the load is well past (held off), nor
// jump to any richer rung predicted within the budget only because it waits
// less for the work in flight (its service time is the larger): the request
// is shed, the last resort, and the class stays.
TEST_F(OverloadControllerRateTest, TheCheapestRungMissingTheTargetShedsRatherThanStepUpToARungHeldOff) {
  const Clock::time_point left = CarryThenLeaveRungZero(10);  // the highest class on rung 2
  Stream(left, 2, 1100, 10);                                  // 0.1 per ms: a dwell time on, it climbs to rung 1
  ASSERT_EQ(controller_.CurrentRung(1), 1u);
  // Pushed off rung 1 (10 + 32 > 40) to rung 2, whose answer then takes
  // 200 ms behind the 32 ms: P_2 falls to its floor, 0.5.
  const Ticket exact = AdmitExact();
  const Ticket hurried = AdmitWithin(3);
  const Ticket pushed = Admit(1);
  ASSERT_EQ(pushed.rung, 2u);
  Advance(200);
  for (const Ticket& done : {exact, hurried}) controller_.Finish(done, false);
  controller_.Finish(pushed, true);
  ASSERT_DOUBLE_EQ(controller_.Parallelism(2), 0.5);
  // The rate grows to five times what rung 1 carried: held off, no climb.
  EXPECT_EQ(Stream(now_, 0, 2500, 2), (Moves{{0, 2u}}));
  // 30 ms in flight: rung 2 predicted at 2 + 30 / 0.5 = 62 (over the target),
  // rung 1 at 10 + 30 = 40 (within it), rung 0 at 60.
  const Ticket full = AdmitExact();
  ASSERT_DOUBLE_EQ(controller_.PredictMs(2), 62);
  ASSERT_DOUBLE_EQ(controller_.PredictMs(1), kTargetMs);
  const Ticket t = Admit(1);
  EXPECT_EQ(t.rung, kShed) << "shed, not served by rung 1";
  EXPECT_EQ(t.fastest, 2u);
  EXPECT_EQ(controller_.CurrentRung(1), 2u);
  controller_.Finish(full, false);
  EXPECT_DOUBLE_EQ(controller_.WorkInFlightMs(), 0);
}

// A climb back to a rung whose last stay, lately, carried the rate now (a
// judged one) is no fresh climb: no probation. Rung 1 keeps 30 ms of work
// in flight (40 predicted, the budget).
TEST_F(OverloadControllerRateTest, AClimbBackToARungThatCarriedTheRateHasNoProbation) {
  // 0.5 per ms carried, back at 0.33.
  EXPECT_EQ(ClimbBack(std::chrono::microseconds(2000), std::chrono::microseconds(3000)), 1u)
      << "a return, not a fresh climb: no probation";
}

// The same climb back at a rate above what rung 1 carried (about 0.455
// against 0.435 per ms, the push's three arrivals counted: not so far above
// that it holds the rung off) is a fresh climb, on probation: the 30 ms in
// flight send the class back to rung 2.
TEST_F(OverloadControllerRateTest, AClimbBackAtARateAboveWhatTheRungCarriedHasProbation) {
  EXPECT_EQ(ClimbBack(std::chrono::microseconds(2500), std::chrono::microseconds(2222)), 2u)
      << "a climb at a rate the rung did not carry: on probation";
}

// ... or until the rate falls back.
TEST_F(OverloadControllerRateTest, AHeldOffRungIsClimbedToOnceTheLoadFalls) {
  const Clock::time_point left = CarryThenLeaveRungZero(10);
  EXPECT_EQ(Stream(left, 2, 3000, 2), (Moves{{2, 2u}, {1000, 1u}}));
  const Moves moves = Stream(left, 3000, 3600, 10);  // 0.1 per ms: back at what it carried
  ASSERT_EQ(moves.size(), 2u);
  EXPECT_EQ(moves[0], (std::pair<int, size_t>{3000, 1u}));
  EXPECT_EQ(moves[1].second, 0u);
  EXPECT_LT(moves[1].first, 3200) << "within two windows of the fall";
}

// Half again the rate it carried (0.33 -> 0.5 per ms) is clearly past it.
TEST_F(OverloadControllerRateTest, HalfAgainTheCarriedRateHoldsTheRungOff) {
  const Clock::time_point left = CarryThenLeaveRungZero(3);
  EXPECT_EQ(Stream(left, 2, 2400, 2), (Moves{{2, 2u}, {1000, 1u}}));
}

// When the hold expires and the climb then fails within its probation
// (the load is still past the rung), the rate it failed at is not taken
// as carried: the rung is held off again.
TEST_F(OverloadControllerRateTest, AFailedClimbLeavesTheCarriedRateAsItWas) {
  const Clock::time_point left = CarryThenLeaveRungZero(10);  // carried 0.1 per ms
  EXPECT_EQ(Stream(left, 2, 8002, 2), (Moves{{2, 2u}, {1000, 1u}, {8000, 0u}}));
  // 30 ms in flight: rung 0 60 misses its probation limit (40), rung 1 40 fits: back to rung 1.
  now_ = left + std::chrono::milliseconds(8002);
  const Ticket exact = AdmitExact();
  const Ticket undone = Admit(1);
  EXPECT_EQ(undone.rung, 1u);
  for (const Ticket& done : {exact, undone}) controller_.Finish(done, false);
  EXPECT_EQ(Stream(left, 8004, 13000, 2), (Moves{{8004, 1u}}));  // past the failed climb's 2 dwell times
}

// A class pushed off a rung at the rate it carried (a fluctuation of the
// queue) climbs back a dwell time later, one rung per dwell, as ever.
TEST_F(OverloadControllerRateTest, ARungLeftAtTheRateItCarriedIsTriedAgain) {
  const Clock::time_point left = CarryThenLeaveRungZero(2);  // 0.5 per ms, before and after
  EXPECT_EQ(Stream(left, 2, 2400, 2), (Moves{{2, 2u}, {1000, 1u}, {2000, 0u}}));
}

// Below a few tens of arrivals per window the rate is not judged: a leaving
// at a low rate holds nothing off (the climbs come a dwell time apart).
TEST_F(OverloadControllerRateTest, ALowArrivalRateHoldsNoRungOff) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());
  const Clock::time_point left = LeaveRungZero();                                 // having carried a few arrivals
  EXPECT_EQ(Stream(left, 8, 2100, 8), (Moves{{8, 2u}, {1000, 1u}, {2000, 0u}}));  // 12.5 arrivals per 100 ms
}

// The tail (the target is a p99, the prediction a mean). `answers` exact
// requests, each alone at rung 0 (s_0 = 30 ms): one in ten takes `slow_ms`,
// the others 30 ms; the last ten are all 30 ms, so s_0 is back near 30.
void AnswerAloneAtRungZero(OverloadControllerTest* test, int answers, int slow_ms) {
  for (int i = 0; i < answers; ++i) {
    const Ticket t = test->AdmitExact();
    ASSERT_EQ(t.rung, 0u);
    test->Advance(i % 10 == 5 && i < answers - 10 ? slow_ms : 30);
    test->Finish(t, true);
  }
}

// One answer in ten at three times its prediction: rung 0's tail ratio
// settles near 3, and at 30 ms x 3 it misses the highest class's 40 ms
// although its mean prediction (about 30 ms) fits: a class not on rung 0
// would not move there. On rung 0, with none of its own answers late, the
// class stays: the usual tail (the 90th percentile, near 1) fits.
TEST_F(OverloadControllerTest, ASlowTailKeepsTheClassWhereItsUsualTailFitsWhileFewAnswersAreLate) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(AnswerAloneAtRungZero(this, 400, 90));
  EXPECT_GT(controller_.TailRatio(0), 2.5);
  EXPECT_LT(controller_.TailRatio(0), 3.5);
  EXPECT_LT(controller_.UsualTailRatio(0) * controller_.PredictMs(0), kTargetMs);
  EXPECT_DOUBLE_EQ(controller_.LateShare(1), 0) << "exact answers are no class's";
  const Ticket t = Admit(1);
  EXPECT_EQ(t.rung, 0u) << "the stay is judged on the usual tail";
  Finish(t, false);
}

// The same, and then three of the class's own requests fail after 50 ms,
// past its 40 ms budget: late, its share of late answers passes half a
// percent, and its stay is judged on rung 0's tail again: the class serves
// at rung 1 instead.
TEST_F(OverloadControllerTest, ASlowTailMovesTheClassDownOnceItsAnswersComeLate) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(AnswerAloneAtRungZero(this, 400, 90));
  for (int i = 0; i < 3; ++i) {
    const Ticket late = Admit(1);
    ASSERT_EQ(late.rung, 0u);
    Advance(50);
    Finish(late, false);
  }
  EXPECT_GT(controller_.LateShare(1), 0.005);
  EXPECT_DOUBLE_EQ(controller_.LateShare(0), 0) << "the lower class had none late";
  const double mean = controller_.PredictMs(1);
  const Ticket t = Admit(1);
  EXPECT_EQ(t.rung, 1u) << "rung 0's tail misses the target";
  EXPECT_DOUBLE_EQ(t.predicted_ms, mean) << "the ticket keeps the mean prediction";
  EXPECT_DOUBLE_EQ(t.tail_ratio, 1) << "rung 1's";
  Finish(t, false);
  const Ticket exact = AdmitExact();
  EXPECT_DOUBLE_EQ(exact.tail_ratio, controller_.TailRatio(0)) << "rung 0's, for /metrics";
  Finish(exact, false);
}

// A class's share of late answers counts its answers past its budget and its
// failures past it; a failure within the budget and an exact request's answer
// count for nothing, and answers on time bring the share back down.
TEST_F(OverloadControllerTest, TheShareOfLateAnswersCountsTheClassesOwn) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  auto answer = [&](int priority, int ms, bool ok) {
    const Ticket t = Admit(priority);
    Advance(ms);
    Finish(t, ok);
  };
  answer(0, 31, true);  // within the lower class's 32 ms
  EXPECT_DOUBLE_EQ(controller_.LateShare(0), 0);
  answer(0, 33, true);  // past the lower class's 32 ms
  const double one = controller_.LateShare(0);
  EXPECT_GT(one, 0);
  EXPECT_DOUBLE_EQ(controller_.LateShare(1), 0);
  answer(1, 33, true);  // within the highest class's 40 ms
  EXPECT_DOUBLE_EQ(controller_.LateShare(1), 0);
  answer(0, 1, false);  // a failure within the budget
  EXPECT_DOUBLE_EQ(controller_.LateShare(0), one);
  const Ticket exact = AdmitExact();
  Advance(60);
  Finish(exact, true);
  EXPECT_DOUBLE_EQ(controller_.LateShare(0), one);
  EXPECT_DOUBLE_EQ(controller_.LateShare(1), 0);
  answer(1, 41, false);  // a failure past the budget
  EXPECT_GT(controller_.LateShare(1), 0);
  answer(0, 30, true);
  EXPECT_LT(controller_.LateShare(0), one);
}

// Rung 0's tail is taken as 1 and the highest class serves there.
void ExpectNoTailAtRungZero(OverloadControllerTest* test, const OverloadController& controller) {
  EXPECT_DOUBLE_EQ(controller.TailRatio(0), 1);
  const Ticket t = test->Admit(1);
  EXPECT_EQ(t.rung, 0u);
  test->Finish(t, false);
}

// The same answers without the slow ones teach a tail of 1: rung 0 serves.
TEST_F(OverloadControllerTest, AnswersThatKeepTheirPredictionTeachNoTail) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(AnswerAloneAtRungZero(this, 400, 30));
  ExpectNoTailAtRungZero(this, controller_);
}

// A 99th percentile needs about a hundred answers: after sixty (five of
// them slow) the tail is still taken as 1.
TEST_F(OverloadControllerTest, FewAnswersTeachNoTailYet) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(AnswerAloneAtRungZero(this, 60, 90));
  ExpectNoTailAtRungZero(this, controller_);
}

// After TeachCheapRungsToWaitForAllWork: `answers` highest-priority
// requests at rung 2 behind 10 ms of work (a rung-1 request in flight;
// predicted 12 ms or more, at a tenth of the target or more), each taking
// 12 ms but one in ten `slow_ms`.
void AnswerAtRungTwoBehindWork(OverloadControllerTest* test, int answers, int slow_ms) {
  const Ticket load = test->AdmitWithin(20, 1);
  ASSERT_EQ(load.rung, 1u);
  for (int i = 0; i < answers; ++i) {
    const Ticket t = test->AdmitWithin(15, 1);
    ASSERT_EQ(t.rung, 2u);
    ASSERT_GE(t.predicted_ms, 0.1 * kTargetMs);
    test->Advance(i % 10 == 5 ? slow_ms : 12);
    test->Finish(t, true);
  }
  test->Finish(load, false);
}

// Answers predicted below a tenth of the target (4 ms of 40) cannot raise
// the tail: rung 2 (s_2 = 2 ms), reached by near deadlines, one answer in
// ten at 8 ms; then a hundred answers behind 10 ms of work (predicted 12
// ms, at a tenth of the target or more) that keep their prediction let the
// estimate count: it is still 1, where the slow answers before, had they
// counted, would have left it near 4.
TEST_F(OverloadControllerTest, AnswersPredictedFarBelowTheTargetTeachNoTail) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());
  for (int i = 0; i < 400; ++i) {
    const Ticket t = AdmitWithin(5);
    ASSERT_EQ(t.rung, 2u);
    ASSERT_LT(t.predicted_ms, 0.1 * kTargetMs);
    Advance(i % 10 == 5 ? 8 : 2);
    Finish(t, true);
  }
  ASSERT_NO_FATAL_FAILURE(AnswerAtRungTwoBehindWork(this, 100, 12));
  EXPECT_LT(controller_.TailRatio(2), 1.1);
}

// A tail learnt at a peak fades once the answers come in far below the
// target: rung 2 behind 10 ms of work (predicted 12-18 ms as P_2 follows
// the answers: nine in ten take 12 ms, one 36) learns a tail above 2; then alone
// (predicted 2 ms, under a tenth of the target) its answers lower it.
TEST_F(OverloadControllerTest, ATailLearntAtAPeakFadesAsTheLoadEases) {
  ASSERT_NO_FATAL_FAILURE(MeasureRungs());
  ASSERT_NO_FATAL_FAILURE(TeachCheapRungsToWaitForAllWork());
  ASSERT_NO_FATAL_FAILURE(AnswerAtRungTwoBehindWork(this, 400, 36));
  const double peak = controller_.TailRatio(2);
  EXPECT_GT(peak, 2);
  for (int i = 0; i < 2000; ++i) {
    const Ticket t = AdmitWithin(5);
    ASSERT_EQ(t.rung, 2u);
    ASSERT_LT(t.predicted_ms, 0.1 * kTargetMs);
    Advance(2);
    Finish(t, true);
  }
  EXPECT_LT(controller_.TailRatio(2), 1.5) << "from " << peak;
}

// By default a rung's first two answers teach nothing (TorchScript's first
// runs are slow): a cold 200 ms answer does not send an idle ensemble down;
// the third answer is the first measured.
TEST(OverloadControllerColdTest, TheFirstTwoAnswersOfARungAreNotLearnt) {
  Clock::time_point now = Clock::time_point{} + std::chrono::hours(1);
  OverloadController controller(Spec(), [&now] { return now; });
  for (int cold_ms : {200, 150}) {
    const OverloadController::Ticket t = controller.Admit({});
    ASSERT_EQ(t.rung, 0u);
    now += std::chrono::milliseconds(cold_ms);
    controller.Finish(t, true);
    EXPECT_EQ(controller.ServiceMs(0), 0) << "a cold answer of " << cold_ms << " ms was learnt";
  }
  const OverloadController::Ticket t = controller.Admit({});
  EXPECT_EQ(t.rung, 0u) << "still rung 0 after two cold answers";
  now += std::chrono::milliseconds(30);
  controller.Finish(t, true);
  EXPECT_DOUBLE_EQ(controller.ServiceMs(0), 30);
}

}  // namespace
}  // namespace es
