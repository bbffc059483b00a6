// Acceptance of an ensemble's overload ladder (docs/overload.md) through real
// gRPC calls to a real server.
//
// The repository (make_overload_models.py): slow_ens = mean of fast_a (x + 1,
// ~0 ms) and fast_b (x + 2, ~0 ms) on host cpu0 and slow_c (x + 3 after a
// loop of sines, ~30 ms idle) on host cpu1, so x + 2 in ~30 ms; its ladder is
// [slow_ens (accuracy 0.95), fast_a (accuracy 0.8)], latency target 150 ms
// (120 ms for requests of the default priority, which all of these are),
// dwell 1000 ms. Served by fast_a it answers x + 1: the values tell the rungs
// apart as well as the `served_by` parameter does. quick_ens (ladder without
// accuracies) and plain_ens (no ladder) are ensembles of the two fast models.
//
//  - Idle: answers are the ensemble's own (served_by slow_ens, served_accuracy
//    0.95, x + 2), exact or not; a ladder without accuracies gives served_by
//    only; an ensemble without a ladder neither.
//  - A request's deadline: after warm-up (the full path measured idle, well
//    over 15 ms), requests with a 5 ms gRPC deadline, or with parameter
//    `timeout` of 5000 µs, are answered by fast_a (its values, accuracy and
//    member_versions, under the ensemble's name) instead of failing; with
//    `exact: true` and a 5 ms gRPC deadline they fail DEADLINE_EXCEEDED, as
//    without a ladder (with `exact: true` and parameter `timeout` the server
//    answers late, in full: either outcome is accepted, a cheaper rung's
//    answer is not).
//  - Load: 24 clients calling slow_ens with `exact: true` take well over
//    the target (the premise: median over 1.5 x the target); the same 24
//    without it, for 4 s, are answered mostly by fast_a (after 1 s of
//    warm-up, at least 4 of 5 answers), with a median latency within the
//    target, and none fails (nor is shed), while `exact: true` requests sent
//    meanwhile (one every ~100 ms) are all answered by slow_ens itself.
//  - After a load stops, the answers come back to slow_ens within dwell_ms
//    + 2.5 s, and stay there.
//  - A ladder naming a model that does not exist stops the server's start
//    with an error naming the config file, the line and overload.ladder[1].
//
// Each test waits (polling idle requests) until slow_ens answers in full
// before it starts, so the order of the tests does not matter.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "tests/common/test_paths.h"
#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/integration/shared_server.h"

