#include "server/core/model_dispatcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/log_setup.h"
#include "common/steady_clock.h"
#include "server/hosts/submission_burst.h"

namespace es {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kAlign = ipc::kCacheLine;
// How often the batcher's timer looks for expired or cancelled requests
// while every host slot is busy.
constexpr auto kPurgeInterval = std::chrono::milliseconds(5);

uint64_t Ns(Clock::duration d) {
  return static_cast<uint64_t>(std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
}

// Errors from hosts (e.g. "host 'cpu1' went down") get the model's name in
// front, so every answer names the model it concerns.
Status NameModel(const ModelConfig& model, const Status& status) {
  if (status.ok() || status.message().find("model '" + model.name + "'") != std::string::npos) return status;
  return Status(status.code(), "model '" + model.name + "': " + status.message());
}

// Why a queued request must not run on `model`, or OK. `model` is the
// dispatcher's: for an ensemble's member call, the member (the request is
// the ensemble's, and shares its deadline and cancellation).
Status Dropping(const ModelConfig& model, const InferRequest& r, Clock::time_point now, Clock::time_point enqueued) {
  if (now >= r.deadline) {
    return Status::DeadlineExceeded("model '" + model.name + "': deadline exceeded after " +
                                    std::to_string(Ns(now - enqueued) / 1000) + " µs in the queue; not computed");
  }
  if (r.cancelled && r.cancelled()) return Status::Cancelled("model '" + model.name + "': request cancelled");
  return Status::Ok();
}

bool ReadsAtSubmit(const InferRequest& r) {
  for (const InferInput& in : r.inputs) {
    if (in.read_into) return true;
  }
  return false;
}

// Requests batch together only if every input agrees beyond the batch dim.
bool SameSampleShape(const InferRequest& a, const InferRequest& b) {
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const auto& x = a.inputs[i].shape;
    const auto& y = b.inputs[i].shape;
    if (x.size() != y.size() || !std::equal(x.begin() + 1, x.end(), y.begin() + 1)) return false;
  }
  return true;
}

// Batches of one model in flight at once: on each host serving it, its
// instances_per_host, bounded by the executor threads that can run them.
int SlotsOf(const ModelConfig& model, const ServerConfig& config) {
  int slots = 0;
  for (const auto& h : model.hosts) {
    const HostConfig* host = config.FindHost(h);
    if (host != nullptr) slots += std::max(1, std::min(model.instances_per_host, host->executors));
  }
  return std::max(1, slots);
}

// Input bytes a queued request holds (its payloads live until it is answered).
int64_t InputBytes(const InferRequest& r) {
  uint64_t bytes = 0;
  for (const auto& in : r.inputs) bytes += in.bytes;
  return static_cast<int64_t>(bytes);
}

// The full declared shape of each output (batch dim -1 when batched: its
// size is checked per batch in Finish, as an honest model may get it wrong,
// which is an error of the request, not of the host).
std::shared_ptr<const OutputSpec> MakeOutputSpec(const ModelConfig& model) {
  auto spec = std::make_shared<OutputSpec>();
  for (const auto& out : model.outputs) {
    spec->types.push_back(out.datatype);
    std::vector<int64_t>& dims = spec->dims.emplace_back(model.batched() ? 1 : 0, -1);
    dims.insert(dims.end(), out.dims.begin(), out.dims.end());
  }
  return spec;
}

// ", requests 'a', 'b' and 3 more": the ids clients gave the requests of a
// batch, for the debug log; the first few only, each as QuoteClientText
// quotes it. Empty when no request of the batch has one.
template <typename Batch>
std::string RequestIds(const Batch& batch) {
  constexpr size_t kShown = 8;
  std::string ids;
  size_t named = 0;
  for (const auto& q : batch) {
    const std::string& id = q.request->id;
    if (id.empty()) continue;
    if (++named > kShown) continue;
    ids += (named == 1 ? ", requests " : ", ") + QuoteClientText(id);
  }
  if (named > kShown) ids += " and " + std::to_string(named - kShown) + " more";
  return ids;
}

std::vector<DispatchHost> FromSupervisors(const std::vector<HostSupervisor*>& hosts) {
  std::vector<DispatchHost> out;
  for (HostSupervisor* h : hosts) out.push_back({h->config().name, [h] { return h->connection(); }});
  return out;
}

}  // namespace

