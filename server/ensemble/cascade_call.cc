#include "server/ensemble/cascade_call.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "common/checked_math.h"
#include "server/hosts/submission_burst.h"

namespace es {
namespace {

// Members of stages 0..stage together (a packed entry counts its members).
int64_t MembersThrough(const EnsembleSpec& spec, size_t stage) {
  int64_t n = 0;
  for (size_t s = 0; s <= stage; ++s) {
    for (size_t m : spec.stages[s]) n += static_cast<int64_t>(spec.members[m].Count());
  }
  return n;
}

}  // namespace

StatusOr<std::shared_ptr<InferRequest>> SelectRows(const InferRequest& request, const std::vector<int64_t>& rows) {
  auto out = std::make_shared<InferRequest>();
  out->model = request.model;
  out->version = request.version;
  out->version_pinned = request.version_pinned;
  CopyRequestContext(request, out.get());
  const int64_t batch = request.batch_rows();
  for (const InferInput& input : request.inputs) {
    if (input.shape.empty() || input.shape[0] != batch || batch <= 0 || input.bytes % static_cast<size_t>(batch)) {
      return Status::Internal("model '" + request.model->name + "': input '" +
                              (input.spec != nullptr ? input.spec->name : std::string("?")) +
                              "' does not split into its batch's rows");
    }
    const uint8_t* source = input.data;
    std::unique_ptr<uint8_t[]> whole;
    if (source == nullptr && input.read_into) {  // in the client's shared memory: read it once, whole
      whole = std::make_unique_for_overwrite<uint8_t[]>(input.bytes);
      ES_RETURN_IF_ERROR(input.read_into(whole.get()));
      source = whole.get();
    }
    const size_t row_bytes = input.bytes / static_cast<size_t>(batch);
    auto gathered = std::make_unique<std::string>(rows.size() * row_bytes, '\0');
    for (size_t j = 0; j < rows.size(); ++j) {
      std::memcpy(gathered->data() + j * row_bytes, source + static_cast<size_t>(rows[j]) * row_bytes, row_bytes);
    }
    InferInput selected;
    selected.spec = input.spec;
    selected.datatype = input.datatype;
    selected.shape = input.shape;
    selected.shape[0] = static_cast<int64_t>(rows.size());
    selected.data = reinterpret_cast<const uint8_t*>(gathered->data());
    selected.bytes = gathered->size();
    out->inputs.push_back(std::move(selected));
    out->scratch.push_back(std::move(gathered));
  }
  return out;
}

CascadeCall::CascadeCall(std::shared_ptr<const InferRequest> request, InferDone done, std::function<void()> released,
                         RunMember run)
    : request_(std::move(request)),
      stages_(request_->model->ensemble.stages),
      rows_(request_->batch_rows()),
      run_(std::move(run)) {
  MutexLock lock(&mu_);  // not shared yet; the lock keeps the analysis simple
  done_ = std::move(done);
  released_ = std::move(released);
  exit_stage_.assign(static_cast<size_t>(rows_), -1);
  for (int64_t r = 0; r < rows_; ++r) pending_.push_back(r);
}

void CascadeCall::Start() { RunStage(0, request_); }

void CascadeCall::RunStage(size_t stage, std::shared_ptr<const InferRequest> rows) {
  const std::vector<size_t>& members = stages_[stage];
  {
    MutexLock lock(&mu_);
    members_out_ = members.size();
  }
  // The stage's member calls follow one another: one wake-up of the router
  // per host for them, not one per call (SubmissionBurst).
  SubmissionBurst burst;
  for (size_t i = 0; i < members.size(); ++i) {
    const size_t m = members[i];
    burst.MarkNext(/*last=*/i + 1 == members.size());
    run_(m, rows, [self = shared_from_this(), stage, m](int64_t version, const Status& status, InferResponse r) {
      self->MemberAnswered(stage, m, version, status, r);
    });
  }
}

void CascadeCall::MemberAnswered(size_t stage, size_t m, int64_t version, const Status& status,
                                 const InferResponse& response) {
  const ModelConfig& ensemble = *request_->model;
  const std::string& name = ensemble.ensemble.members[m].model;
  StatusOr<std::shared_ptr<InferRequest>> next = std::shared_ptr<InferRequest>();
  InferResponse answer;
  {
    MutexLock lock(&mu_);
    const std::string where =
        "ensemble '" + ensemble.name + "' stage " + std::to_string(stage) + " member '" + name + "': ";
    const int64_t k = static_cast<int64_t>(pending_.size());
    if (!status.ok()) {
      if (error_.ok()) error_ = Status(status.code(), where + status.message());
    } else if (error_.ok()) {
      // The member's answer is untrusted data from a host: its shape must be
      // exactly the rows sent by the classes, before a byte is read.
      // A packed member's is [rows, members, classes]: its members' sum.
      const int64_t packed = static_cast<int64_t>(ensemble.ensemble.members[m].packed.size());
      const size_t rank = packed > 0 ? 3 : 2;
      const InferOutput* out = response.outputs.empty() ? nullptr : &response.outputs[0];
      const int64_t classes = out != nullptr && out->shape.size() == rank ? out->shape.back() : -1;
      const int64_t per_row = packed > 0 ? packed : 1;
      // Checked arithmetic: `classes` is the host's word.
      const std::optional<uint64_t> bytes =
          out != nullptr ? TensorBytes(out->shape, sizeof(float)) : std::optional<uint64_t>();
      if (out == nullptr || out->datatype != DataType::kFp32 || out->shape.size() != rank || out->shape[0] != k ||
          (packed > 0 && out->shape[1] != packed) || classes < 1 || (classes_ >= 0 && classes != classes_) ||
          !bytes || *bytes != out->data.size()) {
        error_ = Status::Internal(where + "answered an output that is not [" + std::to_string(k) +
                                  (packed > 0 ? ", " + std::to_string(packed) : std::string()) +
                                  ", classes] FP32 probabilities");
      } else {
        if (classes_ < 0) {
          classes_ = classes;
          sum_.assign(static_cast<size_t>(rows_ * classes), 0.0f);
        }
        const auto* p = reinterpret_cast<const float*>(out->data.data());
        for (int64_t j = 0; j < k; ++j) {
          float* row = sum_.data() + pending_[static_cast<size_t>(j)] * classes_;
          for (int64_t i = 0; i < per_row; ++i) {
            const float* member = p + (j * per_row + i) * classes_;
            for (int64_t c = 0; c < classes_; ++c) row[c] += member[c];
          }
        }
        if (!member_versions_.empty()) member_versions_.push_back(',');
        member_versions_.append(name);
        member_versions_.push_back(':');
        member_versions_.append(std::to_string(version));
        stages_time_.queue_ns += response.stages.queue_ns;
        stages_time_.ipc_ns += response.stages.ipc_ns;
        stages_time_.compute_ns += response.stages.compute_ns;
        stages_time_.batch_size = std::max(stages_time_.batch_size, response.stages.batch_size);
        compute_ns_ += response.compute_ns;
      }
    }
    if (--members_out_ > 0) return;
    if (error_.ok()) {
      next = EndStageLocked(stage);
      if (next.ok() && *next == nullptr) answer = AnswerLocked();
    }
    if (!error_.ok()) next = error_;
  }
  if (!next.ok()) {
    Finish(next.status(), {});
  } else if (*next != nullptr) {
    RunStage(stage + 1, std::move(next).value());
  } else {
    Finish(Status::Ok(), std::move(answer));
  }
}

StatusOr<std::shared_ptr<InferRequest>> CascadeCall::EndStageLocked(size_t stage) {
  const double threshold =
      request_->exit_threshold > 0 ? request_->exit_threshold : request_->model->ensemble.exit_threshold;
  const bool last = stage + 1 == stages_.size();
  const double members = static_cast<double>(MembersThrough(request_->model->ensemble, stage));
  std::vector<int64_t> undecided;
  for (int64_t row : pending_) {
    const float* sum = sum_.data() + row * classes_;
    const double top = static_cast<double>(*std::max_element(sum, sum + classes_)) / members;
    if (last || top >= threshold) {
      exit_stage_[static_cast<size_t>(row)] = static_cast<int32_t>(stage);
    } else {
      undecided.push_back(row);
    }
  }
  if (undecided.empty()) return std::shared_ptr<InferRequest>();
  StatusOr<std::shared_ptr<InferRequest>> next = SelectRows(*request_, undecided);
  pending_ = std::move(undecided);
  return next;
}

InferResponse CascadeCall::AnswerLocked() {
  const ModelConfig& ensemble = *request_->model;
  const int64_t all_members = MembersThrough(request_->model->ensemble, stages_.size() - 1);
  auto report = std::make_shared<CascadeReport>();
  InferOutput probabilities{ensemble.outputs[0].name, DataType::kFp32, {rows_, classes_},
                            std::string(static_cast<size_t>(rows_ * classes_) * sizeof(float), '\0')};
  auto* dst = reinterpret_cast<float*>(probabilities.data.data());
  for (int64_t r = 0; r < rows_; ++r) {
    const size_t stage = static_cast<size_t>(exit_stage_[static_cast<size_t>(r)]);
    const int64_t run = MembersThrough(request_->model->ensemble, stage);
    for (int64_t c = 0; c < classes_; ++c) dst[r * classes_ + c] = sum_[r * classes_ + c] / static_cast<float>(run);
    if (report->exits.size() <= stage) report->exits.resize(stage + 1, 0);
    ++report->exits[stage];
    report->member_rows_saved += all_members - run;
  }
  report->stages_used = static_cast<int64_t>(report->exits.size());
  InferResponse out;
  out.outputs.push_back(std::move(probabilities));
  const auto& wanted = request_->requested_outputs;
  if (std::find(wanted.begin(), wanted.end(), "exit_stage") != wanted.end()) {
    InferOutput exits{"exit_stage", DataType::kInt32, {rows_}, std::string(exit_stage_.size() * sizeof(int32_t), '\0')};
    std::memcpy(exits.data.data(), exit_stage_.data(), exits.data.size());
    out.outputs.push_back(std::move(exits));
  }
  out.stages = stages_time_;
  out.compute_ns = compute_ns_;
  out.member_versions = member_versions_;
  out.cascade = std::move(report);
  return out;
}

void CascadeCall::Finish(const Status& status, InferResponse response) {
  InferDone done;
  std::function<void()> released;
  {
    MutexLock lock(&mu_);
    done = std::move(done_);
    released = std::move(released_);
  }
  if (!done) return;
  if (released) released();
  done(status, std::move(response));
}

}  // namespace es
