#include "server/hosts/host_connection.h"

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "common/checked_math.h"
#include "server/hosts/submission_burst.h"

namespace es {
namespace {

using Clock = std::chrono::steady_clock;

// Added to the sum of execution limits before a request counts as lost:
// scheduling, the ring and the completion thread take some time too.
constexpr std::chrono::seconds kLostSlack(1);

// Rounds up to a cache line; nullopt on overflow.
std::optional<uint64_t> AlignUp(uint64_t v) {
  const auto padded = CheckedAdd(v, ipc::kCacheLine - 1);
  if (!padded) return std::nullopt;
  return *padded / ipc::kCacheLine * ipc::kCacheLine;
}

// Steady-clock nanoseconds: the clock the host's executor slots use
// (CLOCK_MONOTONIC is one clock for every process on the machine).
uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

}  // namespace

StatusOr<std::unique_ptr<HostConnection>> HostConnection::Create(const std::string& host_name, uint64_t arena_bytes,
                                                                 ipc::WaitPolicy wait) {
  ipc::ChannelOptions options;
  options.arena_bytes = arena_bytes;
  auto channel = ipc::Channel::Create(options);
  if (!channel.ok()) {
    return Status(channel.status().code(), "host '" + host_name + "': " + channel.status().message());
  }
  return std::unique_ptr<HostConnection>(new HostConnection(host_name, std::move(channel).value(), wait));
}

HostConnection::HostConnection(std::string host_name, ipc::Channel channel, ipc::WaitPolicy wait)
    : host_name_(std::move(host_name)),
      channel_(std::move(channel)),
      end_(&channel_, wait),
      arena_(channel_.arena_bytes()) {}

HostConnection::~HostConnection() { Close(Status::Unavailable("host '" + host_name_ + "' connection closed")); }

void HostConnection::StartCompletionThread() {
  completion_thread_ = std::thread([this] {
    // Named, so that top, perf and /proc tell it from gRPC's threads. Linux
    // keeps 15 characters: a longer host name keeps its last 7, where names
    // like gpu-host-0 and gpu-host-1 differ.
    const std::string host = host_name_.size() > 7 ? host_name_.substr(host_name_.size() - 7) : host_name_;
    pthread_setname_np(pthread_self(), ("es-done-" + host).c_str());
    CompletionLoop();
  });
}

Status HostConnection::Submit(const std::string& model, int64_t version, const std::vector<TensorParts>& inputs,
                              const OutputPlan& outputs, Done done) {
  return SubmitKind(ipc::RequestKind::kInfer, model, version, inputs, outputs, std::move(done));
}

Status HostConnection::SubmitControl(ipc::RequestKind kind, const std::string& model, int64_t version,
                                     std::string_view payload, std::chrono::milliseconds limit, Done done) {
  std::vector<TensorParts> inputs;
  if (!payload.empty()) {
    TensorParts spec;
    spec.datatype = DataType::kUint8;
    spec.shape = {static_cast<int64_t>(payload.size())};
    spec.pieces = {{reinterpret_cast<const uint8_t*>(payload.data()), payload.size(), {}}};
    inputs.push_back(std::move(spec));
  }
  OutputPlan answer;  // no outputs: a status only
  answer.max_compute = limit;
  return SubmitKind(kind, model, version, inputs, answer, std::move(done));
}

Status HostConnection::SubmitKind(ipc::RequestKind kind, const std::string& model, int64_t version,
                                  const std::vector<TensorParts>& inputs, const OutputPlan& outputs, Done done) {
  // Taken first: a refused submission must not leave the mark to whatever
  // this thread submits next.
  const SubmissionMark mark = kind == ipc::RequestKind::kInfer ? SubmissionBurst::Take() : SubmissionMark{};
  const size_t output_count = outputs.outputs ? outputs.outputs->types.size() : 0;
  if (inputs.size() > ipc::kMaxTensors || output_count > ipc::kMaxTensors) {
    return Status::InvalidArgument("model '" + model + "' has more inputs or outputs than the IPC channel carries");
  }
  if (model.size() >= ipc::kMaxModelName) {
    return Status::InvalidArgument("model name '" + model + "' is too long for the IPC channel");
  }
  std::optional<uint64_t> total = AlignUp(outputs.capacity);
  for (const auto& in : inputs) {
    const auto padded = AlignUp(in.bytes());
    total = total && padded ? CheckedAdd(*total, *padded) : std::nullopt;
  }
  const auto region = total ? arena_.Allocate(*total) : std::nullopt;
  if (!region) {
    return Status::ResourceExhausted("host '" + host_name_ + "': tensor arena full (" +
                                     (total ? std::to_string(*total) : std::string("more than 2^64")) +
                                     " bytes requested for model '" + model + "')");
  }

  ipc::RequestDesc desc{};
  desc.request_id = next_id_.fetch_add(1, std::memory_order_relaxed);
  desc.version = version;
  desc.kind = static_cast<uint32_t>(kind);
  desc.burst = mark.burst;
  if (mark.more_follow) desc.flags = ipc::kMoreFollow;
  std::memcpy(desc.model, model.data(), model.size());
  desc.num_inputs = static_cast<uint32_t>(inputs.size());
  uint64_t cursor = *region;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorParts& in = inputs[i];
    ipc::TensorDesc& t = desc.inputs[i];
    t.offset = cursor;
    t.bytes = in.bytes();
    t.datatype = static_cast<uint32_t>(in.datatype);
    t.ndim = static_cast<uint32_t>(in.shape.size());
    for (size_t d = 0; d < in.shape.size() && d < ipc::kMaxDims; ++d) t.dims[d] = in.shape[d];
    // The one copy of each request's bytes: into shared memory, where the
    // host reads them in place as one contiguous tensor.
    uint8_t* dst = channel_.arena() + cursor;
    for (const TensorPiece& piece : in.pieces) {
      if (piece.read) {
        // Read straight into the arena (a client's shared-memory input).
        if (Status read = piece.read(dst); !read.ok()) {
          arena_.Free(*region);
          return read;
        }
      } else if (piece.bytes > 0) {
        std::memcpy(dst, piece.data, piece.bytes);
      }
      dst += piece.bytes;
    }
    cursor += *AlignUp(t.bytes);  // cannot overflow: the sum fit above
  }
  desc.output_offset = cursor;
  desc.output_capacity = outputs.capacity;