namespace es::it {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// make_overload_models.py's LATENCY_TARGET_MS and DWELL_MS.
constexpr double kTargetMs = 150;
constexpr int64_t kDwellMs = 1000;
// Clients of the loads.
// 24: the premise (their median over 1.5 x the target when all ask for the
// full ensemble) then holds with slow_c from ~14 ms (a CPU twice as fast as
// the 2-core EPYC it was calibrated on) to well past its ~28 ms here, while
// one request alone stays within the lower priorities' 120 ms.
constexpr int kClients = 24;
const std::string kEnsemble = "slow_ens";
const std::string kCheapRung = "fast_a";
// What each answers: the input plus this.
constexpr float kEnsembleOffset = 2.0f;  // mean of +1, +2, +3
constexpr float kCheapOffset = 1.0f;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// One row of four values, base .. base + 3.
inference::ModelInferRequest RowRequest(const std::string& model, float base, bool exact = false) {
  auto request = RawRequest(model, {1, 4}, {base, base + 1, base + 2, base + 3});
  if (exact) SetBoolParameter(&request, "exact", true);
  return request;
}

// One answer, decoded.
struct Answer {
  grpc::Status status;
  std::string model_name;
  std::optional<std::string> served_by;
  std::optional<double> served_accuracy;
  std::string member_versions;
  // output - input (to the nearest 0.5) when the same for all four values,
  // NaN otherwise.
  float offset = NAN;
  double latency_ms = 0;
  double sent_ms = 0;  // since the load started (loads only)
  bool exact = false;
};

Answer Decode(const InferResult& r, float base) {
  Answer a;
  a.status = r.status;
  a.latency_ms = std::chrono::duration<double, std::milli>(r.latency).count();
  if (!r.status.ok()) return a;
  a.model_name = r.response.model_name();
  const auto& params = r.response.parameters();
  if (auto it = params.find("served_by"); it != params.end()) a.served_by = it->second.string_param();
  if (auto it = params.find("served_accuracy"); it != params.end()) a.served_accuracy = it->second.double_param();
  if (auto it = params.find("member_versions"); it != params.end()) a.member_versions = it->second.string_param();
  Fp32Tensor out;
  if (!GetFp32Output(r.response, "output", &out) || out.values.size() != 4) return a;
  // Every model adds a multiple of 0.5 (the bases are small: exact in FP32).
  const float offset = std::round((out.values[0] - base) * 2.0f) / 2.0f;
  for (size_t i = 0; i < 4; ++i) {
    if (std::fabs(out.values[i] - (base + static_cast<float>(i) + offset)) > 1e-3f) return a;
  }
  a.offset = offset;
  return a;
}

Answer Call(Stub& stub, const inference::ModelInferRequest& request, milliseconds timeout = kRpcTimeout) {
  float base = 0;
  std::memcpy(&base, request.raw_input_contents(0).data(), sizeof base);
  return Decode(Infer(stub, request, timeout), base);
}

std::string Show(const Answer& a) {
  std::ostringstream s;
  if (!a.status.ok()) {
    s << Describe(a.status);
  } else {
    s << "served_by=" << a.served_by.value_or("(none)")
      << " served_accuracy=" << (a.served_accuracy ? std::to_string(*a.served_accuracy) : "(none)")
      << " offset=" << a.offset << " model_name=" << a.model_name;
  }
  s << " after " << a.latency_ms << " ms";
  return s.str();
}

double Median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Checks an OK answer of slow_ens is consistent: the rung it names made the
// values it carries, with the rung's accuracy, under the ensemble's name.
::testing::AssertionResult ConsistentEnsembleAnswer(const Answer& a) {
  if (!a.status.ok()) return ::testing::AssertionFailure() << Show(a);
  if (a.model_name != kEnsemble) return ::testing::AssertionFailure() << "model_name: " << Show(a);
  if (a.served_by == kEnsemble) {
    if (a.offset != kEnsembleOffset || a.served_accuracy != 0.95) return ::testing::AssertionFailure() << Show(a);
  } else if (a.served_by == kCheapRung) {
    if (a.offset != kCheapOffset || a.served_accuracy != 0.8) return ::testing::AssertionFailure() << Show(a);
  } else {
    return ::testing::AssertionFailure() << "served by neither rung: " << Show(a);
  }
  return ::testing::AssertionSuccess();
}

// The answers of a load per 200 ms of sending time (for failure messages):
// how many came from each rung, failed, or were exact.
std::string Timeline(const std::vector<Answer>& answers) {
  std::map<int, std::array<int, 4>> buckets;  // cheap, full, failed, exact
  for (const Answer& a : answers) {
    auto& b = buckets[static_cast<int>(a.sent_ms / 200)];
    if (!a.status.ok()) {
      ++b[2];
    } else if (a.exact) {
      ++b[3];
    } else {
      ++b[a.served_by == kCheapRung ? 0 : 1];
    }
  }
  std::ostringstream s;
  s << "sent at | by " << kCheapRung << " | by " << kEnsemble << " | failed | exact\n";
  for (const auto& [k, b] : buckets) {
    s << k * 200 << " ms | " << b[0] << " | " << b[1] << " | " << b[2] << " | " << b[3] << "\n";
  }
  return s.str();
}

// Clients calling slow_ens in a loop, each on a connection of its own,
// until Stop().
class Load {
 public:
  // `clients` calling without pause (exact: with `exact: true`), and
  // `exact_samplers` sending one `exact: true` request every 100 ms.
  Load(const ServerProcess& server, int clients, bool exact, int exact_samplers = 0) : start_(Clock::now()) {
    for (int t = 0; t < clients + exact_samplers; ++t) {
      const bool sampler = t >= clients;
      threads_.emplace_back([this, &server, t, sampler, exact] {
        auto stub = server.NewConnectionStub();
        const bool send_exact = sampler || exact;
        for (int i = 0; !stop_.load(); ++i) {
          const float base = static_cast<float>(t * 10 + i % 10);
          const Clock::time_point sent = Clock::now();
          Answer a = Call(*stub, RowRequest(kEnsemble, base, send_exact));
          a.sent_ms = Ms(sent - start_);
          a.exact = send_exact;
          {
            std::lock_guard<std::mutex> lock(mu_);
            answers_.push_back(std::move(a));
          }
          if (sampler) std::this_thread::sleep_for(milliseconds(100));  // pacing, not waiting for anything
        }
      });
    }
  }
  ~Load() { Stop(); }