ModelDispatcher::ModelDispatcher(const ModelConfig* model, const ServerConfig* config,
                                 std::vector<HostSupervisor*> hosts, ModelStatistics* stats)
    : ModelDispatcher(model, config, FromSupervisors(hosts), stats) {}

ModelDispatcher::ModelDispatcher(const ModelConfig* model, const ServerConfig* config, std::vector<DispatchHost> hosts,
                                 ModelStatistics* stats)
    : model_(model),
      config_(config),
      hosts_(std::move(hosts)),
      stats_(stats),
      batching_(model->dynamic_batching.enabled && model->batched()),
      slots_(SlotsOf(*model, *config)),
      queue_delay_(model->dynamic_batching.max_queue_delay_us),
      output_spec_(MakeOutputSpec(*model)),
      queues_(static_cast<size_t>(std::max(1, model->dynamic_batching.priority_levels))) {
  if (batching_) timer_ = std::thread([this] { TimerLoop(); });
}

ModelDispatcher::~ModelDispatcher() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  timer_cv_.NotifyAll();
  if (timer_.joinable()) timer_.join();
}

bool ModelDispatcher::Ready() const {
  for (const DispatchHost& h : hosts_) {
    if (h.connection() != nullptr) return true;
  }
  return false;
}

void ModelDispatcher::Infer(std::shared_ptr<const InferRequest> request, int64_t version, InferDone done,
                            std::shared_ptr<RequestTrace> trace) {
  const auto now = Clock::now();
  if (!batching_) {
    // Moved in, not listed: a braced list would copy the Queued, and with it
    // every callback the member call's `done` wraps (an allocation each).
    auto batch = std::make_shared<Batch>();
    batch->push_back(Queued{std::move(request), std::move(done), now, 0, version, std::move(trace)});
    Dispatch(std::move(batch), now, 0);
    return;
  }
  // The batches sent below may be other requests': a submission mark armed
  // for this member call (SubmissionBurst) is not theirs.
  SubmissionBurst::Take();
  const DynamicBatching& cfg = model_->dynamic_batching;
  const int priority = request->priority == 0 ? cfg.default_priority : request->priority;
  std::vector<Batch> batches;
  Dropped dropped;
  bool wake_timer = false;
  {
    MutexLock lock(&mu_);
    // Refusals are answered below, outside the lock. The byte bound matters
    // as much as the count: queued requests hold their payloads (up to
    // max_request_bytes each) until they are answered.
    const int64_t bytes = InputBytes(*request);
    if (closed_) {
      dropped.push_back({Queued{request, std::move(done), now, 0, version}, *closed_});
    } else if (static_cast<int64_t>(queued_) >= cfg.max_queue_size) {
      dropped.push_back({Queued{request, std::move(done), now, 0, version},
                         Status::ResourceExhausted("model '" + model_->name + "': queue full (" +
                                                   std::to_string(queued_) + " requests waiting, max_queue_size " +
                                                   std::to_string(cfg.max_queue_size) + ")")});
    } else if (queued_bytes_ + bytes > cfg.max_queue_bytes) {
      dropped.push_back({Queued{request, std::move(done), now, 0, version},
                         Status::ResourceExhausted("model '" + model_->name + "': queue full (" +
                                                   std::to_string(queued_bytes_) + " bytes waiting + " +
                                                   std::to_string(bytes) + " of this request > max_queue_bytes " +
                                                   std::to_string(cfg.max_queue_bytes) + ")")});
    } else {
      const size_t level = static_cast<size_t>(std::clamp(priority, 1, cfg.priority_levels) - 1);
      queued_rows_ += request->batch_rows();
      queued_bytes_ += bytes;
      queues_[level].push_back(Queued{std::move(request), std::move(done), now, level, version, std::move(trace)});
      ++queued_;
      batches = TakeReadyBatchesLocked(now, &dropped);
      wake_timer = TimerMustWakeSoonerLocked();
    }
  }
  if (wake_timer) timer_cv_.NotifyOne();
  DispatchAll(std::move(batches), std::move(dropped));
}

