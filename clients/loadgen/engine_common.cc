#include "clients/loadgen/engine_common.h"

#include <algorithm>
#include <utility>

namespace es::loadgen {

uint64_t Sample::failed() const {
  uint64_t n = 0;
  for (const auto& [code, count] : errors) n += count;
  return n;
}

void LabelCounts::Add(const LabelCounts& other) {
  answers += other.answers;
  rows += other.rows;
  correct += other.correct;
}

void Sample::Merge(Sample&& other) {
  if (latencies_ns.empty()) {
    latencies_ns = std::move(other.latencies_ns);
  } else {
    latencies_ns.insert(latencies_ns.end(), other.latencies_ns.begin(), other.latencies_ns.end());
  }
  for (const auto& [code, count] : other.errors) errors[code] += count;
  sent += other.sent;
  hung += other.hung;
  unanswered += other.unanswered;
  skipped += other.skipped;
  late_ns_sum += other.late_ns_sum;
  elapsed += other.elapsed;
  end_wall = std::max(end_wall, other.end_wall);
  // The checked answers of the newer turn only (an older turn's answers
  // that came after the newer turn began are not the newer one's).
  if (!other.checked_turn || !TakeTurn(*other.checked_turn)) return;
  checked.Add(other.checked);
  for (const auto& [rung, counts] : other.checked_by_served_by) checked_by_served_by[rung].Add(counts);
  if (checked_by_request.size() < other.checked_by_request.size()) {
    checked_by_request.resize(other.checked_by_request.size());
  }
  for (size_t r = 0; r < other.checked_by_request.size(); ++r) checked_by_request[r].Add(other.checked_by_request[r]);
  unreadable += other.unreadable;
}

Sample Sender::Take() {
  Sample taken;
  MutexLock lock(&mu);
  std::swap(taken, sample);
  return taken;
}

bool TurnIsNewer(uint32_t a, uint32_t b) {
  // Generations count modulo 2^16 (CountingEngine's turn word): a is newer
  // when it is less than half the circle ahead of b.
  const uint32_t ahead = (a - b) & 0xFFFF;
  return ahead != 0 && ahead < 0x8000;
}

bool Sample::TakeTurn(uint32_t turn) {
  if (checked_turn && !TurnIsNewer(turn, *checked_turn)) return turn == *checked_turn;
  checked_turn = turn;
  ClearChecked();
  return true;
}

void Sample::ClearChecked() {
  checked = {};
  checked_by_served_by.clear();
  checked_by_request.clear();
  unreadable = 0;
}

void Sample::AddChecked(const CheckedAnswer& answer) {
  if (!TakeTurn(answer.turn)) return;  // an older turn's answer
  if (!answer.readable) {
    ++unreadable;
    return;
  }
  checked.Add(answer.counts);
  checked_by_served_by[answer.served_by].Add(answer.counts);
  if (checked_by_request.size() <= answer.request) checked_by_request.resize(answer.request + 1);
  checked_by_request[answer.request].Add(answer.counts);
}

Sample CountingEngine::TakeSample() {
  Sample total = std::move(drained_);
  drained_ = Sample();
  total.Merge(TakeRunning());
  const auto now = Clock::now();
  total.elapsed = now - last_sample_;
  total.end_wall = std::chrono::system_clock::now();
  last_sample_ = now;
  return total;
}

std::map<grpc::StatusCode, uint64_t> CountingEngine::total_errors() const {
  std::map<grpc::StatusCode, uint64_t> errors;
  for (int code = 1; code < 17; ++code) {
    if (const uint64_t n = total_by_code_[code].load()) errors[static_cast<grpc::StatusCode>(code)] = n;
  }
  return errors;
}

// `message` for one line of a report: without the "CODE: " a streamed
// answer's error starts with (the code is printed beside it), no line
// breaks, and at most kMaxErrorMessage bytes, cut between UTF-8 characters
// (the JSON writer refuses half a character).
std::string CountingEngine::OneLine(std::string_view message) {
  const size_t colon = message.find(": ");
  if (colon != std::string_view::npos && colon > 0 &&
      message.substr(0, colon).find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ_") == std::string_view::npos) {
    message.remove_prefix(colon + 2);
  }
  std::string line(message.substr(0, kMaxErrorMessage));
  if (message.size() > kMaxErrorMessage) {
    while (!line.empty() && (static_cast<unsigned char>(line.back()) & 0xC0) == 0x80) line.pop_back();
    if (!line.empty() && static_cast<unsigned char>(line.back()) >= 0xC0) line.pop_back();  // a lead byte cut off
  }
  for (char& ch : line) {
    if (ch == '\n' || ch == '\r') ch = ' ';
  }
  return line;
}

std::map<grpc::StatusCode, std::string> CountingEngine::first_error_messages() const {
  MutexLock lock(&reason_mu_);
  return first_messages_;
}

std::string CountingEngine::lost_server_reason() const {
  MutexLock lock(&reason_mu_);
  return lost_reason_;
}

void CountingEngine::LoseServer(std::string reason) {
  MutexLock lock(&reason_mu_);
  if (lost_server_.load()) return;
  lost_reason_ = std::move(reason);
  lost_server_.store(true);
}

void CountingEngine::BeginRun() {
  stopping_.store(false);
  lost_server_.store(false);
  failures_in_a_row_.store(0);
  last_sample_ = Clock::now();
  RestartRequests(0);
}

uint32_t CountingEngine::RestartRequests(uint64_t limit) {
  const uint64_t generation = ((turn_.load(std::memory_order_relaxed) >> kGenerationShift) + 1) & 0xFFFF;
  limit_.store(generation << kGenerationShift | std::min(limit, kCountMask), std::memory_order_relaxed);
  turn_.store(generation << kGenerationShift, std::memory_order_release);
  return static_cast<uint32_t>(generation);
}

uint64_t CountingEngine::LimitOf(uint64_t turn) const {
  const uint64_t limit = limit_.load(std::memory_order_relaxed);
  // A limit stored for a newer turn than `turn` (RestartRequests between
  // the two loads) is not the old turn's: that one had none.
  return (limit >> kGenerationShift) == (turn >> kGenerationShift) ? limit & kCountMask : 0;
}

bool CountingEngine::limit_sent() const {
  const uint64_t turn = turn_.load(std::memory_order_acquire);
  const uint64_t limit = LimitOf(turn);
  return limit > 0 && (turn & kCountMask) >= limit;
}

std::optional<CountingEngine::Turn> CountingEngine::NextTurn(size_t requests) {
  // Compare-and-swap rather than fetch_add: past the limit the count must
  // not move (RestartRequests may store a new turn at any moment, and an
  // undo would then come off the new one).
  uint64_t turn = turn_.load(std::memory_order_acquire);
  while (true) {
    const uint64_t sent = turn & kCountMask;
    const uint64_t limit = LimitOf(turn);
    if (limit > 0 && sent >= limit) return std::nullopt;
    if (turn_.compare_exchange_weak(turn, turn + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      return Turn{static_cast<size_t>(sent % requests), static_cast<uint32_t>(turn >> kGenerationShift)};
    }
  }
}

void CountingEngine::KeepForNextSample(Sample rest) { drained_.Merge(std::move(rest)); }

void CountingEngine::CountSent(Sender& sender) {
  sender.in_flight.fetch_add(1, std::memory_order_relaxed);
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  total_sent_.fetch_add(1, std::memory_order_relaxed);
  MutexLock lock(&sender.mu);
  ++sender.sample.sent;
}

void CountingEngine::CountEnded(Sender& sender) {
  sender.in_flight.fetch_sub(1, std::memory_order_relaxed);
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
}

void CountingEngine::CountAnswer(Sender& sender, grpc::StatusCode code, Clock::time_point scheduled,
                                 Clock::time_point sent, Clock::time_point answered, const CheckedAnswer* checked,
                                 std::string_view message) {
  const bool ok = code == grpc::StatusCode::OK;
  const bool hung = answered - sent > settings_.hung;
  {
    MutexLock lock(&sender.mu);
    if (ok) {
      sender.sample.latencies_ns.push_back(
          std::chrono::duration_cast<std::chrono::nanoseconds>(answered - scheduled).count());
    } else {
      ++sender.sample.errors[code];
    }
    if (hung) ++sender.sample.hung;
    if (ok && checked != nullptr) sender.sample.AddChecked(*checked);
  }
  if (ok) {
    total_ok_.fetch_add(1, std::memory_order_relaxed);
  } else {
    total_failed_.fetch_add(1, std::memory_order_relaxed);
    const int index = static_cast<int>(code);
    if (index > 0 && index < 17) total_by_code_[index].fetch_add(1, std::memory_order_relaxed);
    // The first message of its code: a lock per failure (none per success)
    // until every code seen has one.
    if (index > 0 && index < 17 && !message.empty() && !has_message_[index].load(std::memory_order_relaxed)) {
      MutexLock lock(&reason_mu_);
      if (first_messages_.emplace(code, OneLine(message)).second) has_message_[index].store(true);
    }
  }
  if (hung) total_hung_.fetch_add(1, std::memory_order_relaxed);
}

void CountingEngine::CountUnanswered(Sender& sender, uint64_t calls) {
  sender.sample.unanswered += calls;
  total_unanswered_.fetch_add(calls);
}

void CountingEngine::CountConnection(bool connection_failure, std::string_view message) {
  if (!connection_failure) {
    failures_in_a_row_.store(0, std::memory_order_relaxed);
    return;
  }
  if (failures_in_a_row_.fetch_add(1) + 1 >= settings_.max_connection_failures && !lost_server_.load()) {
    std::string reason = std::to_string(settings_.max_connection_failures);
    reason += " connection failures in a row, the last: UNAVAILABLE: ";
    reason.append(message);
    LoseServer(std::move(reason));
  }
}

std::chrono::milliseconds CountingEngine::NextBackoff(std::chrono::milliseconds previous) const {
  return previous.count() == 0 ? settings_.backoff_min : std::min(settings_.backoff_max, previous * 2);
}

}  // namespace es::loadgen
