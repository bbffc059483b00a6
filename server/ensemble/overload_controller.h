// OverloadController: picks, for each new request of an ensemble with an
// overload ladder (config: OverloadSpec), the rung that answers it: the
// richest whose predicted latency meets the target, so that past capacity
// the ensemble answers a little less accurately instead of queueing into
// timeouts.
//
// The prediction. Each rung r has a service time s_r: its latency when
// nothing else is in flight, measured (an answer that started with nothing
// in flight sets it, by a moving average; any faster answer lowers it
// quickly, since no answer is faster than the rung alone). The work in
// flight W is the sum of the service times of the requests admitted and not
// yet finished. A new request at rung r is predicted to take
//     s_r + W / P_r
// where P_r says how much of that work delays rung r, learnt from rung r's
// own answers that started behind work: P_r = mean(W at their start) /
// mean(their latency - s_r). Per rung, because rungs need not share
// resources: a cheap model on another host hardly waits behind the full
// ensemble's work, and one P learnt from its answers would make the full
// ensemble look free. Before a rung has answered once its s_r is 0: it is
// tried, and so measured. Rung 0's first `cold_answers` successful answers
// teach nothing: TorchScript's first runs of a model profile and optimise
// it and take many times longer (a cold answer taken as the service time
// sent an idle ensemble down its ladder right after a start); meanwhile it
// keeps being tried. (The cheaper rungs learn from their first answer: an
// overestimate there only makes them look dearer; and their parallelism,
// learnt against a smaller warm service time, came out smaller from
// answers whose lateness was noise, and shed servable requests in a test.
// But a first answer that started behind work sets at most the service
// time of a measured richer rung: the ladder is richest first, and in a
// burst that answer's latency is mostly the queue.)
// P_0 is at most 1: the full ensemble runs on every host of its members and
// overlaps none of the work in flight (learnt above 1 behind cheap rungs'
// work, it let a burst fill the work in flight with full-ensemble requests,
// behind which every cheaper rung looked slower than rung 0, and the rest
// was shed). Before it has answered behind work, rung 0 is
// taken to wait for all work (P_0 = 1: no burst of full requests on a guess)
// and a cheaper rung for none (the cheap rungs are the safety valve: they
// are not refused on a guess either).
//
// Probes. A rung's service time is only measured by its own answers, so one
// measured at a bad moment (a cold start, a busy neighbour) would keep a
// class below it for good. Once per dwell time, while a class sits below
// rung 0, the work in flight alone does not rule the richer rung out and it
// is not held off (see "Past what a rung carried" below), one
// request (not one whose deadline needs a cheaper rung) goes one rung up
// (past any out of the class's reach: see "Out of reach"):
// its answer measures that rung's service time again (and, started behind
// work, teaches no parallelism: its base is what is in doubt).
//
// The choice. A request of the highest priority (1) may use the whole
// target; any other uses `lower_priority_share` of it, so under load the
// lower priorities step down first and the highest keep richer rungs longer.
// Each of the two priority classes has a current rung: it moves at once
// when the current one's prediction misses the budget, down, to the richest
// cheaper rung within it; none within, one step up to the next richer rung
// when that one is within the budget and was shown lately to carry the load
// (the class left it lately, and the load is not well past what it carried
// there: see "Past what a rung carried"), at most one move up per dwell
// time, climbs included; else it stays on the fastest of
// its rung and the cheaper ones while that meets the whole target, and takes
// a richer rung at once past it only when that one's service time is the
// smaller (a ladder measured out of order). Up, one step at a time: to the
// next richer rung, when that one is predicted within the budget, once
// `dwell_ms` have passed since the last move: the ladder never oscillates
// faster than the dwell time, and the middle rungs are used on the way up.
// Never past a rung that misses (but for one out of reach, below): a
// richer rung predicted within the budget under load while a cheaper one is
// not is so only because it waits less for the work in flight, and each of
// its requests adds more (taken at once, or climbed to past the rungs
// between, such rungs filled the work in flight within milliseconds: see the
// .cc); a rung measured slow at a bad moment is measured again by the
// probes, below.
// For a dwell time after a climb the new rung is on probation: its
// prediction (its tail's, see "The tail") may use only a quarter of the
// room between its service time (times its tail ratio) and the budget
// (with half, the work a failed climb to the full ensemble left in flight
// still pushed the middle rung over its budget: at 2x the best member
// answered 29-54%), but at least two service times of waiting (ordinary
// queueing of a rung the load sustains), and when it passes that the class
// goes back below (to the richest rung within the budget from the one it
// climbed from). A climb back to a rung whose last stay, lately
// (within 2^kMaxFailedClimbs dwell times), carried the arrival rate now (one judged, see below) has no probation: the
// load was shown to be carried there, and the leaving was a fluctuation of its queue (at twice the full ensemble's
// capacity, climbs back to the cascade after a burst were undone by single
// predictions past the probation limit, each doubling the wait, and the
// cascade at 0.7 answered half the step). A climb undone within a dwell
// time (the load cannot sustain the richer rung) doubles the wait before the
// next climb to that rung, up to 8 dwell times; a climb that holds a dwell
// time resets it. Per rung: failed climbs to the full ensemble must not hold
// the class below a middle rung it can carry. Without it, at twice the full ensemble's
// capacity the class climbed to rung 0 once per dwell, whose admissions
// filled the work in flight up to the budget before it moved down again,
// and the cheaper rungs waiting behind that work were pushed over the
// target too (requests shed). (A limit on the arrival rate a rung must
// carry before a climb was tried first: it pinned closed-loop clients,
// whose rate follows the cheap rung's speed, to the cheap rung.)
//
// Out of reach. A rung whose mean fits a class's budget but whose tail (see
// "The tail") misses it even with nothing in flight (T_r x s_r > budget) is
// passed over by that class's climbs, step up and probes, to the next
// richer rung: no load explains its miss, and nothing but its own answers
// (not a probe's) could lower T_r, which the class never sends it. Without
// this the class stayed below such a rung for good, on an idle ensemble too.
// Judged on T_r, as moves down are (a class already on the rung may still
// stay there on U_r: see "Staying"). And such a tail, once no answer has
// moved it for 2^kMaxFailedClimbs dwell times, is forgotten (taken as 1
// until a hundred answers teach it again): else a tail learnt in one burst
// would take the rung out of the class's ladder for good, moves down
// passing over it too. Only there: a tail forgotten elsewhere would make a
// rung left under a peak look cheap when the next peak comes. A rung whose
// service time alone misses is not passed over: a probe measures it again.
//
// Past what a rung carried. The controller keeps the arrival rate
// (requests per ms, a moving average over `kRateWindowMs`) and, per class,
// the highest rate its current rung has carried in this stay on it. A rung
// the class left lately (within 2^kMaxFailedClimbs dwell times) is not
// climbed to, nor probed, while the rate is clearly above (kRateGrowth)
// the highest it carried in its last stay (judged once a few tens of
// requests arrive per window): the load has grown past what it was shown
// to carry. Near that rate its leaving was a fluctuation of its queue, and
// the climb back is tried as before. At eight times the full ensemble's
// capacity, without it, the cascade that had carried four times was
// climbed to a dwell time into the load and again two dwell times later,
// each climb undone within its probation, and the answers it gave
// meanwhile mixed its accuracy with the best member's, a few answers
// either side of it. Only a rung left lately: on a guess, a closed-loop
// client, whose rate follows the cheap rung's speed, would be pinned to the
// cheap rung. A failed climb (undone within a dwell time) leaves the rung's
// carried rate as it was: that short stay carried nothing. (A capacity
// estimated from the learnt parallelism, P_r / s_r, was tried first: too
// noisy, it held a cascade the load could carry off it at twice the full
// ensemble's capacity.) The rate counts every arrival of the ensemble,
// both classes and exact requests: all of it is load on the same hosts.
//
// The tail. The target is a 99th percentile, the prediction a mean. Each
// rung also learns its tail ratio T_r: the 99th percentile of its answers'
// latency over their prediction at admission (a stochastic quantile
// estimate from 1 to 4, taken as 1 until a hundred answers predicted at a
// tenth of the target or more taught it; answers predicted below that only
// lower it: see the .cc). Every choice of a rung against a budget or a
// deadline uses T_r x predicted(r), but for the fallback when none fits,
// which is the rung fastest by the mean, and a class's stay on its rung
// while few of its answers came late (see "Staying"). Why: a cascade's hard
// inputs run all its stages one after another, each waiting behind the
// hosts' queues, and at twice the full ensemble's capacity the cascade at 0.99 (a quarter of
// the inputs through all twelve stages) answered with a mean 1.3x its
// prediction and a p99 over the 100 ms target while its mean prediction
// sat at 20 ms, well within the budget. A single model's answers spread
// little around their prediction (T near 1-2): the cheap rungs keep their
// room. Shedding still looks at the mean: the last resort stays as rare as
// it was (a p99 a little over the target beats a refused request).
//
// Staying. The target is a p99 over all the answers, most of which come at
// calm moments; T_r x predicted(r) is each request's own p99. So each rung
// also learns U_r, the 90th percentile of the same ratio, and each class
// keeps the share of its recent answers later than its budget (a moving
// average over about 500 answers). While that share is under half a
// percent, a class off probation stays on its rung while U_r x predicted
// is within the budget: a request admitted in a burst of arrivals risks
// about one chance in ten of being late, and such bursts are rare. Past
// that share the stay is judged on T_r again. Moves down, climbs and the
// step up are judged on T_r as before: only staying is eased. Why: in a
// traced run at twice the full ensemble's capacity the cascade's answers
// had a p99 of 26 ms, while the 3.5% admitted at a mean prediction of
// 10-40 ms had one near 100 ms; such a burst put T_r x predicted over the
// 80 ms budget, and in two runs of five the class went to the best member
// for 39-66% of the step, 49-55 answers fewer right in 10,000.
//
// A request's own deadline may then move it further down, to the richest
// rung predicted to answer before it (never up). When no rung is predicted
// to meet the whole target, or the class's rung, after any move, is not
// (a richer rung is reached only by the moves above), the request is shed
// (kShed): shedding is the last resort. A request marked exact is always
// served at rung 0 and never shed.
//
// Admit() counts the request's work in flight until Finish(ticket); every
// admitted request must be finished exactly once (a shed one need not be).
//
// Thread safety: all methods are thread-safe (one short lock).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <limits>
#include <vector>