  // Held from the request's entry in pending_ until it is on the ring or
  // waiting: a completion for it (Finish looks it up under this lock) can
  // only be checked once it is one or the other, never in between.
  MutexLock publishing(&overflow_mu_);
  {
    MutexLock lock(&mu_);
    if (closed_) {
      arena_.Free(*region);
      return Status::Unavailable("host '" + host_name_ + "' is down");
    }
    Pending pending;
    pending.arena_offset = *region;
    pending.model = model;
    pending.outputs = outputs.outputs;
    pending.reservation = Reservation{desc.output_offset, desc.output_capacity, {}, {}};
    if (pending.outputs) {
      pending.reservation.output_types = pending.outputs->types;
      pending.reservation.output_dims = pending.outputs->dims;
    }
    pending.max_compute = outputs.max_compute;
    if (outputs.max_compute.count() > 0) {
      pending_compute_ += outputs.max_compute;
      pending.answer_by = Clock::now() + pending_compute_ + kLostSlack;
    }
    pending.done = std::move(done);
    if (spare_pending_.empty()) {
      pending_.emplace(desc.request_id, std::move(pending));
    } else {
      auto node = std::move(spare_pending_.back());
      spare_pending_.pop_back();
      node.key() = desc.request_id;
      node.mapped() = std::move(pending);
      pending_.insert(std::move(node));
    }
    outstanding_.fetch_add(1, std::memory_order_relaxed);
  }
  // (Should Close() take it from pending_ meanwhile, it frees its region
  // only after clearing what waits, under the lock this holds: nothing that
  // waits points into freed memory, and the ring of a closed connection is
  // read by no one.)
  PublishLocked(desc);
  return Status::Ok();
}

void HostConnection::PublishLocked(const ipc::RequestDesc& desc) {
  if (waiting_.empty() && end_.Submit(desc).ok()) return;
  // Behind the waiting ones, never past them: the ring is the host's queue,
  // and its order is the order of arrival.
  waiting_.push_back(desc);
  waiting_ids_.insert(desc.request_id);
  PublishWaitingLocked();
}

void HostConnection::PublishWaiting() {
  // Always under the lock (one uncontended lock per completion): a count
  // read without it could miss a request queued just as the host emptied
  // the ring, which would then wait for the next request or completion.
  MutexLock lock(&overflow_mu_);
  PublishWaitingLocked();
}

void HostConnection::PublishWaitingLocked() {
  // The id leaves waiting_ids_ under the same lock as the push: a completion
  // for it, which can only follow the push, finds it sent (Finish locks).
  while (!waiting_.empty() && end_.Submit(waiting_.front()).ok()) {
    waiting_ids_.erase(waiting_.front().request_id);
    waiting_.pop_front();
  }
}

