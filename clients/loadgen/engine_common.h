// What ensemble-loadgen's two engines share: the Engine that RunStep drives
// (clients/loadgen/measure.h), the Sample it reads, a step's plan and
// settings, and CountingEngine, the half of an engine that counts. An engine
// (LoadEngine over gRPC, engine.h; HttpLoadEngine over HTTP, http_engine.h)
// sends the calls and reports each one to CountingEngine, which keeps the
// totals, applies the lost-server rule and the backoff, and hands out the
// samples; so the two engines count alike by construction.
//
// Contract:
//  - Every member of Engine behaves as LoadEngine's contract (engine.h)
//    says; CountingEngine implements all but Start and Stop.
//  - A Sender is one sending thread's counts (a gRPC worker, an HTTP slot):
//    its thread adds to its sample under its mutex, the controlling thread
//    takes it (Take, TakeAll).
//  - CountingEngine's Count* calls are thread-safe (any sending thread);
//    TakeSample, BeginRun and KeepForNextSample are the controlling
//    thread's, as Start, Stop and TakeSample are.
#pragma once

#include <grpcpp/support/status.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"

namespace es::loadgen {

// Answers checked against labels (--labels): answers, rows and correct rows.
struct LabelCounts {
  uint64_t answers = 0, rows = 0, correct = 0;
  void Add(const LabelCounts& other);
};

// One answer read against its labels: readable false when its output
// could not be read (then `counts` and `served_by` are unused); `turn`: the
// generation of the turn its call was sent in (Engine::RestartRequests);
// `request`: the call's request, an index into RequestSet::requests.
struct CheckedAnswer {
  bool readable = false;
  LabelCounts counts;
  std::string served_by;
  uint32_t turn = 0;
  size_t request = 0;
};

// True when turn generation `a` is later than `b` (generations wrap at 2^16).
bool TurnIsNewer(uint32_t a, uint32_t b);

struct Sample {
  std::vector<int64_t> latencies_ns;            // successful calls
  std::map<grpc::StatusCode, uint64_t> errors;  // failed calls by code
  uint64_t sent = 0;
  uint64_t hung = 0;        // calls that ended more than EngineSettings::hung after they were sent
  uint64_t unanswered = 0;  // calls cancelled by Stop() after waiting `hung` for them
  uint64_t skipped = 0;     // open loop: arrivals not sent (max_inflight reached)
  int64_t late_ns_sum = 0;  // open loop: sum of (actual - scheduled) send times
  std::chrono::steady_clock::duration elapsed{};     // since the previous sample
  std::chrono::system_clock::time_point end_wall{};  // wall-clock time the sample was taken
  // --labels: the successful answers checked, in all and by the answer's
  // `served_by` parameter (absent: ""); answers that could not be read
  // (output missing or malformed) are counted apart. Only the answers to
  // calls of one turn, `checked_turn`, the newest seen (AddChecked, Merge):
  // answers to the warm-up's calls that come after the measured turn began
  // are not the turn's rows.
  LabelCounts checked;
  std::map<std::string, LabelCounts> checked_by_served_by;
  // The same answers by request (index: CheckedAnswer::request; shorter
  // than the set when its last requests were not answered): which test rows
  // the answers drew, so that a step's accuracy compares with another
  // run's on the same rows.
  std::vector<LabelCounts> checked_by_request;
  uint64_t unreadable = 0;
  std::optional<uint32_t> checked_turn;  // none until an answer was checked

