#include "server/ensemble/overload_controller.h"

#include <algorithm>
#include <cmath>

namespace es {
namespace {

// Weight of a new answer in the moving averages: about the last ten answers
// count, so a change of load shows within a few answers.
constexpr double kAlpha = 0.2;
// Parallelism is a ratio of two means; it stays in a range where a few odd
// answers cannot make the prediction absurd.
constexpr double kMinParallelism = 0.5;
constexpr double kMaxParallelism = 1024;
// A rung climbed to less than a dwell time ago may use this share of the
// room between its service time and the budget, and never less than this
// many of its service times of waiting (see Admit).
constexpr double kProbationRoom = 0.25;
constexpr double kProbationServices = 2;
// A rung left lately is held off while the arrival rate is above this
// multiple of the highest it carried in its last stay (near that rate a
// drop is a fluctuation of its queue: the climb back is tried as ever).
constexpr double kRateGrowth = 1.25;
// Rates are judged only from this many arrivals per window on: the count
// of a few arrivals swings by tens of percent from window to window, and
// says little of the load.
constexpr double kMinJudgedArrivals = 20;
bool Judged(double rate_per_ms) { return rate_per_ms * OverloadController::kRateWindowMs >= kMinJudgedArrivals; }

// The tail ratio's quantile, and the step of its estimate (in log space: an
// answer over it raises it by about 5%, one under lowers it by 0.05%, so the
// estimate settles where 1% of the answers lie above it: it rises within
// tens of answers over it, and falls by half over about 1,400 answers under
// it, a second or so of a loaded ensemble).
constexpr double kTailQuantile = 0.99;
constexpr double kTailStep = 0.05;
// At most four times the mean prediction: an estimate higher than that was
// a burst's (right after a failed climb, the work in flight piled up), and
// with room to ten it held the cascade off at twice the capacity in three
// runs of eight while the cascade's own p99 there was 13-33 ms.
constexpr double kMaxTail = 4;
// The quantile of the usual tail U_r (see "Staying" in the header), and
// the share of late answers past which a class's stays are judged on T_r:
// half of the one percent the target's 99th percentile allows.
constexpr double kUsualTailQuantile = 0.9;
constexpr double kLateAllowance = 0.005;
// Weight of an answer in a class's share of late answers: about the last
// 500 count, so three late answers in a row pass the allowance, and some
// hundred on time bring it back under.
constexpr double kLateWeight = 0.002;
// Answers predicted below this share of the target can only lower the tail.
constexpr double kTailMinShare = 0.1;
// A 99th percentile says something from about a hundred answers on: before
// that the tail is taken as 1 (the mean prediction alone).
constexpr int kTailMinAnswers = 100;

double Ms(OverloadController::Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double Blend(double mean, double sample, double weight) { return mean + weight * (sample - mean); }

// One answer's step of a quantile estimate of latency / prediction (see
// kTailStep): `judged` answers over it raise it, any other lowers it.
double StepQuantile(double estimate, double quantile, bool judged, double latency, double predicted) {
  const bool over = judged && latency > estimate * predicted;
  const double step = over ? kTailStep * quantile : -kTailStep * (1 - quantile);
  return std::clamp(estimate * std::exp(step), 1.0, kMaxTail);
}

}  // namespace

OverloadController::OverloadController(const OverloadSpec& spec, Now now, int cold_answers)
    : rungs_(std::max<size_t>(1, spec.ladder.size())),
      target_ms_(spec.latency_target_ms),
      lower_share_(spec.lower_priority_share),
      dwell_(std::chrono::milliseconds(spec.dwell_ms)),
      now_(std::move(now)),
      rung_(rungs_) {
  for (Level& level : levels_) {
    level.failed_climbs.assign(rungs_, 0);
    level.left.assign(rungs_, Left{});
  }
  rung_[0].parallelism = 1;  // the full ensemble waits for all work until shown otherwise
  for (size_t r = 1; r < rungs_; ++r) rung_[r].parallelism = kMaxParallelism;  // a cheap rung for none
  rung_[0].cold_left = std::max(0, cold_answers);
}

double OverloadController::PredictLocked(size_t rung) const {
  return rung_[rung].service_ms + work_ms_ / rung_[rung].parallelism;
}

double OverloadController::TailRatioLocked(size_t rung) const {
  const Rung& r = rung_[rung];
  return r.tail_answers >= kTailMinAnswers ? r.tail : 1.0;
}

double OverloadController::TailLocked(size_t rung) const { return TailRatioLocked(rung) * PredictLocked(rung); }

double OverloadController::StayLocked(const Level& level) const {
  const double tail = TailRatioLocked(level.rung);  // 1 until learnt: U_r is never below it then
  // A p90 above the p99 is noise.
  const double ratio = level.late < kLateAllowance ? std::min(rung_[level.rung].usual_tail, tail) : tail;
  return ratio * PredictLocked(level.rung);
}

double OverloadController::RateLocked(Clock::time_point now) const {
  if (rate_ == 0) return 0;
  return rate_ * std::exp(-std::max(0.0, Ms(now - rate_at_)) / kRateWindowMs);
}

bool OverloadController::LeftLately(const Left& left, Clock::time_point now) const {
  return left.at != Clock::time_point{} && now - left.at < dwell_ * (1 << kMaxFailedClimbs);
}

bool OverloadController::HeldOff(const Level& level, size_t rung, Clock::time_point now) const {
  const Left& left = level.left[rung];
  if (!LeftLately(left, now)) return false;
  const double rate = RateLocked(now);
  return Judged(rate) && rate > kRateGrowth * left.carried_rate;
}

bool OverloadController::ShownToCarry(const Level& level, size_t rung, Clock::time_point now) const {
  return LeftLately(level.left[rung], now) && !HeldOff(level, rung, now);
}

bool OverloadController::OutOfReachLocked(size_t rung, double budget_ms) const {
  const double service = rung_[rung].service_ms;
  return service <= budget_ms && TailRatioLocked(rung) * service > budget_ms;
}

void OverloadController::ForgetStaleTailsLocked(Clock::time_point now) {
  const double smaller_budget = std::min(BudgetMs(0), BudgetMs(1));
  for (size_t r = 0; r < rungs_; ++r) {
    Rung& rung = rung_[r];
    if (OutOfReachLocked(r, smaller_budget) && now - rung.taught >= dwell_ * (1 << kMaxFailedClimbs)) {
      rung.tail = rung.usual_tail = 1;
      rung.tail_answers = 0;
    }
  }
}

size_t OverloadController::NextRicherLocked(size_t rung, double budget_ms) const {
  size_t r = rung - 1;
  while (r > 0 && OutOfReachLocked(r, budget_ms)) --r;
  return r;
}

size_t OverloadController::RichestWithin(double budget_ms, size_t from) const {
  size_t fastest = from;
  for (size_t r = from; r < rungs_; ++r) {
    if (TailLocked(r) <= budget_ms) return r;
    // Measured service times need not fall along the ladder (a rung
    // measured at a busy moment): the fallback is the fastest, not the last.
    // By the mean: a tail not learnt yet (1) must not make a rung look fast.
    if (PredictLocked(r) < PredictLocked(fastest)) fastest = r;
  }
  return fastest;
}

OverloadController::Ticket OverloadController::Admit(const Ask& ask) {
  const Clock::time_point now = now_();
  MutexLock lock(&mu_);
  // Every arrival counts in the rate (a shed or exact one too: it is load).
  rate_ = RateLocked(now) + 1 / kRateWindowMs;
  rate_at_ = now;
  ForgetStaleTailsLocked(now);
  Ticket ticket;
  ticket.start = now;
  size_t rung = 0;
  if (!ask.exact) {
    const size_t cls = ClassOf(ask.priority);
    Level& level = levels_[cls];
    level.carried_rate = std::max(level.carried_rate, rate_);  // the rate now (just updated)
    const double budget = BudgetMs(cls);
    const size_t fit = RichestWithin(budget, 0);
    if (PredictLocked(fit) > target_ms_) {  // shed: no rung meets the target; `fit` is the fastest
      ticket.fastest = fit;
      ticket.predicted_ms = PredictLocked(fit);
      return ticket;
    }
    // The current rung missing its budget moves at once (down; one step up
    // to a rung within the budget shown lately to carry the load; or to a
    // faster rung of a ladder measured out of order: see below). Up, per dwell time, to
    // the next richer rung within the budget: straight to the richest that
    // fits, the full ensemble's admissions pushed the middle rungs (waiting
    // behind the same hosts) over the budget as well, and the class swung
    // between the two ends of the ladder once per dwell.
    {
      const bool held = now - level.moved >= dwell_;  // the last move held a dwell time
      // On probation (a dwell time after a climb) the new rung may fill only
      // part of the room its service time leaves within the budget, and
      // going back returns to where the climb came from: a climb the load
      // cannot sustain fills the work in flight less, and the rung below,
      // waiting behind that work, stays within its own budget.
      const bool probation = level.climbed && !held && !level.returned;
      // Its slow answers' service time: the tail is what the budget judges.
      const double service = TailRatioLocked(level.rung) * rung_[level.rung].service_ms;
      // At least a couple of service times of waiting: what a rung the load
      // can sustain sees anyway (a slow rung 0, 10 ms against a 40 ms
      // budget, was undone by ordinary queueing at half its capacity).
      const double room = std::max(kProbationRoom * std::max(0.0, budget - service), kProbationServices * service);
      const double keep = probation ? std::min(budget, service + room) : budget;
      // Where the class goes when its rung misses the budget. Down, to the
      // richest cheaper rung within it. When none is, one step up, to the
      // next richer rung, when that one is within the budget and was shown
      // lately to carry the load (ShownToCarry): a cheap rung waiting behind
      // its host's queue can miss where the richer one, spread over the
      // hosts, does not (without this step the best member answered 43-68%
      // of the 4x step in four runs of six, where the cascade at 0.7 carried
      // it). Else it stays on the fastest (by the mean) of its rung and the
      // cheaper ones; past the whole target it takes `fit` only when that
      // one's service time is smaller than its rung's (a ladder measured out
      // of order), and otherwise the request is shed below. Never further
      // up, nor onto a rung the load is past: a richer rung adds more work
      // per request, and is predicted within the budget under load only
      // because it waits less for the work in flight (a rung that never
      // answered behind work is taken to wait for none); taken at once, it
      // filled that work within milliseconds. At twice the full ensemble's
      // capacity the full ensemble, taken from the cascade at 0.99, took the
      // work in flight from 20 to 70 ms in 10 ms, and every rung above the
      // cascade at 0.7 then missed the budget; at eight times, the best
      // member over its budget gave way to the cascade at 0.99 over and
      // over, and half the requests were shed. (On probation the class goes
      // below the rung it climbed to: there is one.)
      const size_t below = RichestWithin(budget, probation ? level.from : level.rung);
      const bool below_fits = TailLocked(below) <= budget;
      // The next richer rung is predicted within the budget (a step up, at
      // once below or as a climb, is judged by it).
      const size_t richer = level.rung > 0 ? NextRicherLocked(level.rung, budget) : 0;
      const bool next_fits = level.rung > 0 && TailLocked(richer) <= budget;
      // At most one move up per dwell time, the step included: a step up
      // undone at once by the richer rung's admissions, and taken again by
      // the next request that finds the cheaper rung over its budget, would
      // swing the class between the two per request.
      // And only to a rung shown lately to carry about this load: nothing
      // else says the richer rung can carry it. In one whole run of three at
      // eight times the capacity the class answered from the cascade alone,
      // half the step shed: once there it stayed (the best member, waiting
      // behind its one host's queue, was predicted the slower). A step up
      // to a rung with no such record was one way there (the run's counts
      // could not tell it from a climb kept on probation).
      const bool step_up = next_fits && ShownToCarry(level, richer, now) && now - level.up >= dwell_;
      const bool out_of_order = rung_[fit].service_ms < rung_[level.rung].service_ms;
      size_t back = below;
      if (!probation && !below_fits) {
        if (step_up) {
          back = richer;
        } else if (PredictLocked(below) > target_ms_ && out_of_order) {
          back = fit;
        }
      }
      // Staying off probation is judged on the usual tail while few answers
      // were late (see "Staying" in the header).
      const double stay = probation ? TailLocked(level.rung) : StayLocked(level);
      if (stay > keep && back != level.rung) {
        // A climb undone within a dwell time failed: the next climb to
        // that rung waits twice as long (up to 2^kMaxFailedClimbs dwells);
        // one that held resets it.
        int& failed = level.failed_climbs[level.rung];
        if (level.climbed) failed = held ? 0 : std::min(failed + 1, kMaxFailedClimbs);
        // A failed climb's short stay shows no more carried than before: the
        // rate it was undone at would otherwise count as carried, and at a
        // steady load past the rung's capacity the retry after 2^3 dwell
        // times would free every later one.
        Left& left = level.left[level.rung];
        const bool failed_stay = level.climbed && !held && left.at != Clock::time_point{};
        left = {now, failed_stay ? std::min(left.carried_rate, level.carried_rate) : level.carried_rate};
        level.carried_rate = 0;
        level.climbed = false;
        if (back < level.rung) level.up = now;
        level.rung = back;
        level.moved = now;
      } else if (held && next_fits) {
        // One step, never past a rung that misses the budget: a richer rung
        // found within it beyond one is so only because it waits less for
        // the work in flight, and adds more (at eight times the capacity,
        // climbs from the best member over the cascades straight to the
        // cascade at 0.99 and to the full ensemble filled the work in flight
        // to a second). A rung measured slow at a bad moment is measured
        // again by the probes, one rung up.
        if (level.climbed) level.failed_climbs[level.rung] = 0;  // the climb to here held
        if (now - level.moved >= dwell_ * (1 << level.failed_climbs[richer]) && !HeldOff(level, richer, now)) {
          // Back to a rung whose last stay, lately, carried this rate: no
          // probation (see the header).
          const Left& last = level.left[richer];
          const double rate = RateLocked(now);
          level.returned = LeftLately(last, now) && Judged(rate) && rate <= last.carried_rate;
          level.climbed = true;
          level.from = level.rung;
          level.rung = richer;
          level.moved = now;
          level.up = now;
          level.carried_rate = 0;
        }
      }
    }
    rung = level.rung;
    // Shed when the class's rung, after any move, misses the target: a
    // richer rung the check above found within it is reached only by the
    // moves above (one step, or a ladder measured out of order) or a climb.
    if (PredictLocked(rung) > target_ms_) {
      ticket.fastest = rung;
      ticket.predicted_ms = PredictLocked(rung);
      return ticket;
    }
    // A probe: the richer rung measured again, unless the queue alone rules
    // it out; the one a climb would go to (past any out of reach).
    const size_t probed = rung > 0 ? NextRicherLocked(rung, budget) : 0;
    bool probe = rung > 0 && !level.probing && now - std::max(level.moved, level.probed) >= dwell_ &&
                 work_ms_ / rung_[probed].parallelism <= budget && !HeldOff(level, probed, now);
    if (probe) rung = probed;
    if (ask.deadline != Clock::time_point::max()) {
      // Never richer than the load allows; cheaper when the deadline is
      // nearer (then it is no probe: the probe waits for another request).
      const size_t within = RichestWithin(ask.deadline > now ? Ms(ask.deadline - now) : 0.0, rung);
      if (within != rung) probe = false;
      rung = within;
    }
    ticket.request_class = static_cast<int>(cls);
    if (probe) {
      level.probing = true;
      level.probed = now;
      ticket.probe_class = static_cast<int>(cls);
    }
  }
  ticket.rung = rung;
  ticket.predicted_ms = PredictLocked(rung);
  ticket.tail_ratio = TailRatioLocked(rung);
  ticket.work_ahead_ms = work_ms_;
  ticket.work_ms = rung_[rung].service_ms;
  work_ms_ += ticket.work_ms;
  return ticket;
}

void OverloadController::Finish(const Ticket& ticket, bool ok) {
  if (ticket.rung == kShed || ticket.rung >= rungs_) return;
  const Clock::time_point now = now_();
  const double latency = Ms(now - ticket.start);
  MutexLock lock(&mu_);
  if (ticket.probe_class >= 0) levels_[ticket.probe_class].probing = false;
  work_ms_ = std::max(0.0, work_ms_ - ticket.work_ms);
  if (work_ms_ < 1e-9) work_ms_ = 0;  // no drift below an empty machine
  if (ticket.request_class >= 0 && latency >= 0) {
    // A failure counts when it came past the budget: that one was late too.
    const bool late = latency > BudgetMs(static_cast<size_t>(ticket.request_class));
    Level& level = levels_[ticket.request_class];
    if (ok || late) level.late = Blend(level.late, late ? 1 : 0, kLateWeight);
  }
  if (ok && latency >= 0) {
    // A rung unmeasured at admission (service time 0) had no prediction to judge.
    const double predicted = ticket.work_ms > 0 ? ticket.predicted_ms : 0;
    Learn(ticket.rung, latency, ticket.work_ahead_ms, predicted, ticket.probe_class >= 0, now);
  }
}

void OverloadController::Learn(size_t index, double latency, double ahead, double predicted, bool probe,
                               Clock::time_point now) {
  Rung& rung = rung_[index];
  if (rung.cold_left > 0) {
    --rung.cold_left;
    return;
  }
  // A probe's prediction rests on the service time in doubt: it teaches no
  // tail. An answer predicted far below the target counts as one under the
  // estimate, whatever it took: on an idle ensemble a cascade's hard inputs
  // take many times its easy inputs' service time, a ratio that says
  // nothing of a queue (learnt there, it held every cascade rung off at
  // twice the capacity); but such answers show the rung is not slow at that
  // load, so a tail learnt at a peak fades as the load eases (counted only
  // from the answers above the share, it stayed where one peak had left it
  // and held the cascade off at twice the capacity in two runs of two).
  if (!probe && predicted > 0) {
    const bool judged = predicted >= kTailMinShare * target_ms_;
    rung.tail = StepQuantile(rung.tail, kTailQuantile, judged, latency, predicted);
    rung.usual_tail = StepQuantile(rung.usual_tail, kUsualTailQuantile, judged, latency, predicted);
    rung.taught = now;
    if (judged && rung.tail_answers < kTailMinAnswers) ++rung.tail_answers;
  }
  double& service = rung.service_ms;
  if (service == 0) {
    // First answer of this rung: what of it was not waiting behind others.
    service = std::clamp(latency - ahead / rung.parallelism, 0.1 * latency, latency);
    // Behind work, at most what a richer rung was measured to cost: the
    // ladder is declared richest first. A rung first used in a burst
    // answered behind the queue the burst left (a cheap rung taken to wait
    // for none of it): the cascade's first answer at twice the capacity took
    // 20 ms against its 0.6 ms alone, and as its service time that sent the
    // class past it to the best member within 30 ms. An answer alone
    // measures a dearer rung as it is.
    if (ahead > 0) {
      for (size_t richer = 0; richer < index; ++richer) {
        if (rung_[richer].service_ms > 0) service = std::min(service, rung_[richer].service_ms);
      }
    }
    return;
  }
  if (ahead == 0) {
    // Alone: its service time, measured. No answer is faster than the rung
    // alone, so a faster one corrects an overestimate quickly.
    service = Blend(service, latency, latency < service ? 0.5 : kAlpha);
    return;
  }
  // Behind work: what it waited says how much of that work delays this rung,
  // unless it is a probe, whose rung's service time is the doubt: its
  // excess over that would teach a parallelism from a wrong base.
  if (probe) {
    if (latency < service) service = Blend(service, latency, 0.5);
    return;
  }
  const double excess = std::max(latency - service, 0.05 * service);
  if (rung.mean_excess_ms == 0) {
    rung.mean_ahead_ms = ahead;
    rung.mean_excess_ms = excess;
  } else {
    rung.mean_ahead_ms = Blend(rung.mean_ahead_ms, ahead, kAlpha);
    rung.mean_excess_ms = Blend(rung.mean_excess_ms, excess, kAlpha);
  }
  // Rung 0 at most 1: the full ensemble runs on every host of its members,
  // each request of the work in flight was measured alone, so none of that
  // work overlaps it. Learnt above 1 (behind cheap rungs' work, which
  // spreads over the hosts), P_0 let an 8x burst fill the work in flight
  // with full-ensemble requests, behind which every cheaper rung was
  // predicted slower than rung 0: the class stayed there and 86% was shed.
  const double most = index == 0 ? 1.0 : kMaxParallelism;
  rung.parallelism = std::clamp(rung.mean_ahead_ms / rung.mean_excess_ms, kMinParallelism, most);
  if (latency < service) service = Blend(service, latency, 0.5);
}

double OverloadController::PredictMs(size_t rung) const {
  MutexLock lock(&mu_);
  return rung < rungs_ ? PredictLocked(rung) : 0;
}

double OverloadController::ServiceMs(size_t rung) const {
  MutexLock lock(&mu_);
  return rung < rungs_ ? rung_[rung].service_ms : 0;
}

double OverloadController::Parallelism(size_t rung) const {
  MutexLock lock(&mu_);
  return rung < rungs_ ? rung_[rung].parallelism : 0;
}

double OverloadController::WorkInFlightMs() const {
  MutexLock lock(&mu_);
  return work_ms_;
}

size_t OverloadController::CurrentRung(int priority) const {
  MutexLock lock(&mu_);
  return levels_[ClassOf(priority)].rung;
}

double OverloadController::TailRatio(size_t rung) const {
  MutexLock lock(&mu_);
  return rung < rungs_ ? TailRatioLocked(rung) : 0;
}

double OverloadController::UsualTailRatio(size_t rung) const {
  MutexLock lock(&mu_);
  return rung < rungs_ ? rung_[rung].usual_tail : 0;
}

double OverloadController::LateShare(int priority) const {
  MutexLock lock(&mu_);
  return levels_[ClassOf(priority)].late;
}

double OverloadController::ArrivalsPerMs() const {
  const Clock::time_point now = now_();
  MutexLock lock(&mu_);
  return RateLocked(now);
}

}  // namespace es