size_t ModelDispatcher::FailQueued(const Status& why) {
  Dropped dropped;
  {
    MutexLock lock(&mu_);
    closed_ = why;
    for (auto& q : queues_) {
      for (Queued& queued : q) dropped.push_back({std::move(queued), why});
      q.clear();
    }
    queued_ = 0;
    queued_rows_ = 0;
    queued_bytes_ = 0;
  }
  const size_t n = dropped.size();
  DispatchAll({}, std::move(dropped));
  return n;
}

bool ModelDispatcher::TimerMustWakeSoonerLocked() const {
  if (QueueEmptyLocked()) return false;
  if (timer_wake_ == Clock::time_point::max()) return true;  // asleep until notified: the queue was empty
  return in_flight_ < slots_ && OldestLocked() + queue_delay_ < timer_wake_;
}

bool ModelDispatcher::QueueEmptyLocked() const { return queued_ == 0; }

ModelDispatcher::Clock::time_point ModelDispatcher::OldestLocked() const {
  auto oldest = Clock::time_point::max();
  for (const auto& q : queues_) {
    if (!q.empty()) oldest = std::min(oldest, q.front().enqueued);
  }
  return oldest;
}

void ModelDispatcher::PurgeLocked(Clock::time_point now, Dropped* dropped) {
  for (auto& q : queues_) {
    for (auto it = q.begin(); it != q.end();) {
      Status why = Dropping(*model_, *it->request, now, it->enqueued);
      if (why.ok()) {
        ++it;
        continue;
      }
      queued_rows_ -= it->request->batch_rows();
      queued_bytes_ -= InputBytes(*it->request);
      --queued_;
      dropped->push_back({std::move(*it), std::move(why)});
      it = q.erase(it);
    }
  }
}

std::vector<ModelDispatcher::Batch> ModelDispatcher::TakeReadyBatchesLocked(Clock::time_point now,
                                                                           Dropped* dropped) {
  std::vector<Batch> batches;
  while (in_flight_ < slots_ && !QueueEmptyLocked()) {
    const bool full = queued_rows_ >= model_->max_batch_size;
    if (!full && now - OldestLocked() < queue_delay_) break;  // wait for more (the timer wakes us)
    Batch batch = FormBatchLocked(now, dropped);
    if (batch.empty()) continue;  // everything taken was expired or cancelled
    ++in_flight_;
    batches.push_back(std::move(batch));
  }
  return batches;
}

ModelDispatcher::Batch ModelDispatcher::FormBatchLocked(Clock::time_point now, Dropped* dropped) {
  PurgeLocked(now, dropped);
  Batch batch;
  int64_t rows = 0;
  const int64_t max_rows = model_->max_batch_size;
  // Highest priority first, FIFO within a level; the first request decides
  // the version and the sample shape, and requests of another version or
  // shape wait for a later batch.
  for (auto& q : queues_) {
    for (auto it = q.begin(); it != q.end();) {
      const int64_t r = it->request->batch_rows();
      // A request whose inputs are read from a client's shared memory at
      // submission runs in a batch of its own: a failed read (the client
      // truncated its object) then fails that request alone.
      if (rows + r > max_rows ||
          (!batch.empty() && (batch.front().version != it->version || ReadsAtSubmit(*batch.front().request) ||
                              ReadsAtSubmit(*it->request) || !SameSampleShape(*batch.front().request, *it->request)))) {
        ++it;
        continue;
      }
      rows += r;
      batch.push_back(std::move(*it));
      it = q.erase(it);
    }
  }
  // Trim to the largest preferred size the batch fills, returning the rest
  // to the front of their queues in their original order.
  const auto& preferred = model_->dynamic_batching.preferred_batch_sizes;
  if (!preferred.empty() && rows < max_rows && std::find(preferred.begin(), preferred.end(), rows) == preferred.end()) {
    auto fit = std::upper_bound(preferred.begin(), preferred.end(), rows);
    if (fit != preferred.begin()) {
      const int64_t target = *std::prev(fit);
      while (batch.size() > 1 && rows > target) {
        Queued back = std::move(batch.back());
        batch.pop_back();
        rows -= back.request->batch_rows();
        queues_[back.level].push_front(std::move(back));
      }
    }
  }
  for (const auto& q : batch) {
    queued_rows_ -= q.request->batch_rows();
    queued_bytes_ -= InputBytes(*q.request);
  }
  queued_ -= batch.size();
  return batch;
}