#include "common/mutex.h"
#include "config/model_config.h"

namespace es {

class OverloadController {
 public:
  using Clock = std::chrono::steady_clock;
  using Now = std::function<Clock::time_point()>;
  static constexpr size_t kShed = std::numeric_limits<size_t>::max();

  static constexpr int kColdAnswers = 2;
  static constexpr int kMaxFailedClimbs = 3;  // the wait before a climb: at most 2^3 dwell times
  static constexpr double kRateWindowMs = 100;

  // `now`: the clock (tests pass a fake one); `cold_answers`: see above.
  explicit OverloadController(const OverloadSpec& spec, Now now = Clock::now, int cold_answers = kColdAnswers);

  struct Ask {
    int priority = 0;  // 1 = highest; 0 (the model's default) and others: the lower class
    Clock::time_point deadline = Clock::time_point::max();  // max = none
    bool exact = false;
  };
  struct Ticket {
    size_t rung = kShed;       // the rung to serve at, or kShed: refuse the request
    double predicted_ms = 0;   // the prediction for that rung at admission
    double tail_ratio = 1;     // that rung's T_r at admission (see "The tail")
    size_t fastest = 0;        // kShed: the fastest rung it could use (predicted_ms is its prediction)
    double work_ms = 0;        // what this request added to the work in flight
    double work_ahead_ms = 0;  // the work in flight when it was admitted
    Clock::time_point start;
    int probe_class = -1;      // >= 0: a probe of that priority class (see above)
    int request_class = -1;    // >= 0: the priority class it counts in (-1: exact, or shed)
  };