void HostConnection::CompletionLoop() {
  ipc::CompletionDesc completion{};
  while (!stop_.load(std::memory_order_acquire)) {
    // After a violation nothing more the host says is believed: the rest of
    // its requests fail when the supervisor closes the connection (within
    // one watch tick), and a flood of lies cannot flood the log.
    if (violations_.load(std::memory_order_relaxed) != 0) {  // counted by this thread
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    if (end_.NextCompletion(&completion)) Finish(completion);
    // After a completion the host took at least that request off the ring;
    // after a quiet wait too, so nothing waits on a ring with room for long.
    PublishWaiting();
  }
}

void HostConnection::RecordViolation(const std::string& what) {
  spdlog::error("host '{}': protocol violation: {}", host_name_, what);
  {
    MutexLock lock(&mu_);
    if (fault_.empty()) fault_ = what;
  }
  // Counted only now (release; violations() acquires): a caller that sees
  // the count, e.g. the supervisor, finds the fault set.
  violations_.fetch_add(1, std::memory_order_release);
}

std::string HostConnection::fault() const {
  MutexLock lock(&mu_);
  return fault_;
}

// `completion` is the router's private copy (the ring copied it out of the
// slot), so the host cannot change it between the check and its use.
void HostConnection::Finish(const ipc::CompletionDesc& completion) {
  Pending pending;
  bool never_sent = false;
  {
    // Both lookups under overflow_mu_, which SubmitKind holds from the
    // request's entry in pending_ until it is on the ring or waiting: the
    // completion is checked before the entry or after the publishing, never
    // between (when an unsent request would be found in flight, answered,
    // and its region freed while its descriptor still waits to be sent).
    MutexLock publishing(&overflow_mu_);
    never_sent = waiting_ids_.count(completion.request_id) > 0;
    if (!never_sent) {
      MutexLock lock(&mu_);
      auto it = pending_.find(completion.request_id);
      if (it != pending_.end()) {
        auto node = pending_.extract(it);
        pending = std::move(node.mapped());
        node.mapped() = Pending{};  // a moved-from callback may still hold what it captured
        pending_compute_ -= pending.max_compute;
        spare_pending_.push_back(std::move(node));
      }
    }
  }
  if (never_sent) {
    // Its id is guessable, but the host has not been sent it: it cannot
    // have computed it. Its request stays waiting (and fails with the rest
    // when the supervisor closes the connection).
    RecordViolation("completion for request " + std::to_string(completion.request_id) +
                    ", which was never sent to the host");
    return;
  }
  if (!pending.done) {
    // A completion for no request in flight: made up, or a replay of one
    // already answered. Nothing to answer; the host is not to be trusted.
    RecordViolation("completion for request " + std::to_string(completion.request_id) + ", which is not in flight");
    return;
  }
  Status status = CheckCompletion(completion, pending.reservation);
  if (!status.ok()) {
    const std::string what = "model '" + pending.model + "': " + status.message();
    RecordViolation(what);
    status = Status::Internal("host '" + host_name_ + "' returned an " + what + "; the host is being restarted");
  } else if (completion.status_code != 0) {
    const char* msg = completion.message;
    status = Status(static_cast<StatusCode>(completion.status_code),
                    std::string(msg, strnlen(msg, sizeof(completion.message))));
  }
  pending.done(status, status.ok() ? &completion : nullptr, channel_.arena());
  arena_.Free(pending.arena_offset);
  outstanding_.fetch_sub(1, std::memory_order_relaxed);
}

std::optional<Overrun> HostConnection::FindOverrun() const {
  const uint64_t now = NowNs();
  const auto& slots = channel_.header().executors;
  for (const ipc::ExecutorSlot& slot : slots) {
    const uint64_t id = slot.request_id.load(std::memory_order_acquire);
    if (id == 0) continue;
    const uint64_t started = slot.started_ns.load(std::memory_order_relaxed);
    if (slot.request_id.load(std::memory_order_acquire) != id || started > now) continue;  // changed meanwhile
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(now - started));
    MutexLock lock(&mu_);
    auto it = pending_.find(id);
    if (it == pending_.end() || it->second.max_compute.count() <= 0 || elapsed <= it->second.max_compute) continue;
    return Overrun{id, it->second.model, elapsed, it->second.max_compute};
  }
  return std::nullopt;
}

std::string HostConnection::FindLost() const {
  const auto now = Clock::now();
  MutexLock lock(&mu_);
  for (const auto& [id, pending] : pending_) {
    if (now <= pending.answer_by) continue;
    return "request " + std::to_string(id) + " (model '" + pending.model +
           "') is unanswered after every request before it and itself could have used up their execution "
           "limits; the host lost it";
  }
  return "";
}

void HostConnection::Close(const Status& why, const std::map<uint64_t, Status>& exceptions) {
  stop_.store(true, std::memory_order_release);
  if (completion_thread_.joinable()) {
    channel_.completions().NotifyConsumer();
    completion_thread_.join();
  }
  std::unordered_map<uint64_t, Pending> failed;
  {
    MutexLock lock(&mu_);
    closed_ = true;
    failed.swap(pending_);
    pending_compute_ = std::chrono::milliseconds(0);
  }
  {
    MutexLock lock(&overflow_mu_);  // never to be sent: their arena regions are freed below
    waiting_.clear();
    waiting_ids_.clear();
  }
  for (auto& [id, pending] : failed) {
    auto own = exceptions.find(id);
    pending.done(own != exceptions.end() ? own->second : why, nullptr, nullptr);
    arena_.Free(pending.arena_offset);
    outstanding_.fetch_sub(1, std::memory_order_relaxed);
  }
}

}  // namespace es