  // Stops and joins the clients; returns every answer. The time it
  // returns: Stopped().
  std::vector<Answer> Stop() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
    threads_.clear();
    stopped_ = Clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    return answers_;
  }
  Clock::time_point Stopped() const { return stopped_; }
  // Answers so far.
  std::vector<Answer> Snapshot() {
    std::lock_guard<std::mutex> lock(mu_);
    return answers_;
  }

 private:
  const Clock::time_point start_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::vector<Answer> answers_;  // GUARDED_BY(mu_)
  Clock::time_point stopped_{};
};

class OverloadTest : public SharedServerSuite<OverloadTest> {
 public:  // PrepareServer: called by SharedServerSuite
  // The overload models (make_overload_models.py): the fast ones on cpu0,
  // slow_c on cpu1, one executor each.
  static std::string PrepareServer(const std::filesystem::path& dir, ServerProcess::Options* options) {
    std::string output;
    const int rc =
        RunCommand({"/usr/bin/python3", std::string(es::test_paths::kIntegrationSourceDir) + "/make_overload_models.py",
                    dir.string()},
                   seconds(180), &output);
    if (rc != 0) return "make_overload_models.py failed (rc " + std::to_string(rc) + "): " + output;
    options->repository = dir.string();
    options->hosts = {{"cpu0", 0, "", 1}, {"cpu1", 1, "", 1}};
    return "";
  }

 protected:
  // Idle requests, one after the other, until slow_ens answers in full
  // twice in a row (at most `limit`; a previous test's load may have left
  // the ladder down for up to dwell_ms). One full answer is not enough: while
  // the ladder sits below the ensemble it sends one request per dwell time
  // up as a probe, and a poll that happens to be that probe is answered in
  // full with the ladder still down; the next probe is a dwell time away,
  // so two in a row are the ladder back. Returns the answers, the last one
  // a full one.
  static std::vector<Answer> WaitUntilServedInFull(Stub& stub, milliseconds limit = milliseconds(15000)) {
    std::vector<Answer> answers;
    const auto give_up = Clock::now() + limit;
    int in_full = 0;
    while (Clock::now() < give_up) {
      answers.push_back(Call(stub, RowRequest(kEnsemble, 7)));
      const Answer& a = answers.back();
      if (a.status.ok() && !a.served_by) break;  // no ladder here, nothing to wait for
      in_full = a.status.ok() && a.served_by == kEnsemble ? in_full + 1 : 0;
      if (in_full == 2) break;
      std::this_thread::sleep_for(milliseconds(20));  // pacing between polls
    }
    return answers;
  }
};