  uint64_t ok() const { return latencies_ns.size(); }
  uint64_t failed() const;
  void Merge(Sample&& other);
  void AddChecked(const CheckedAnswer& answer);
  // Whether checked answers of `turn` count here: true for the first turn
  // seen or a newer one (the older turn's counts are cleared) and for the
  // same turn; false for an older one.
  bool TakeTurn(uint32_t turn);
  void ClearChecked();  // no checked answers (checked_turn stays)
};

// What an engine sends: serialized ModelInferRequests, one after another in
// turn; with labels (clients/loadgen/labelled_data.h), request i's rows are
// labels[i] and each successful answer's `output` is checked against them.
struct RequestSet {
  std::vector<std::string> requests;
  std::vector<std::vector<int64_t>> labels;  // empty: answers are not read
  std::string output;
  bool checked() const { return !labels.empty(); }
};

struct LoadPlan {
  int concurrency = 0;  // > 0: closed loop
  double rate = 0;      // > 0: open loop, requests/s
  bool poisson = false;
  int max_inflight = 4096;
  uint32_t seed = 1;
};

struct EngineSettings {
  std::chrono::milliseconds timeout{10000};  // deadline of every call
  std::chrono::milliseconds hung{30000};     // a call slower than this is hung; Stop() waits this long at most
  std::chrono::milliseconds backoff_min{1}, backoff_max{100};  // closed loop, after UNAVAILABLE
  int max_connection_failures = 100;                           // in a row, then lost_server()
  // ModelStreamInfer (closed loop): the slots share this many streams; 0 = unary calls.
  int streams = 0;
  std::string authorization;  // `authorization` metadata of every call ("Bearer T"); empty = none
};

// What RunStep drives: LoadEngine (gRPC, clients/loadgen/engine.h) or
// HttpLoadEngine (--http, clients/loadgen/http_engine.h); each member's
// contract is LoadEngine's.
class Engine {
 public:
  virtual ~Engine() = default;
  // `requests` must outlive the run (until Stop returns).
  virtual void Start(const LoadPlan& plan, const RequestSet& requests) = 0;
  virtual void Stop() = 0;
  // The next call sends the set's first request again, and the calls after
  // it the rest in turn (RunStep calls it when the warm-up ends, so the
  // measured window goes through labelled data from its first row). With
  // `limit` > 0 exactly `limit` calls are sent from then on, and none after
  // them until the next Start (0: no limit). Returns the new turn's
  // generation: a sample's checked answers are those of its newest turn
  // (Sample::checked_turn), so answers to calls sent before still count
  // (latency, status) but are not checked once the new turn's come, and a
  // limit of whole passes over labelled rows checks every row alike.
  virtual uint32_t RestartRequests(uint64_t limit) = 0;
  // True once the limit RestartRequests set was sent in full (false without one).
  virtual bool limit_sent() const = 0;
  virtual Sample TakeSample() = 0;
  virtual int64_t in_flight() const = 0;
  virtual uint64_t total_sent() const = 0;
  virtual uint64_t total_ok() const = 0;
  virtual uint64_t total_failed() const = 0;
  virtual uint64_t total_hung() const = 0;
  virtual uint64_t total_unanswered() const = 0;
  virtual std::map<grpc::StatusCode, uint64_t> total_errors() const = 0;
  virtual std::map<grpc::StatusCode, std::string> first_error_messages() const = 0;
  virtual bool lost_server() const = 0;
  virtual std::string lost_server_reason() const = 0;
};

// One sending thread's counts: its calls in flight and its sample.
struct Sender {
  std::atomic<int64_t> in_flight{0};
  Mutex mu;
  Sample sample ABSL_GUARDED_BY(mu);

  // The sample so far, leaving an empty one in its place.
  Sample Take() ABSL_LOCKS_EXCLUDED(mu);
};

// Every sender's sample taken and merged; `senders` holds pointers to
// Senders (or to types derived from Sender).
template <typename Senders>
Sample TakeAll(const Senders& senders) {
  Sample total;
  for (const auto& sender : senders) total.Merge(sender->Take());
  return total;
}

class CountingEngine : public Engine {
 public:
  // What completed since the previous TakeSample (or Stop kept), every
  // running sender's included.
  Sample TakeSample() final;
  int64_t in_flight() const final { return in_flight_.load(std::memory_order_relaxed); }
  // Since construction, every call (warm-up and drains included).
  uint64_t total_sent() const final { return total_sent_.load(); }
  uint64_t total_ok() const final { return total_ok_.load(); }
  uint64_t total_failed() const final { return total_failed_.load(); }
  uint64_t total_hung() const final { return total_hung_.load(); }
  uint64_t total_unanswered() const final { return total_unanswered_.load(); }
  // Failed calls by gRPC code since construction.
  std::map<grpc::StatusCode, uint64_t> total_errors() const final;
  // The first failure's message for each code in total_errors() that came
  // with one (one line, at most kMaxErrorMessage bytes): what the counts
  // alone do not say, e.g. which of a server's limits refused with
  // RESOURCE_EXHAUSTED.
  std::map<grpc::StatusCode, std::string> first_error_messages() const final;
  static constexpr size_t kMaxErrorMessage = 300;
  // True once max_connection_failures connection failures came in a row,
  // or the engine could not go on (LoseServer), until the next Start; then
  // no call is sent any more.
  bool lost_server() const final { return lost_server_.load(); }
  // Once lost: "N connection failures in a row, the last: UNAVAILABLE: ...",
  // or the reason given to LoseServer.
  std::string lost_server_reason() const final;
  uint32_t RestartRequests(uint64_t limit) final;
  bool limit_sent() const final;

