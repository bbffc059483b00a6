#include "server/grpc/grpc_stream.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <utility>

#include "common/mutex.h"
#include "server/grpc/grpc_service.h"
#include "server/grpc/infer_request_wire.h"

namespace es {
namespace {

using inference::ModelInferRequest;
using inference::ModelStreamInferResponse;

// Requests of one stream running or answered but not yet written at which
// it stops reading until the client has taken answers (resumes at half): one
// stream cannot take every place under max_inflight_calls for itself, as one
// connection cannot with unary calls (grpc_max_concurrent_streams, 256).
constexpr size_t kMaxOutstanding = 256;


class RejectedStream final : public StreamInferReactor {
 public:
  explicit RejectedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

class StreamReactor final : public StreamInferReactor {
 public:
  StreamReactor(grpc::CallbackServerContext* ctx, InferCalls* calls)
      : calls_(calls), deadline_(SteadyDeadline(*ctx)), metadata_(MetadataLookup(ctx)) {
    MutexLock lock(&mu_);
    StartReadLocked();
  }

  void OnReadDone(bool ok) override {
    std::unique_ptr<Item> item;
    grpc::Status status;
    bool finish = false;
    {
      MutexLock lock(&mu_);
      item = std::move(read_item_);
      if (!ok || cancelled_ || write_failed_ || finishing_) {
        // !ok: the client half-closed, or the call is gone (OnCancel says
        // which). Otherwise the stream is over and `item` goes unanswered.
        if (!ok) reads_ended_ = true;
        item.reset();
        finish = TakeFinishLocked(&status);
      } else {
        ++running_;
        // The next read right away: requests are read while earlier ones
        // run (not while draining: the stream ends once what is due is
        // answered).
        if (!closing_ && static_cast<size_t>(running_) + queue_.size() < kMaxOutstanding) {
          StartReadLocked();
        } else if (!closing_) {
          read_paused_ = true;  // OnWriteDone resumes it
        }
      }
    }
    if (item != nullptr) Process(std::move(item));
    if (finish) Finish(std::move(status));  // the last use of `this`: OnDone may follow at once
  }

  void OnWriteDone(bool ok) override {
    std::unique_ptr<Item> written;  // freed (and its place given back) outside the lock
    grpc::Status status;
    bool finish = false;
    {
      MutexLock lock(&mu_);
      written = std::move(writing_);
      if (!ok) {
        write_failed_ = true;  // the call is gone: no further write can succeed
        queue_.clear();
      } else if (!queue_.empty() && !cancelled_) {
        WriteNextLocked();
      }
      if (read_paused_ && static_cast<size_t>(running_) + queue_.size() < kMaxOutstanding / 2 && !cancelled_ &&
          !write_failed_ && !closing_ &&
          !finishing_) {
        read_paused_ = false;
        StartReadLocked();
      }
      finish = TakeFinishLocked(&status);
    }
    written.reset();
    if (finish) Finish(std::move(status));
  }

  void OnCancel() override {
    std::deque<std::unique_ptr<Item>> unwritten;  // never written: their places go back now
    grpc::Status status;
    bool finish = false;
    {
      MutexLock lock(&mu_);
      cancelled_ = true;
      cancelled_flag_->store(true);
      unwritten.swap(queue_);
      finish = TakeFinishLocked(&status);
    }
    unwritten.clear();
    if (finish) Finish(std::move(status));
  }

  void OnDone() override { delete this; }

 private:
  struct Item {
    grpc::ByteBuffer read;  // the request's bytes, as read
    ModelInferRequest request;
    ModelStreamInferResponse answer;
    grpc::ByteBuffer written;  // the answer's bytes, while they are written
    InferCalls::Place place;   // held until the answer's write completed
  };

  void StartReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    read_item_ = std::make_unique<Item>();
    StartRead(&read_item_->read);
  }

  // Admits and runs one request read from the stream (without the lock:
  // Run may call `done` before it returns).
  void Process(std::unique_ptr<Item> item) {
    const Status parsed = ParseInferRequest(item->read, &item->request);
    item->read.Clear();
    if (!parsed.ok()) {
      Complete(std::move(item), parsed, false);
      return;
    }
    StatusOr<InferCalls::Place> place = calls_->Admit(item->request.model_name());
    if (!place.ok()) {
      const bool draining = !calls_->accepting();
      Complete(std::move(item), place.status(), draining);
      return;
    }
    item->place = *place;
    // Run's reference to the place must outlive Run: the item (and its copy
    // of the place) may be written and freed by another thread as soon as
    // `done` has queued it.
    const InferCalls::Place run_place = item->place;
    Item* raw = item.release();
    InferCalls::CallContext context;
    context.deadline = deadline_;
    context.cancelled = [flag = cancelled_flag_] { return flag->load(std::memory_order_relaxed); };
    context.header = metadata_;
    calls_->Run(run_place, raw->request, raw->answer.mutable_infer_response(), std::move(context),
                [this, raw](const Status& status) { Complete(std::unique_ptr<Item>(raw), status, false); });
  }