// Idle answers come from the ensemble itself and say so; the accuracy only
// where the ladder gives it; no served_by without a ladder.
TEST_F(OverloadTest, IdleAnswersComeFromTheEnsembleItself) {
  WatchdogScope watchdog(seconds(90), "IdleAnswersComeFromTheEnsembleItself");
  auto stub = server_->Stub();
  const std::vector<Answer> warm = WaitUntilServedInFull(*stub);
  ASSERT_FALSE(warm.empty());
  ASSERT_EQ(warm.back().served_by, kEnsemble) << "idle slow_ens never answered in full; last: " << Show(warm.back());
  for (int i = 0; i < 5; ++i) {
    const Answer a = Call(*stub, RowRequest(kEnsemble, static_cast<float>(10 * i)));
    ASSERT_TRUE(a.status.ok()) << Show(a);
    EXPECT_EQ(a.served_by, kEnsemble) << Show(a);
    EXPECT_EQ(a.served_accuracy, 0.95) << Show(a);
    EXPECT_EQ(a.offset, kEnsembleOffset) << Show(a);
    EXPECT_EQ(a.model_name, kEnsemble) << Show(a);
  }
  // exact: true is the full ensemble too, and says so.
  const Answer exact = Call(*stub, RowRequest(kEnsemble, 3, true));
  EXPECT_TRUE(exact.status.ok() && exact.served_by == kEnsemble && exact.served_accuracy == 0.95 &&
              exact.offset == kEnsembleOffset)
      << Show(exact);
  // A ladder without accuracies: served_by only.
  for (int i = 0; i < 3; ++i) {
    const Answer a = Call(*stub, RowRequest("quick_ens", 5));
    ASSERT_TRUE(a.status.ok()) << Show(a);
    EXPECT_EQ(a.served_by, "quick_ens") << Show(a);
    EXPECT_EQ(a.served_accuracy, std::nullopt) << Show(a);
    EXPECT_EQ(a.offset, 1.5f) << Show(a);
  }
  // No ladder: neither.
  const Answer plain = Call(*stub, RowRequest("plain_ens", 5));
  ASSERT_TRUE(plain.status.ok()) << Show(plain);
  EXPECT_EQ(plain.served_by, std::nullopt) << Show(plain);
  EXPECT_EQ(plain.served_accuracy, std::nullopt) << Show(plain);
  EXPECT_EQ(plain.offset, 1.5f) << Show(plain);
}