void ModelDispatcher::DispatchAll(std::vector<Batch> batches, Dropped dropped) {
  for (auto& [queued, why] : dropped) {
    // Guarded: the quoting would otherwise be done for every dropped
    // request, past capacity too, whether the line is written or not.
    if (spdlog::should_log(spdlog::level::debug)) {
      spdlog::debug("{} (request {})", why.message(), QuoteClientText(queued.request->id));
    }
    queued.done(why, {});
  }
  const auto now = Clock::now();
  for (auto& b : batches) {
    if (spdlog::should_log(spdlog::level::debug) && !b.empty()) {
      // What an operator tuning max_queue_delay_us or preferred sizes needs:
      // how full each batch left, how long its oldest request waited, and
      // which requests (by the ids their clients gave) went together.
      int64_t rows = 0;
      auto oldest = now;
      for (const Queued& q : b) {
        rows += q.request->batch_rows();
        oldest = std::min(oldest, q.enqueued);
      }
      spdlog::debug("model '{}' version {}: batch of {} row(s) from {} request(s), oldest waited {} us{}", model_->name,
                    b.front().version, rows, b.size(), Ns(now - oldest) / 1000, RequestIds(b));
    }
    Dispatch(std::make_shared<Batch>(std::move(b)), now, 0);
  }
}

StatusOr<std::shared_ptr<HostConnection>> ModelDispatcher::PickHost() const {
  std::shared_ptr<HostConnection> best;
  std::string down;
  for (const DispatchHost& h : hosts_) {
    auto conn = h.connection();
    if (!conn) {
      down += (down.empty() ? "" : "; ") + ("host '" + h.name + "' is down");
      continue;
    }
    if (!best || conn->outstanding() < best->outstanding()) best = std::move(conn);
  }
  if (!best) return Status::Unavailable("model '" + model_->name + "' is unavailable: " + down);
  return best;
}

OutputPlan ModelDispatcher::OutputPlanFor(int64_t rows) const {
  OutputPlan plan;
  plan.capacity = OutputCapacity(rows);
  plan.outputs = output_spec_;
  plan.max_compute = std::chrono::milliseconds(model_->max_compute_ms > 0 ? model_->max_compute_ms
                                                                          : config_->limits.max_compute_ms);
  return plan;
}

uint64_t ModelDispatcher::OutputCapacity(int64_t rows) const {
  uint64_t total = 0;
  for (const auto& out : model_->outputs) {
    uint64_t bytes = DataTypeSize(out.datatype) * static_cast<uint64_t>(model_->batched() ? rows : 1);
    for (int64_t d : out.dims) {
      if (d < 0) {
        bytes = static_cast<uint64_t>(config_->limits.max_output_bytes);
        break;
      }
      bytes *= static_cast<uint64_t>(d);
    }
    total += (bytes + kAlign - 1) / kAlign * kAlign;
  }
  return total;
}