 protected:
  using Clock = std::chrono::steady_clock;

  explicit CountingEngine(EngineSettings settings) : settings_(std::move(settings)) {}

  // The running senders' samples (TakeAll), plus whatever else the engine
  // counts apart from them; for TakeSample and Stop.
  virtual Sample TakeRunning() = 0;
  // Start: sending may begin (not stopping, the server not lost, no
  // connection failures in a row, the turn at the first request without a
  // limit); the next sample's time starts now.
  void BeginRun();
  // A call's place in the turn: the request it sends (an index into the
  // set, modulo its size) and the turn it belongs to.
  struct Turn {
    size_t request = 0;
    uint32_t generation = 0;
  };
  // The next call's turn, for a set of `requests` requests (> 0); nullopt
  // once the limit was sent: send nothing. Thread-safe.
  std::optional<Turn> NextTurn(size_t requests);
  // Stop, its threads joined: `rest` (what completed while it drained)
  // goes into the next sample.
  void KeepForNextSample(Sample rest);

  // A call sent by `sender`.
  void CountSent(Sender& sender);
  // A call of `sender` that ended, answered or abandoned: no longer in flight.
  void CountEnded(Sender& sender);
  // An answer: OK counts its latency from `scheduled` (a call that waited
  // to be sent shows the wait: no coordinated omission), any other code is
  // a failure; hung when it came more than settings_.hung after `sent`.
  // `checked` (--labels, OK only): the answer read against its labels,
  // counted in the same sample as its latency. `message`: a failure's text,
  // kept when it is the first of its code.
  void CountAnswer(Sender& sender, grpc::StatusCode code, Clock::time_point scheduled, Clock::time_point sent,
                   Clock::time_point answered, const CheckedAnswer* checked = nullptr, std::string_view message = {});
  // `calls` that Stop gave up waiting for.
  void CountUnanswered(Sender& sender, uint64_t calls) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sender.mu);
  // The lost-server rule, after every counted outcome: a connection failure
  // (UNAVAILABLE while the call's connection is down, not a model's
  // UNAVAILABLE from a server that answers; `message` its text) lengthens
  // the run of them, anything else ends it; max_connection_failures in a
  // row and lost_server() becomes true.
  void CountConnection(bool connection_failure, std::string_view message);
  // The engine cannot send any more (`reason` says why, as
  // lost_server_reason() will): lost_server() becomes true, so a step ends
  // instead of waiting for calls that will never be made. The first reason
  // given is kept.
  void LoseServer(std::string reason);
  // How long a closed-loop slot waits after UNAVAILABLE, given its previous
  // wait (0 after any other outcome): backoff_min, doubling to backoff_max.
  std::chrono::milliseconds NextBackoff(std::chrono::milliseconds previous) const;

  const EngineSettings settings_;
  std::atomic<bool> stopping_{false};

 private:
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> total_sent_{0}, total_ok_{0}, total_failed_{0}, total_hung_{0}, total_unanswered_{0};
  std::atomic<uint64_t> total_by_code_[17] = {};  // grpc::StatusCode 0..16
  std::atomic<int> failures_in_a_row_{0};
  std::atomic<bool> lost_server_{false};
  mutable Mutex reason_mu_;
  std::string lost_reason_ ABSL_GUARDED_BY(reason_mu_);
  std::map<grpc::StatusCode, std::string> first_messages_ ABSL_GUARDED_BY(reason_mu_);
  std::atomic<bool> has_message_[17] = {};  // first_messages_ holds that code's
  static std::string OneLine(std::string_view message);
  // The turn in one word, so that a call takes its index and generation
  // together: the generation in the top 16 bits, the calls sent in it
  // below. limit_ holds the limit beside the generation it belongs to; it
  // is stored before that turn (release) and read after it (acquire).
  static constexpr int kGenerationShift = 48;
  static constexpr uint64_t kCountMask = (uint64_t{1} << kGenerationShift) - 1;
  std::atomic<uint64_t> turn_{0};
  std::atomic<uint64_t> limit_{0};
  uint64_t LimitOf(uint64_t turn) const;  // the limit of `turn`'s generation (0: none)
  Clock::time_point last_sample_;
  Sample drained_;  // kept by Stop() for the next TakeSample()
};

}  // namespace es::loadgen