  Ticket Admit(const Ask& ask);
  // The request answered (ok: a successful answer, whose latency is learnt
  // from; a failure leaves the work in flight, and counts as late in its
  // class's share when it came past the budget: see "Staying").
  void Finish(const Ticket& ticket, bool ok);

  // Introspection (metrics, tests).
  double PredictMs(size_t rung) const;  // s_r + W / P_r now
  double ServiceMs(size_t rung) const;  // 0 = not measured yet
  double Parallelism(size_t rung) const;  // P_r
  double WorkInFlightMs() const;
  size_t CurrentRung(int priority) const;  // the class's current rung (load only)
  double ArrivalsPerMs() const;            // the arrival rate now
  double TailRatio(size_t rung) const;     // T_r (see "The tail")
  double UsualTailRatio(size_t rung) const;  // U_r (see "Staying")
  double LateShare(int priority) const;      // the class's share of late answers (see "Staying")
  size_t rungs() const { return rungs_; }

 private:
  struct Left {               // a priority class's last leaving of a rung
    Clock::time_point at{};   // {}: none lately
    double carried_rate = 0;  // the highest arrival rate it carried in that stay
  };
  struct Level {  // one priority class's current rung
    size_t rung = 0;
    Clock::time_point moved{};   // last move down (or up)
    Clock::time_point up{};      // last move up (a climb or the one step up at once)
    Clock::time_point probed{};  // last probe sent
    bool probing = false;        // a probe is in flight
    bool climbed = false;        // the last move was a climb (after a dwell time; not the one step up at once)
    size_t from = 0;             // ... from this rung (probation goes back there)
    bool returned = false;       // ... to a rung whose last stay carried the rate then (no probation)
    std::vector<int> failed_climbs;  // per rung: climbs to it undone within a dwell time, in a row (see above)
    double carried_rate = 0;         // the highest arrival rate since the class came to its rung
    std::vector<Left> left;          // per rung: the class's last leaving of it (see above)
    double late = 0;                 // the share of its recent answers later than its budget (see "Staying")
  };
  struct Rung {
    double service_ms = 0;  // 0 = not measured
    // Means over this rung's answers that started behind work (P_r = their ratio).
    double mean_ahead_ms = 0;
    double mean_excess_ms = 0;
    double parallelism = 0;  // set in the constructor
    int cold_left = 0;       // answers still to ignore (set in the constructor)
    double tail = 1;         // T_r's estimate: p99 of latency / prediction (see "The tail")
    double usual_tail = 1;   // U_r's estimate: p90 of the same (see "Staying")
    int tail_answers = 0;    // answers it learnt from (counted up to the number it needs)
    Clock::time_point taught{};  // the last answer that moved T_r and U_r (not a probe's)
  };
  double PredictLocked(size_t rung) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double TailRatioLocked(size_t rung) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // T_r as used (1 until learnt)
  // T_r x predicted(r): what rung r's slow answers are predicted to take.
  double TailLocked(size_t rung) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What `level`'s stay on its rung is judged by: U_r x predicted(r) while
  // few of its answers were late, else T_r x predicted(r) (see "Staying").
  double StayLocked(const Level& level) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double BudgetMs(size_t cls) const { return cls == 0 ? target_ms_ : target_ms_ * lower_share_; }
  // `rung`'s mean fits budget_ms and its tail misses it with nothing in flight.
  bool OutOfReachLocked(size_t rung, double budget_ms) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the tails that put a rung out of a class's reach and that no
  // answer taught lately (see "Out of reach").
  void ForgetStaleTailsLocked(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next richer rung above `rung` (> 0) for a class of `budget_ms`,
  // passing over any out of its reach (see "Out of reach" above).
  size_t NextRicherLocked(size_t rung, double budget_ms) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The richest rung from `from` whose tail is predicted within budget_ms;
  // when none is, the one predicted fastest by the mean.
  size_t RichestWithin(double budget_ms, size_t from) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static size_t ClassOf(int priority) { return priority == 1 ? 0 : 1; }
  double RateLocked(Clock::time_point now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `left` is a leaving within 2^kMaxFailedClimbs dwell times (see "Past what a rung carried").
  bool LeftLately(const Left& left, Clock::time_point now) const;
  // The load is well past what `rung` carried before `level` left it (see above).
  bool HeldOff(const Level& level, size_t rung, Clock::time_point now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `level` left `rung` lately and the load is not well past what it carried there.
  bool ShownToCarry(const Level& level, size_t rung, Clock::time_point now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Learns from one successful answer of rung `index`.
  // `predicted_ms`: its prediction at admission (0: the rung was not measured then).
  void Learn(size_t index, double latency_ms, double ahead_ms, double predicted_ms, bool probe, Clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t rungs_;
  const double target_ms_;
  const double lower_share_;
  const Clock::duration dwell_;
  const Now now_;
  mutable Mutex mu_;
  std::vector<Rung> rung_ ABSL_GUARDED_BY(mu_);
  double work_ms_ ABSL_GUARDED_BY(mu_) = 0;
  double rate_ ABSL_GUARDED_BY(mu_) = 0;  // arrivals per ms at rate_at_ (exponentially weighted)
  Clock::time_point rate_at_ ABSL_GUARDED_BY(mu_){};
  Level levels_[2] ABSL_GUARDED_BY(mu_);
};

}  // namespace es