void ModelDispatcher::Dispatch(std::shared_ptr<Batch> batch, Clock::time_point dispatched, int attempt) {
  StatusOr<std::shared_ptr<HostConnection>> picked = PickHost();
  if (!picked.ok()) {
    Finish(*batch, picked.status(), nullptr, nullptr, dispatched, dispatched);
    return;
  }
  std::shared_ptr<HostConnection> conn = std::move(picked).value();
  // One tensor per input: the requests' rows one after another.
  const InferRequest& leader = *batch->front().request;
  int64_t rows = 0;
  for (const auto& q : *batch) rows += q.request->batch_rows();
  std::vector<TensorParts> inputs(leader.inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i].datatype = leader.inputs[i].datatype;
    inputs[i].shape = leader.inputs[i].shape;
    if (model_->batched()) inputs[i].shape[0] = rows;
    for (const auto& q : *batch) {
      const InferInput& in = q.request->inputs[i];
      inputs[i].pieces.push_back({in.data, in.bytes, in.read_into});
    }
  }
  const auto submitted = Clock::now();
  Status s = conn->Submit(
      model_->HostKey(), batch->front().version, inputs, OutputPlanFor(rows),
      [this, batch, dispatched, submitted, attempt, host = conn->host_name()](
          const Status& status, const ipc::CompletionDesc* completion, const uint8_t* arena) {
        // The host died with the batch in flight: one more try on a replica.
        if (!status.ok() && status.code() == StatusCode::kUnavailable && attempt == 0 && hosts_.size() > 1) {
          Dispatch(batch, dispatched, attempt + 1);
          return;
        }
        Finish(*batch, status, completion, arena, dispatched, submitted, &host);
      });
  if (!s.ok()) Finish(*batch, s, nullptr, nullptr, dispatched, submitted);
}

void ModelDispatcher::Finish(const Batch& batch, const Status& status, const ipc::CompletionDesc* completion,
                             const uint8_t* arena, Clock::time_point dispatched, Clock::time_point submitted,
                             const std::string* host) {
  const auto now = Clock::now();
  int64_t total_rows = 0;
  for (const auto& q : batch) total_rows += q.request->batch_rows();
  Status s = NameModel(*model_, status);
  if (s.ok() && completion->num_outputs != model_->outputs.size()) {
    s = Status::Internal("model '" + model_->name + "' returned " + std::to_string(completion->num_outputs) +
                         " output(s), the config declares " + std::to_string(model_->outputs.size()));
  }
  for (uint32_t k = 0; s.ok() && model_->batched() && k < completion->num_outputs; ++k) {
    const ipc::TensorDesc& t = completion->outputs[k];
    if (t.ndim == 0 || t.dims[0] != total_rows) {
      s = Status::Internal("model '" + model_->name + "' output '" + model_->outputs[k].name + "' has " +
                           (t.ndim ? std::to_string(t.dims[0]) : std::string("no")) + " rows for a batch of " +
                           std::to_string(total_rows));
    }
  }
  if (s.ok() && stats_ != nullptr) {
    stats_->RecordExecution(model_->name, batch.front().version, total_rows, completion->compute_ns);
  }
  // Every request's answer is copied out of the arena first ...
  std::vector<InferResponse> responses;
  if (s.ok()) responses.reserve(batch.size());
  int64_t row = 0;
  for (size_t i = 0; s.ok() && i < batch.size(); ++i) {
    const Queued& q = batch[i];
    const int64_t rows = q.request->batch_rows();
    InferResponse& response = responses.emplace_back();
    response.compute_ns = completion->compute_ns;
    response.stages = {Ns(dispatched - q.enqueued), Ns(now - submitted) - std::min(Ns(now - submitted), completion->compute_ns),
                       completion->compute_ns, 0, total_rows};
    for (uint32_t k = 0; k < completion->num_outputs; ++k) {
      const ipc::TensorDesc& t = completion->outputs[k];
      InferOutput out;
      out.name = model_->outputs[k].name;
      out.datatype = static_cast<DataType>(t.datatype);
      out.shape.assign(t.dims, t.dims + std::min<uint32_t>(t.ndim, ipc::kMaxDims));
      const char* base = reinterpret_cast<const char*>(arena + t.offset);
      if (model_->batched()) {
        const uint64_t row_bytes = t.bytes / static_cast<uint64_t>(total_rows);
        out.shape[0] = rows;
        out.data.assign(base + static_cast<uint64_t>(row) * row_bytes, static_cast<uint64_t>(rows) * row_bytes);
      } else {
        out.data.assign(base, t.bytes);
      }
      response.outputs.push_back(std::move(out));
    }
    row += rows;
  }
  const bool traced = std::any_of(batch.begin(), batch.end(), [](const Queued& q) { return q.trace != nullptr; });
  const uint64_t copied = traced ? RequestTrace::NowNs() : 0;
  for (const Queued& q : batch) {
    if (q.trace == nullptr) continue;
    if (completion != nullptr && host != nullptr) {
      q.trace->SetHost({*host, completion->received_ns, completion->compute_start_ns,
                        completion->compute_start_ns + completion->compute_ns});
    }
    q.trace->Mark("QUEUE_START", SteadyNs(q.enqueued));
    q.trace->Mark("COMPUTE_START", SteadyNs(dispatched));
    q.trace->Mark("COMPUTE_INPUT_END", SteadyNs(submitted));  // the inputs are in the host's arena
    q.trace->Mark("COMPUTE_OUTPUT_START", SteadyNs(now));     // the host's completion arrived
    q.trace->Mark("COMPUTE_END", copied);                     // the outputs copied out
  }
  // ... then the host gets its next batch, and only then are the calls
  // answered: encoding and finishing a batch's gRPC calls (20-40 µs each
  // here) can take as long as a light model's batch takes to compute, and
  // the host would sit idle through it.
  if (batching_) SlotFreed();
  for (size_t i = 0; i < batch.size(); ++i) {
    if (s.ok()) {
      batch[i].done(Status::Ok(), std::move(responses[i]));
    } else {
      batch[i].done(s, {});
    }
  }
}