// A deadline nearer than the full ensemble's measured latency picks the
// cheaper rung instead of failing; with exact: true it still fails.
TEST_F(OverloadTest, ANearDeadlineIsAnsweredByTheCheaperRungUnlessExact) {
  WatchdogScope watchdog(seconds(120), "ANearDeadlineIsAnsweredByTheCheaperRungUnlessExact");
  auto stub = server_->Stub();
  const std::vector<Answer> warm = WaitUntilServedInFull(*stub);
  ASSERT_EQ(warm.back().served_by, kEnsemble) << Show(warm.back());
  // Warm-up: the full path's latency measured (idle answers at rung 0).
  std::vector<double> full_ms;
  for (int i = 0; i < 5; ++i) {
    const Answer a = Call(*stub, RowRequest(kEnsemble, 1));
    ASSERT_TRUE(a.status.ok() && a.served_by == kEnsemble) << Show(a);
    full_ms.push_back(a.latency_ms);
  }
  std::printf("idle slow_ens: median %.1f ms\n", Median(full_ms));
  ASSERT_GT(Median(full_ms), 15.0) << "the full ensemble answers too fast for a 5 ms deadline to matter: "
                                      "make slow_c slower (make_overload_models.py SLOW_ITERATIONS)";

  // The gRPC deadline: 5 ms. The cheaper rung answers in about a
  // millisecond; on a busy machine a call may still miss 5 ms, so a few
  // tries, most of which must be answered (each would fail with the full
  // path: it takes over three times the deadline).
  struct Tally {
    int ok = 0, deadline_exceeded = 0;
  };
  auto try_near_deadline = [&](const char* how, bool by_parameter) {
    Tally tally;
    for (int i = 0; i < 10; ++i) {
      auto request = RowRequest(kEnsemble, static_cast<float>(i));
      if (by_parameter) (*request.mutable_parameters())["timeout"].set_int64_param(5000);
      const Answer a = Call(*stub, request, by_parameter ? kRpcTimeout : milliseconds(5));
      if (a.status.ok()) {
        ++tally.ok;
        EXPECT_EQ(a.served_by, kCheapRung) << how << ": " << Show(a);
        EXPECT_EQ(a.offset, kCheapOffset) << how << ": " << Show(a);
        EXPECT_EQ(a.served_accuracy, 0.8) << how << ": " << Show(a);
        EXPECT_EQ(a.model_name, kEnsemble) << how << ": " << Show(a);
        EXPECT_EQ(a.member_versions, "fast_a:1") << how << ": " << Show(a);
      } else {
        EXPECT_EQ(a.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << how << ": " << Show(a);
        ++tally.deadline_exceeded;
      }
    }
    std::printf("%s: %d of 10 answered, %d DEADLINE_EXCEEDED\n", how, tally.ok, tally.deadline_exceeded);
    EXPECT_GE(tally.ok, 6) << how << ": most requests with a 5 ms deadline should be answered by " << kCheapRung;
  };
  try_near_deadline("5 ms gRPC deadline", false);
  try_near_deadline("parameter timeout 5000 us", true);

  // exact: true is served in full whatever its deadline: it cannot make it.
  for (int i = 0; i < 3; ++i) {
    const Answer a = Call(*stub, RowRequest(kEnsemble, 1, true), milliseconds(5));
    EXPECT_EQ(a.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << "exact, 5 ms deadline: " << Show(a);
  }
  // With parameter timeout instead, the server does not end a member's
  // computation once dispatched: here it answered in full, late (~170 ms,
  // behind the three calls above). Either way the answer is the ensemble's
  // own, never the cheaper rung's.
  auto request = RowRequest(kEnsemble, 1, true);
  (*request.mutable_parameters())["timeout"].set_int64_param(5000);
  const Answer by_parameter = Call(*stub, request);
  if (by_parameter.status.ok()) {
    EXPECT_EQ(by_parameter.served_by, kEnsemble) << "exact, timeout 5000 us: " << Show(by_parameter);
    EXPECT_EQ(by_parameter.offset, kEnsembleOffset) << "exact, timeout 5000 us: " << Show(by_parameter);
  } else {
    EXPECT_EQ(by_parameter.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << "exact, timeout 5000 us: " << Show(by_parameter);
  }
}

// Under load the ensemble steps down to fast_a and keeps its latency; exact
// requests are still served in full; nothing fails.
TEST_F(OverloadTest, UnderLoadMostAnswersComeFromTheCheaperRungWithinTheTarget) {
  WatchdogScope watchdog(seconds(150), "UnderLoadMostAnswersComeFromTheCheaperRungWithinTheTarget");
  auto stub = server_->Stub();
  ASSERT_EQ(WaitUntilServedInFull(*stub).back().served_by, kEnsemble);

  // The premise: kClients clients asking for the full ensemble take well over
  // the target (slow_c computes one request at a time).
  std::vector<Answer> full;
  {
    Load load(*server_, kClients, /*exact=*/true);
    std::this_thread::sleep_for(seconds(2));  // the load's duration
    full = load.Stop();
  }
  std::vector<double> full_ms;
  for (const Answer& a : full) {
    ASSERT_TRUE(a.status.ok() && a.served_by == kEnsemble && a.offset == kEnsembleOffset) << Show(a);
    if (a.sent_ms >= 500) full_ms.push_back(a.latency_ms);
  }
  std::printf("%d clients, exact: %zu answers, median %.1f ms\n", kClients, full.size(), Median(full_ms));
  ASSERT_GE(full_ms.size(), 5u);
  ASSERT_GT(Median(full_ms), 1.5 * kTargetMs) << "the full ensemble is not overloaded by the clients: the test "
                                                 "proves nothing (make slow_c slower)";

  // The same clients without exact, and one sending exact requests among them.
  ASSERT_EQ(WaitUntilServedInFull(*stub).back().served_by, kEnsemble);
  Load load(*server_, kClients, /*exact=*/false, /*exact_samplers=*/1);
  std::this_thread::sleep_for(seconds(4));  // the load's duration
  const std::vector<Answer> answers = load.Stop();

  // The ladder may shed a rare request when even fast_a's prediction passes
  // the target for a moment (a stall of the shared machine shows in it);
  // at most one in a thousand, each refused by the ladder naming the target.
  // Any other failure fails the test.
  int failed = 0, shed = 0, cheap = 0, rich = 0, inconsistent = 0, exact_ok = 0, exact_total = 0;
  std::string first_failure, first_inconsistent;
  std::vector<double> cheap_ms, rich_ms, exact_ms;
  for (const Answer& a : answers) {
    if (a.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
        a.status.error_message().find("overload.latency_target_ms") != std::string::npos) {
      ++shed;
      continue;
    }
    if (!a.status.ok()) {
      if (failed++ == 0) first_failure = Show(a);
      continue;
    }
    if (!ConsistentEnsembleAnswer(a)) {
      if (inconsistent++ == 0) first_inconsistent = Show(a);
      continue;
    }
    if (a.exact) {
      ++exact_total;
      if (a.served_by == kEnsemble) ++exact_ok;
      exact_ms.push_back(a.latency_ms);
      continue;
    }
    if (a.sent_ms < 1000) continue;  // warm-up: the ladder learns the load
    if (a.served_by == kCheapRung) {
      ++cheap;
      cheap_ms.push_back(a.latency_ms);
    } else {
      ++rich;
      rich_ms.push_back(a.latency_ms);
    }
  }
  std::printf(
      "%d clients + exact sampler, after 1 s: %d by %s (median %.1f ms), %d by %s (median %.1f ms); exact: %d of %d "
      "in full (median %.1f ms); %d shed by the ladder, %d failed otherwise\n",
      kClients, cheap, kCheapRung.c_str(), Median(cheap_ms), rich, kEnsemble.c_str(), Median(rich_ms), exact_ok,
      exact_total, Median(exact_ms), shed, failed);
  EXPECT_EQ(failed, 0) << "first failure: " << first_failure << "\n" << Timeline(answers);
  EXPECT_LE(shed * 1000, static_cast<int>(answers.size())) << "the ladder shed more than one request in 1000\n"
                                                           << Timeline(answers);
  EXPECT_EQ(inconsistent, 0) << "first: " << first_inconsistent;
  ASSERT_GT(cheap + rich, 20);
  EXPECT_GE(cheap, 4 * rich) << "most answers under load should come from " << kCheapRung << "\n" << Timeline(answers);
  EXPECT_LE(Median(cheap_ms), kTargetMs) << "the cheaper rung's answers miss the latency target";
  EXPECT_GE(exact_total, 3);
  EXPECT_EQ(exact_ok, exact_total) << "exact: true answered by a cheaper rung under load";
}

// When the load stops, the ladder climbs back to the ensemble itself once
// dwell_ms have passed since it last moved down.
TEST_F(OverloadTest, AfterTheLoadStopsAnswersComeBackToTheFullEnsemble) {
  WatchdogScope watchdog(seconds(120), "AfterTheLoadStopsAnswersComeBackToTheFullEnsemble");
  auto stub = server_->Stub();
  ASSERT_EQ(WaitUntilServedInFull(*stub).back().served_by, kEnsemble);
  Load load(*server_, kClients, /*exact=*/false);
  // Load until the ladder has moved down (fast_a answers), and 2 s more.
  const auto give_up = Clock::now() + seconds(20);
  bool down = false;
  while (!down && Clock::now() < give_up) {
    std::this_thread::sleep_for(milliseconds(100));
    for (const Answer& a : load.Snapshot()) down = down || (a.status.ok() && a.served_by == kCheapRung);
  }
  ASSERT_TRUE(down) << "the load never moved the ladder down";
  std::this_thread::sleep_for(seconds(2));  // the rest of the load
  const std::vector<Answer> answers = load.Stop();
  const Clock::time_point stopped = load.Stopped();
  int failed = 0, late_cheap = 0;
  std::string first_failure;
  const double end_ms = answers.empty() ? 0 : std::max_element(answers.begin(), answers.end(), [](auto& x, auto& y) {
                                                return x.sent_ms < y.sent_ms;
                                              })->sent_ms;
  for (const Answer& a : answers) {
    if (!a.status.ok() && failed++ == 0) first_failure = Show(a);
    if (a.status.ok() && a.served_by == kCheapRung && a.sent_ms >= end_ms - 1000) ++late_cheap;
  }
  // (Failures under load are the business of the load test above.)
  std::printf("load: %zu answers, %d failed (first: %s), %d from %s in its last second\n", answers.size(), failed,
              first_failure.c_str(), late_cheap, kCheapRung.c_str());

  // Idle now: at most dwell_ms after its last move down it climbs back.
  const std::vector<Answer> polls = WaitUntilServedInFull(*stub, milliseconds(kDwellMs + 10000));
  const double back_ms = Ms(Clock::now() - stopped);
  ASSERT_FALSE(polls.empty());
  ASSERT_EQ(polls.back().served_by, kEnsemble)
      << "still not served in full " << back_ms << " ms after the load stopped: " << Show(polls.back());
  std::printf("back to %s %.0f ms after the load stopped (%zu polls)\n", kEnsemble.c_str(), back_ms, polls.size());
  EXPECT_LE(back_ms, static_cast<double>(kDwellMs) + 2500) << "the ladder took too long to climb back";
  for (const Answer& a : polls) EXPECT_TRUE(ConsistentEnsembleAnswer(a)) << Show(a);
  // And it stays there.
  for (int i = 0; i < 5; ++i) {
    const Answer a = Call(*stub, RowRequest(kEnsemble, 2));
    EXPECT_TRUE(a.status.ok() && a.served_by == kEnsemble) << Show(a);
  }
}

// A ladder naming a model that does not exist: the server does not start,
// and says where the mistake is.
TEST(OverloadConfigTest, ALadderNamingAnUnknownModelStopsTheStartNamingFileLineAndField) {
  WatchdogScope watchdog(seconds(180), "ALadderNamingAnUnknownModelStopsTheStartNamingFileLineAndField");
  TempDir repo("es_overload_bad_");
  std::string output;
  const int rc =
      RunCommand({"/usr/bin/python3", std::string(es::test_paths::kIntegrationSourceDir) + "/make_overload_models.py",
                  "--bad-ladder", repo.path().string()},
                 seconds(180), &output);
  ASSERT_EQ(rc, 0) << output;
  const fs::path config = repo.path() / "slow_ens" / "config.yaml";
  // The line of the bad rung (1-based).
  int line = 0;
  {
    std::ifstream in(config);
    std::string text;
    for (int n = 1; std::getline(in, text); ++n) {
      if (text.find("no_such_model") != std::string::npos) line = n;
    }
  }
  ASSERT_GT(line, 0) << ReadTextFile(config);
  ServerProcess::Options options;
  options.repository = repo.path().string();
  options.startup_timeout = seconds(60);
  auto server = ServerProcess::Start(options);
  ASSERT_EQ(server, nullptr) << "the server started with a ladder naming a model that does not exist";
  const std::string& error = ServerProcess::last_start_error();
  for (const std::string& needle : {config.string() + ":" + std::to_string(line) + ":",
                                    std::string("overload.ladder[1]"), std::string("no_such_model")}) {
    EXPECT_NE(error.find(needle), std::string::npos) << "no '" << needle << "' in: " << error;
  }
}

}  // namespace
}  // namespace es::it