  // A request's end: its answer (or error) is queued for writing. `this`
  // is not used after Finish: the caller (Process, or Run's `done`) does
  // not touch the reactor after this returns.
  void Complete(std::unique_ptr<Item> item, const Status& status, bool draining) {
    if (!status.ok()) {
      inference::ModelInferResponse* response = item->answer.mutable_infer_response();
      response->Clear();
      response->set_id(item->request.id());
      response->set_model_name(item->request.model_name());
      response->set_model_version(item->request.model_version());
      item->answer.set_error_message(status.ToString());
    }
    // The request is not needed any more (Run is done with it); the answer
    // as bytes, written from there.
    item->request = ModelInferRequest();
    bool own_buffer = false;
    if (grpc::Status s =
            grpc::SerializationTraits<ModelStreamInferResponse>::Serialize(item->answer, &item->written, &own_buffer);
        !s.ok()) {
      ModelStreamInferResponse failed;
      failed.set_error_message("INTERNAL: the answer could not be serialized: " + s.error_message());
      (void)grpc::SerializationTraits<ModelStreamInferResponse>::Serialize(failed, &item->written, &own_buffer);
    }
    item->answer = ModelStreamInferResponse();
    std::unique_ptr<Item> dropped;  // freed outside the lock
    grpc::Status finish_status;
    bool finish = false;
    {
      MutexLock lock(&mu_);
      --running_;
      if (draining) closing_ = true;  // answer what is due, then end the stream UNAVAILABLE
      if (cancelled_ || write_failed_ || finishing_) {
        dropped = std::move(item);
      } else {
        queue_.push_back(std::move(item));
        if (writing_ == nullptr) WriteNextLocked();
      }
      finish = TakeFinishLocked(&finish_status);
    }
    dropped.reset();
    if (finish) Finish(std::move(finish_status));
  }

  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = std::move(queue_.front());
    queue_.pop_front();
    grpc::WriteOptions options;
    // More answers queued behind this one: gRPC may coalesce it with them
    // (the last of a run is written without the hint, which flushes).
    if (!queue_.empty()) options.set_buffer_hint();
    StartWrite(&writing_->written, options);
  }

  // Whether the stream's work is over, and with what status: no run in
  // progress, nothing being written, and either the reads ended with every
  // answer written, or the call is gone, or the server drains. True once
  // (finishing_): the caller then calls Finish after releasing the lock,
  // as the last thing it does with `this` (OnDone, which deletes it, may
  // follow at once on another thread). A read still outstanding then
  // (cancelled, or draining) completes before OnDone, and its OnReadDone
  // sees finishing_.
  bool TakeFinishLocked(grpc::Status* status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finishing_ || running_ > 0 || writing_ != nullptr) return false;
    if (cancelled_) {
      *status = grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled");
    } else if (write_failed_) {
      *status = grpc::Status(grpc::StatusCode::CANCELLED, "stream closed while an answer was written");
    } else if (closing_ && queue_.empty()) {
      *status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down");
    } else if (reads_ended_ && queue_.empty()) {
      *status = grpc::Status::OK;
    } else {
      return false;
    }
    finishing_ = true;
    return true;
  }

  InferCalls* const calls_;
  const std::chrono::steady_clock::time_point deadline_;
  // The stream's client metadata (the context lives as long as the reactor).
  const std::function<std::string(const std::string&)> metadata_;
  // Read by the runs' `cancelled` (which may outlive the reactor: shared).
  const std::shared_ptr<std::atomic<bool>> cancelled_flag_ = std::make_shared<std::atomic<bool>>(false);

  Mutex mu_;
  std::unique_ptr<Item> read_item_ ABSL_GUARDED_BY(mu_);          // the read outstanding
  std::unique_ptr<Item> writing_ ABSL_GUARDED_BY(mu_);            // the write outstanding
  std::deque<std::unique_ptr<Item>> queue_ ABSL_GUARDED_BY(mu_);  // answers waiting, in completion order
  int running_ ABSL_GUARDED_BY(mu_) = 0;                          // requests read whose answer is not queued yet
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_ended_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;  // the server drains
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

StreamInferReactor* StartStreamInfer(grpc::CallbackServerContext* ctx, InferCalls* calls) {
  return new StreamReactor(ctx, calls);
}

StreamInferReactor* RejectStream(const grpc::Status& status) { return new RejectedStream(status); }

}  // namespace es
