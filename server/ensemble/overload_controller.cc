#include "server/ensemble/overload_controller.h"

#include <algorithm>

namespace es {
namespace {

// Weight of a new answer in the moving averages: about the last ten answers
// count, so a change of load shows within a few answers.
constexpr double kAlpha = 0.2;
// Parallelism is a ratio of two means; it stays in a range where a few odd
// answers cannot make the prediction absurd.
constexpr double kMinParallelism = 0.5;
constexpr double kMaxParallelism = 1024;

double Ms(OverloadController::Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double Blend(double mean, double sample, double weight) { return mean + weight * (sample - mean); }

}  // namespace

OverloadController::OverloadController(const OverloadSpec& spec, Now now)
    : rungs_(std::max<size_t>(1, spec.ladder.size())),
      target_ms_(spec.latency_target_ms),
      lower_share_(spec.lower_priority_share),
      dwell_(std::chrono::milliseconds(spec.dwell_ms)),
      now_(std::move(now)),
      service_ms_(rungs_, 0.0) {}

double OverloadController::PredictLocked(size_t rung) const { return service_ms_[rung] + work_ms_ / parallelism_; }

size_t OverloadController::RichestWithin(double budget_ms, size_t from) const {
  size_t fastest = from;
  for (size_t r = from; r < rungs_; ++r) {
    const double predicted = PredictLocked(r);
    if (predicted <= budget_ms) return r;
    // Measured service times need not fall along the ladder (a rung
    // measured at a busy moment): the fallback is the fastest, not the last.
    if (predicted < PredictLocked(fastest)) fastest = r;
  }
  return fastest;
}

OverloadController::Ticket OverloadController::Admit(const Ask& ask) {
  const Clock::time_point now = now_();
  MutexLock lock(&mu_);
  Ticket ticket;
  ticket.start = now;
  size_t rung = 0;
  if (!ask.exact) {
    Level& level = levels_[ClassOf(ask.priority)];
    const double budget = ClassOf(ask.priority) == 0 ? target_ms_ : target_ms_ * lower_share_;
    const size_t fit = RichestWithin(budget, 0);
    if (PredictLocked(fit) > target_ms_) return ticket;  // shed: no rung meets the target
    if (fit > level.rung || (fit < level.rung && now - level.moved >= dwell_)) {
      level.rung = fit;
      level.moved = now;
    }
    rung = level.rung;
    if (ask.deadline != Clock::time_point::max()) {
      // Never richer than the load allows; cheaper when the deadline is nearer.
      rung = RichestWithin(ask.deadline > now ? Ms(ask.deadline - now) : 0.0, rung);
    }
  }
  ticket.rung = rung;
  ticket.predicted_ms = PredictLocked(rung);
  ticket.work_ahead_ms = work_ms_;
  ticket.work_ms = service_ms_[rung];
  work_ms_ += ticket.work_ms;
  return ticket;
}

void OverloadController::Finish(const Ticket& ticket, bool ok) {
  if (ticket.rung == kShed || ticket.rung >= rungs_) return;
  const double latency = Ms(now_() - ticket.start);
  MutexLock lock(&mu_);
  work_ms_ = std::max(0.0, work_ms_ - ticket.work_ms);
  if (work_ms_ < 1e-9) work_ms_ = 0;  // no drift below an empty machine
  if (!ok || latency < 0) return;
  double& service = service_ms_[ticket.rung];
  const double ahead = ticket.work_ahead_ms;
  if (service == 0) {
    // First answer of this rung: what of it was not waiting behind others.
    service = std::clamp(latency - ahead / parallelism_, 0.1 * latency, latency);
    return;
  }
  if (ahead == 0) {
    service = Blend(service, latency, kAlpha);  // alone: its service time, measured
    return;
  }
  // Behind work: what it waited says how fast the machine works the queue off.
  const double excess = std::max(latency - service, 0.05 * service);
  if (mean_excess_ms_ == 0) {
    mean_ahead_ms_ = ahead;
    mean_excess_ms_ = excess;
  } else {
    mean_ahead_ms_ = Blend(mean_ahead_ms_, ahead, kAlpha);
    mean_excess_ms_ = Blend(mean_excess_ms_, excess, kAlpha);
  }
  parallelism_ = std::clamp(mean_ahead_ms_ / mean_excess_ms_, kMinParallelism, kMaxParallelism);
  // No answer is faster than its rung alone: a faster one shows the service
  // time was overestimated (measured at a busier moment).
  if (latency < service) service = Blend(service, latency, 0.5);
}

double OverloadController::PredictMs(size_t rung) const {
  MutexLock lock(&mu_);
  return rung < rungs_ ? PredictLocked(rung) : 0;
}

double OverloadController::ServiceMs(size_t rung) const {
  MutexLock lock(&mu_);
  return rung < rungs_ ? service_ms_[rung] : 0;
}

double OverloadController::Parallelism() const {
  MutexLock lock(&mu_);
  return parallelism_;
}

double OverloadController::WorkInFlightMs() const {
  MutexLock lock(&mu_);
  return work_ms_;
}

size_t OverloadController::CurrentRung(int priority) const {
  MutexLock lock(&mu_);
  return levels_[ClassOf(priority)].rung;
}

}  // namespace es
