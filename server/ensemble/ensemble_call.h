// EnsembleCall: one ensemble request in flight: its members' answers as they
// come, the decision of when the ensemble can answer, and that answer, given
// exactly once.
//
// A packed member (EnsembleMember::packed) is one call that answers for
// several members: it counts as that many, for the quorum too.
//
// The ensemble answers (ensemble.min_members = Q of N members, default N)
// once every member has answered, or member_timeout_ms has passed
// (TimedOut()) and the outcome is decided:
//  - with the combination of the members that succeeded, when at least Q
//    did; fewer than N used is a degraded answer, weights re-normalised
//    over the members used;
//  - with an error when more than N - Q members failed: with Q = N the
//    first failed member's error, as before quorums existed; otherwise
//    every failed member's error, named.
// Failures alone never answer early: the members still running would go
// on computing for nobody while the client's next request adds more.
// Members that answer after the ensemble did are dropped. `released` (the
// admission slot) runs when the last member answered, so stragglers stay
// counted against ensemble.max_in_flight.
//
// The answer carries an EnsembleReport (members used, degraded, each
// member's latency from the fan-out) for the response parameters and the
// metrics, and `member_versions` of the members used.
//
// Thread safety: every method from any thread (members answer on the
// hosts' completion threads, the timeout on the timer's); `done` runs on
// the thread whose call decided, under no lock of the core's.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "server/core/infer_types.h"

namespace es {

class EnsembleCall {
 public:
  using Clock = std::chrono::steady_clock;

  // `released` runs once, when the last member answered (before `done` if
  // the ensemble answers then): the ensemble's admission slot.
  EnsembleCall(std::shared_ptr<const InferRequest> request, InferDone done, std::function<void()> released);

  // Member `m` answered, computed on `version` (0: it never reached one).
  void MemberAnswered(size_t m, int64_t version, const Status& status, InferResponse response);
  // member_timeout_ms has passed since the fan-out.
  void TimedOut();

  const InferRequest& request() const { return *request_; }
  Clock::time_point start() const { return start_; }

 private:
  // The answer to give, once decided: delivered after the lock is released.
  struct Answer {
    InferDone done;
    std::function<void()> released;
    Status status;
    InferResponse response;
    void Deliver();
  };
  // The answer if the outcome is decided now (then never again), else nothing.
  std::optional<Answer> DecideLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status QuorumErrorLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status CombineLocked(InferResponse* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One member's answer: a plain member's outputs in results_, or one of a
  // packed member's, split out of its call's (`owned`).
  struct MemberOutputs {
    const std::string* name = nullptr;  // lives in the ensemble's config
    double weight = 1;
    std::vector<InferOutput*> outputs;  // the ensemble's outputs, in its order: in results_, or in `owned`
    std::vector<InferOutput> owned;     // packed members: the split outputs
  };
  // The answers of the `used` calls, member by member (a packed call's
  // members in their order); Internal when a call's outputs are not what
  // its entry says.
  Status MemberAnswersLocked(const std::vector<size_t>& used, std::vector<MemberOutputs>* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<const InferRequest> request_;
  const Clock::time_point start_ = Clock::now();
  Mutex mu_;
  InferDone done_ ABSL_GUARDED_BY(mu_);
  std::function<void()> released_ ABSL_GUARDED_BY(mu_);
  std::vector<InferResponse> results_ ABSL_GUARDED_BY(mu_);  // per member
  std::vector<Status> errors_ ABSL_GUARDED_BY(mu_);          // per member: OK unless it failed
  std::vector<int64_t> versions_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> latency_ns_ ABSL_GUARDED_BY(mu_);   // 0: not answered
  std::vector<bool> answered_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> failure_order_ ABSL_GUARDED_BY(mu_);  // members that failed, as they did
  size_t succeeded_ ABSL_GUARDED_BY(mu_) = 0;          // calls
  size_t succeeded_members_ ABSL_GUARDED_BY(mu_) = 0;  // members (a packed call counts its members)
  size_t failed_members_ ABSL_GUARDED_BY(mu_) = 0;
  bool timed_out_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace es