void ModelDispatcher::SlotFreed() {
  std::vector<Batch> batches;
  Dropped dropped;
  bool wake_timer = false;
  {
    MutexLock lock(&mu_);
    --in_flight_;
    batches = TakeReadyBatchesLocked(Clock::now(), &dropped);
    wake_timer = TimerMustWakeSoonerLocked();
  }
  if (wake_timer) timer_cv_.NotifyOne();
  DispatchAll(std::move(batches), std::move(dropped));
}

void ModelDispatcher::TimerLoop() {
  MutexLock lock(&mu_);
  while (!stopping_) {
    if (QueueEmptyLocked()) {
      timer_wake_ = Clock::time_point::max();
      timer_cv_.Wait(&mu_);
      continue;
    }
    // Wake when the oldest request's delay is up (if a slot is free), and in
    // any case often enough to answer expired or cancelled requests promptly.
    auto wake = Clock::now() + kPurgeInterval;
    if (in_flight_ < slots_) wake = std::min(wake, OldestLocked() + queue_delay_);
    timer_wake_ = wake;
    timer_cv_.WaitUntil(&mu_, wake);
    if (stopping_) break;
    Dropped dropped;
    const auto now = Clock::now();
    PurgeLocked(now, &dropped);
    std::vector<Batch> batches = TakeReadyBatchesLocked(now, &dropped);
    lock.Unlock();
    DispatchAll(std::move(batches), std::move(dropped));
    lock.Lock();
  }
  // Shutdown: whatever is still queued is answered, never dropped silently.
  Dropped dropped;
  for (auto& q : queues_) {
    for (auto& item : q) dropped.push_back({std::move(item), Status::Unavailable("model '" + model_->name + "': server shutting down")});
    q.clear();
  }
  queued_ = 0;
  queued_rows_ = 0;
  queued_bytes_ = 0;
  lock.Unlock();
  DispatchAll({}, std::move(dropped));
}

}  // namespace es
