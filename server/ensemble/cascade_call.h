// CascadeCall: one request of a `combine: cascade` ensemble (early exit).
//
// The members run stage by stage (ensemble.stages, cheapest first). After a
// stage, each row's answer is the mean of the probabilities of every member
// run on it so far; a row whose top-class probability is at least
// ensemble.exit_threshold leaves, and the next stage gets only the rows
// still undecided, gathered into a smaller request. After the last stage
// every row has its answer. Each row's answer is thus the mean of the
// members of stages 0..k, where k is the stage it left at.
//
// The answer: the ensemble's one output, [rows, classes] FP32, in the
// request's row order; output `exit_stage` (INT32 [rows], the stage each
// row left at) when the client asks for it by name; the CascadeReport
// (stages run, rows leaving at each stage, member rows saved) for the
// response parameter `stages_used` and the metrics. A member's error (or
// an output that is not [rows, classes] FP32) fails the whole request,
// naming the member and stage.
//
// Thread safety: members answer on the hosts' completion threads; a stage
// starts from the thread of the last answer of the stage before; `done`
// runs once, under no lock.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "server/core/infer_types.h"

namespace es {

class CascadeCall : public std::enable_shared_from_this<CascadeCall> {
 public:
  // Sends `rows` to member `m` of the ensemble; `done` gets the version it
  // computed on (0 if it reached none), the status and the answer.
  using MemberDone = std::function<void(int64_t version, const Status&, InferResponse)>;
  using RunMember = std::function<void(size_t m, std::shared_ptr<const InferRequest> rows, MemberDone done)>;

  // `released` runs once, just before `done`: the ensemble's admission slot.
  CascadeCall(std::shared_ptr<const InferRequest> request, InferDone done, std::function<void()> released,
              RunMember run);

  // Runs the first stage; answers (possibly at once, on an error) through `done`.
  void Start();

 private:
  void RunStage(size_t stage, std::shared_ptr<const InferRequest> rows);
  void MemberAnswered(size_t stage, size_t m, int64_t version, const Status& status, const InferResponse& response);
  // After the stage's last member: marks the rows that leave; the next
  // stage's request of the rows left (null: every row has its answer).
  StatusOr<std::shared_ptr<InferRequest>> EndStageLocked(size_t stage) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  InferResponse AnswerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish(const Status& status, InferResponse response);

  const std::shared_ptr<const InferRequest> request_;
  const std::vector<std::vector<size_t>>& stages_;
  const int64_t rows_;
  const RunMember run_;
  Mutex mu_;
  InferDone done_ ABSL_GUARDED_BY(mu_);
  std::function<void()> released_ ABSL_GUARDED_BY(mu_);
  int64_t classes_ ABSL_GUARDED_BY(mu_) = -1;             // from the first answer
  std::vector<float> sum_ ABSL_GUARDED_BY(mu_);           // [rows, classes]: members' probabilities summed
  std::vector<int32_t> exit_stage_ ABSL_GUARDED_BY(mu_);  // per row; -1 while undecided
  std::vector<int64_t> pending_ ABSL_GUARDED_BY(mu_);     // rows (request order) in the current stage
  size_t members_out_ ABSL_GUARDED_BY(mu_) = 0;           // of the current stage
  Status error_ ABSL_GUARDED_BY(mu_);
  std::string member_versions_ ABSL_GUARDED_BY(mu_);
  StageTimes stages_time_ ABSL_GUARDED_BY(mu_);
  uint64_t compute_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

// A request of the same model with only `rows` (indexes into `request`'s
// batch, ascending) of each input, copied into buffers the new request owns.
// Inputs in a client's shared memory are read whole, then gathered.
StatusOr<std::shared_ptr<InferRequest>> SelectRows(const InferRequest& request, const std::vector<int64_t>& rows);

}  // namespace es
