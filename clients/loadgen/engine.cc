#include "clients/loadgen/engine.h"

#include <grpc/support/time.h>
#include <sys/prctl.h>

#include <grpcpp/alarm.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <climits>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "clients/loadgen/labelled_data.h"
#include "clients/status.h"

namespace es::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

// Streaming: streams one channel carries at most (see Start).
constexpr size_t kMaxStreamsPerChannel = 100;

// How long a worker waits for an event before it looks at the stop flag again.
constexpr auto kPoll = std::chrono::milliseconds(20);

gpr_timespec ToGpr(Clock::time_point when) {
  const auto delta = std::chrono::duration_cast<std::chrono::nanoseconds>(when - Clock::now()).count();
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_nanos(std::max<int64_t>(delta, 0), GPR_TIMESPAN));
}

// ModelStreamInferResponse, scanned for infer_response.id and error_message
// only (the outputs are skipped, not copied). False if it is not a valid
// message.
bool ScanStreamAnswer(const grpc::ByteBuffer& buffer, std::string* id, std::string* error) {
  using google::protobuf::internal::WireFormatLite;
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return false;
  std::string joined;
  const uint8_t* data = nullptr;
  size_t size = 0;
  if (slices.size() == 1) {
    data = slices[0].begin();
    size = slices[0].size();
  } else {
    for (const auto& slice : slices) joined.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    data = reinterpret_cast<const uint8_t*>(joined.data());
    size = joined.size();
  }
  google::protobuf::io::CodedInputStream in(data, static_cast<int>(std::min<size_t>(size, INT32_MAX)));
  constexpr uint32_t kErrorMessage = (1 << 3) | 2, kInferResponse = (2 << 3) | 2, kId = (3 << 3) | 2;
  while (const uint32_t tag = in.ReadTag()) {
    uint32_t length = 0;
    if (tag == kErrorMessage) {
      if (!in.ReadVarint32(&length) || !in.ReadString(error, static_cast<int>(length))) return false;
    } else if (tag == kInferResponse) {
      if (!in.ReadVarint32(&length)) return false;
      const auto limit = in.PushLimit(static_cast<int>(length));
      while (const uint32_t inner = in.ReadTag()) {
        if (inner == kId) {
          if (!in.ReadVarint32(&length) || !in.ReadString(id, static_cast<int>(length))) return false;
          if (!in.Skip(in.BytesUntilLimit())) return false;  // the rest (outputs) is not needed
        } else if (!WireFormatLite::SkipField(&in, inner)) {
          return false;
        }
      }
      in.PopLimit(limit);
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return false;
    }
  }
  return in.ConsumedEntireMessage() || in.BytesUntilTotalBytesLimit() == 0;
}

// The code an error_message names in its "CODE: " prefix (ensemble-server
// writes one; other servers may not): UNKNOWN without one.
grpc::StatusCode CodeOfMessage(const std::string& message) {
  const auto colon = message.find(':');
  if (colon != std::string::npos) {
    for (int code = 1; code < 17; ++code) {
      if (message.compare(0, colon, es::client::CodeName(static_cast<grpc::StatusCode>(code))) == 0) {
        return static_cast<grpc::StatusCode>(code);
      }
    }
  }
  return grpc::StatusCode::UNKNOWN;
}

}  // namespace

// What a completion queue hands back: a call's end, or a retry's alarm.
struct LoadEngine::Event {
  enum class Kind { kCall, kRetry, kStream } kind;
  explicit Event(Kind k) : kind(k) {}
  virtual ~Event() = default;
};

struct LoadEngine::Call : Event {
  Call() : Event(Kind::kCall) {}
  grpc::ClientContext ctx;
  grpc::ByteBuffer response;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  Clock::time_point scheduled;
  Clock::time_point sent;
  size_t channel = 0;
  size_t request = 0;      // index in the RequestSet (its labels, with --labels)
  uint32_t generation = 0;  // the turn it was sent in (CountingEngine::NextTurn)
  int slot = -1;           // closed loop: the slot that sends again on completion
  bool abandoned = false;  // cancelled by Stop() and counted unanswered (drainer thread only)
};

// Closed loop: a slot's next call, sent when the alarm fires (after an
// UNAVAILABLE), or dropped if the engine is stopping by then.
struct LoadEngine::Retry : Event {
  Retry() : Event(Kind::kRetry) {}
  grpc::Alarm alarm;
  int slot = -1;
  // Streaming: the stream to reopen (slot -1) or to send the slot's next
  // request on, if it is still the stream's same opening (generation).
  Stream* stream = nullptr;
  uint64_t generation = 0;
};

// ---- ModelStreamInfer: the types (the functions are at the end) ----

// One operation of a stream; these live in their Stream (never deleted as
// events): each tag is a StreamOp*, and at most one of each is outstanding.
struct LoadEngine::StreamOp : Event {
  enum class Op { kStart, kRead, kWrite, kWritesDone, kFinish };
  StreamOp(Op o, Stream* s) : Event(Kind::kStream), op(o), stream(s) {}
  Op op;
  Stream* stream;
};

struct LoadEngine::SlotState {
  grpc::ByteBuffer request;  // the request with this slot's id
  Clock::time_point sent;
  bool awaiting = false;     // sent (or queued) on its stream, answer not yet in
};

// Drainer thread only (its worker's).
struct LoadEngine::Stream {
  explicit Stream(int i) : index(i) {}
  int index;
  size_t channel = 0;
  std::vector<int> slots;
  uint64_t generation = 0;  // openings so far
  std::unique_ptr<grpc::ClientContext> ctx;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> rw;
  StreamOp start_op{StreamOp::Op::kStart, this}, read_op{StreamOp::Op::kRead, this},
      write_op{StreamOp::Op::kWrite, this}, done_op{StreamOp::Op::kWritesDone, this},
      finish_op{StreamOp::Op::kFinish, this};
  int ops = 0;  // operations outstanding
  grpc::ByteBuffer answer;
  grpc::Status status;
  std::deque<int> to_write;  // slots whose request waits for the one write gRPC allows
  int awaiting = 0;          // requests written or queued, not answered
  bool open = false;         // opened and not yet closed (counted in Worker::open_streams)
  bool started = false, writing = false, half_closed = false, finishing = false, finished = false;
  bool abandoned = false;    // cancelled by Stop() after `hung`; its requests counted unanswered
  std::chrono::milliseconds backoff{0};
};

// Its sample and in_flight (Sender) are counted by CountingEngine.
struct LoadEngine::Worker : Sender {
  int index = 0;
  grpc::CompletionQueue cq;
  // This worker's references to the serialized requests (CountingEngine::NextTurn says which is next).
  std::vector<grpc::ByteBuffer> requests;
  std::vector<int> slots;    // closed loop
  std::map<int, std::chrono::milliseconds> backoff;  // closed loop, per slot (drainer thread only)
  std::atomic<int64_t> retries{0};  // alarms set and not yet fired
  std::set<Call*> outstanding ABSL_GUARDED_BY(mu);  // calls sent and not yet completed
  bool cancelled_rest = false;      // drainer thread only
  double rate = 0;           // open loop, requests/s of this worker
  int64_t max_inflight = 1;
  size_t next_channel = 0;   // open loop (pacer thread only)
  std::mt19937_64 rng;
  std::thread drainer;  // completions (and, closed loop, the next calls)
  std::thread pacer;    // open loop: sends on schedule
  std::atomic<bool> pacer_running{false};
  std::vector<std::unique_ptr<Stream>> streams;  // streaming: this worker's
  int open_streams = 0;                          // streaming (drainer thread only)
};

LoadEngine::LoadEngine(std::vector<std::shared_ptr<grpc::Channel>> channels, int threads, std::string method,
                       EngineSettings settings)
    : CountingEngine(std::move(settings)), channels_(std::move(channels)), threads_(std::max(1, threads)),
      method_(std::move(method)) {
  for (auto& channel : channels_) stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
}

LoadEngine::~LoadEngine() { Stop(); }

void LoadEngine::Start(const LoadPlan& plan, const RequestSet& requests) {
  Stop();
  plan_ = plan;
  set_ = &requests;
  BeginRun();
  std::vector<grpc::ByteBuffer> buffers;
  for (const std::string& bytes : requests.requests) {
    grpc::Slice slice(bytes);
    buffers.emplace_back(&slice, 1);
  }
  const std::string& request_bytes = requests.requests.at(0);  // streaming sends the first
  const bool streaming = settings_.streams > 0 && plan.concurrency > 0;
  // A stream holds one of its connection's HTTP/2 streams for its whole life:
  // past the server's limit on concurrent streams (ensemble-server's default
  // 256, many servers' 100) the rest would wait for ever, so at most
  // kMaxStreamsPerChannel per channel, the slots sharing them beyond that.
  const int max_streams = static_cast<int>(std::min<size_t>(INT_MAX / 2, kMaxStreamsPerChannel * stubs_.size()));
  const int stream_count = streaming ? std::min({settings_.streams, plan.concurrency, max_streams}) : 0;
  int threads = plan.concurrency > 0 ? std::min(threads_, plan.concurrency) : threads_;
  if (streaming) threads = std::min(threads, stream_count);
  for (int t = 0; t < threads; ++t) {
    auto w = std::make_unique<Worker>();
    w->index = t;
    w->requests = buffers;
    w->rng.seed(plan.seed * 1000003ULL + static_cast<uint64_t>(t));
    w->next_channel = static_cast<size_t>(t);
    if (plan.concurrency > 0) {
      for (int k = t; k < plan.concurrency; k += threads) w->slots.push_back(k);
    } else {
      w->rate = plan.rate / threads;
      w->max_inflight = std::max<int64_t>(1, plan.max_inflight / threads);
    }
    workers_.push_back(std::move(w));
  }
  if (streaming) {
    // Slot k on stream k % streams, stream j on worker j % threads (so a
    // slot's worker is its stream's); each slot's request has its own id.
    slot_states_.clear();
    slot_states_.resize(static_cast<size_t>(plan.concurrency));
    for (auto& w : workers_) w->slots.clear();
    for (int j = 0; j < stream_count; ++j) {
      auto stream = std::make_unique<Stream>(j);
      stream->channel = static_cast<size_t>(j) % stubs_.size();
      for (int k = j; k < plan.concurrency; k += stream_count) stream->slots.push_back(k);
      Worker* w = workers_[static_cast<size_t>(j % threads)].get();
      w->slots.insert(w->slots.end(), stream->slots.begin(), stream->slots.end());
      w->streams.push_back(std::move(stream));
    }
    for (int k = 0; k < plan.concurrency; ++k) {
      // Appending a field to a serialized message sets it (the last one wins).
      std::string id = "s";
      id.append(std::to_string(k));
      std::string bytes = request_bytes;
      bytes.push_back(static_cast<char>((3 << 3) | 2));  // ModelInferRequest.id: field 3, length-delimited
      bytes.push_back(static_cast<char>(id.size()));     // < 128: a one-byte varint
      bytes += id;
      grpc::Slice id_slice(bytes);
      slot_states_[static_cast<size_t>(k)].request = grpc::ByteBuffer(&id_slice, 1);
    }
  }
  for (auto& w : workers_) {
    Worker* ptr = w.get();
    w->drainer = std::thread([this, ptr] { Drain(ptr); });
    if (plan.concurrency <= 0) {
      w->pacer_running.store(true);
      w->pacer = std::thread([this, ptr] {
        Pace(ptr);
        ptr->pacer_running.store(false);
      });
    }
  }
}

void LoadEngine::Stop() {
  if (workers_.empty()) return;
  stop_began_ns_.store(Clock::now().time_since_epoch().count());
  stopping_.store(true);
  for (auto& w : workers_) {
    if (w->pacer.joinable()) w->pacer.join();
    w->drainer.join();
  }
  // What completed while draining stays for the next TakeSample().
  KeepForNextSample(TakeRunning());
  workers_.clear();
}

Sample LoadEngine::TakeRunning() { return TakeAll(workers_); }

void LoadEngine::RetryLater(Worker* w, int slot, Stream* stream, std::chrono::milliseconds delay) {
  auto* retry = new Retry;  // owned by the queue until Drain takes it back
  retry->slot = slot;
  retry->stream = stream;
  if (stream != nullptr) retry->generation = stream->generation;
  w->retries.fetch_add(1);
  retry->alarm.Set(&w->cq, ToGpr(Clock::now() + delay), static_cast<Event*>(retry));
}

bool LoadEngine::Issue(Worker* w, int slot, Clock::time_point scheduled) {
  const std::optional<Turn> turn = NextTurn(w->requests.size());
  if (!turn) return false;  // the limit was sent
  auto* call = new Call;
  call->request = turn->request;
  call->generation = turn->generation;
  call->ctx.set_deadline(std::chrono::system_clock::now() + settings_.timeout);
  if (!settings_.authorization.empty()) call->ctx.AddMetadata("authorization", settings_.authorization);
  call->scheduled = scheduled;
  call->sent = Clock::now();
  call->slot = slot;
  call->channel = slot >= 0 ? static_cast<size_t>(slot) % stubs_.size() : w->next_channel++ % stubs_.size();
  call->reader = stubs_[call->channel]->PrepareUnaryCall(&call->ctx, method_, w->requests[call->request], &w->cq);
  CountSent(*w);
  {
    // Registered before it starts: its completion (on the drainer thread)
    // erases it, and Stop() may cancel whatever is still registered.
    MutexLock lock(&w->mu);
    w->outstanding.insert(call);
  }
  call->reader->StartCall();
  // Tags are Event pointers (Drain tells calls from retries by their kind).
  call->reader->Finish(&call->response, &call->status, static_cast<Event*>(call));
  return true;
}

void LoadEngine::CancelOutstanding(Worker* w) {
  MutexLock lock(&w->mu);
  for (Call* call : w->outstanding) {
    call->abandoned = true;
    call->ctx.TryCancel();
  }
  CountUnanswered(*w, w->outstanding.size());
  for (auto& stream : w->streams) {
    if (!stream->open || stream->finished) continue;
    stream->abandoned = true;
    stream->ctx->TryCancel();
    CountUnanswered(*w, static_cast<uint64_t>(stream->awaiting));
  }
  w->cancelled_rest = true;
}

void LoadEngine::Completed(Worker* w, std::unique_ptr<Call> call) {
  const auto done = Clock::now();
  {
    MutexLock lock(&w->mu);
    w->outstanding.erase(call.get());
  }
  CountEnded(*w);
  if (call->abandoned) return;  // counted unanswered when it was cancelled
  const grpc::StatusCode code = call->status.error_code();
  if (code == grpc::StatusCode::OK && set_->checked()) {
    const CheckedAnswer checked = Check(*call);
    CountAnswer(*w, code, call->scheduled, call->sent, done, &checked);
  } else {
    CountAnswer(*w, code, call->scheduled, call->sent, done, nullptr, call->status.error_message());
  }
  // UNAVAILABLE from a server that answers (a model's host restarting) is not
  // a connection failure; the channel then stays connected.
  CountConnection(
      code == grpc::StatusCode::UNAVAILABLE && channels_[call->channel]->GetState(false) != GRPC_CHANNEL_READY,
      call->status.error_message());
  if (call->slot < 0 || stopping_.load(std::memory_order_relaxed) || lost_server()) return;
  // Closed loop: the slot's next call, at once or after a backoff.
  auto& backoff = w->backoff[call->slot];
  if (code != grpc::StatusCode::UNAVAILABLE) {
    backoff = std::chrono::milliseconds(0);
    Issue(w, call->slot, done);
    return;
  }
  backoff = NextBackoff(backoff);
  RetryLater(w, call->slot, nullptr, backoff);
}

CheckedAnswer LoadEngine::Check(const Call& call) const {
  // Parsed from the buffer's slices as they are (the reader wants a
  // mutable buffer: a copy shares the slices).
  grpc::ByteBuffer buffer = call.response;
  grpc::ProtoBufferReader reader(&buffer);
  inference::ModelInferResponse answer;
  if (!reader.status().ok() || !answer.ParseFromZeroCopyStream(&reader)) {
    CheckedAnswer unreadable;
    unreadable.turn = call.generation;
    return unreadable;
  }
  const AnswerCheck check = CheckAnswer(answer, set_->output, set_->labels.at(call.request));
  return {check.readable, LabelCounts{1, check.rows, check.correct}, check.served_by, call.generation, call.request};
}

void LoadEngine::Pace(Worker* w) {
  // Timer slack 1 ns: sleeps end within a few microseconds of the schedule
  // (gRPC's own timers, in whole milliseconds, would add up to 1 ms).
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  std::exponential_distribution<double> exponential(w->rate);
  auto seconds = [](double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  auto interval = [&] { return seconds(plan_.poisson ? exponential(w->rng) : 1.0 / w->rate); };
  // Workers interleave: worker t starts t/R after the first (constant), or
  // after an exponential gap of its own (Poisson).
  Clock::time_point next =
      Clock::now() + seconds(plan_.poisson ? exponential(w->rng) : static_cast<double>(w->index) / plan_.rate);
  while (!stopping_.load(std::memory_order_relaxed) && !lost_server()) {
    // Sleep in slices of at most kPoll so that Stop() is seen quickly.
    const auto now = Clock::now();
    if (next > now) {
      std::this_thread::sleep_until(std::min(next, now + kPoll));
      continue;
    }
    uint64_t skipped = 0;
    int64_t late = 0;
    while (next <= now) {  // everything due (several when this thread fell behind)
      if (limit_sent()) {  // the turn's calls are out: later arrivals are not the step's, sent or skipped
        next += interval();
        continue;
      }
      if (w->in_flight.load(std::memory_order_relaxed) < w->max_inflight) {
        const auto lag = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - next).count();
        if (Issue(w, -1, next)) late += lag;
      } else {
        ++skipped;
      }
      next += interval();
    }
    MutexLock lock(&w->mu);
    w->sample.skipped += skipped;
    w->sample.late_ns_sum += late;
  }
}

void LoadEngine::Drain(Worker* w) {
  const bool closed = plan_.concurrency > 0;
  if (closed && !w->streams.empty()) {
    for (auto& stream : w->streams) OpenStream(w, stream.get());
  } else if (closed) {
    const auto start = Clock::now();
    for (int slot : w->slots) Issue(w, slot, start);
  }
  while (true) {
    // Done when nothing can be sent any more (stopping; the pacer, if any,
    // has made its last call: it clears pacer_running after it), nothing is
    // in flight and no retry is pending. The loads are in that order, so no
    // call is missed.
    const bool stopping = stopping_.load();
    if (stopping && (closed || !w->pacer_running.load()) && w->in_flight.load() == 0 && w->retries.load() == 0 &&
        w->open_streams == 0) {
      break;
    }
    if (stopping) {
      for (auto& stream : w->streams) MaybeHalfClose(stream.get());  // idle streams: nothing more to send
    }
    if (stopping && !w->cancelled_rest &&
        Clock::now().time_since_epoch().count() - stop_began_ns_.load() >
            std::chrono::duration_cast<Clock::duration>(settings_.hung).count()) {
      CancelOutstanding(w);
    }
    void* tag = nullptr;
    bool ok = false;
    const auto event = w->cq.AsyncNext(&tag, &ok, ToGpr(Clock::now() + kPoll));
    if (event == grpc::CompletionQueue::SHUTDOWN) break;
    if (event != grpc::CompletionQueue::GOT_EVENT) continue;
    auto* e = static_cast<Event*>(tag);
    if (e->kind == Event::Kind::kCall) {
      Completed(w, std::unique_ptr<Call>(static_cast<Call*>(e)));
      continue;
    }
    if (e->kind == Event::Kind::kStream) {
      OnStreamEvent(w, static_cast<StreamOp*>(e), ok);
      continue;
    }
    std::unique_ptr<Retry> retry(static_cast<Retry*>(e));
    Stream* stream = retry->stream;
    const bool go = !stopping_.load() && !lost_server();
    if (stream == nullptr) {
      if (go) Issue(w, retry->slot, Clock::now());
    } else if (retry->slot < 0) {
      if (go && !stream->open) OpenStream(w, stream);
    } else if (go && stream->generation == retry->generation && stream->open && !stream->finishing &&
               !stream->half_closed) {
      SendOnStream(w, stream, retry->slot, Clock::now());
    }  // else: the slot is sent again when its stream reopens, or not at all (stopping)
    w->retries.fetch_sub(1);
  }
  w->cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (w->cq.Next(&tag, &ok)) {
    auto* e = static_cast<Event*>(tag);
    if (e->kind != Event::Kind::kStream) delete e;  // stream operations live in their Stream
  }
}


// ---- ModelStreamInfer (closed loop; every function on the worker's drainer thread) ----

void LoadEngine::OpenStream(Worker* w, Stream* s) {
  ++s->generation;
  s->rw.reset();
  s->ctx = std::make_unique<grpc::ClientContext>();
  if (!settings_.authorization.empty()) s->ctx->AddMetadata("authorization", settings_.authorization);
  s->rw = stubs_[s->channel]->PrepareCall(s->ctx.get(), method_, &w->cq);
  s->status = grpc::Status();
  s->to_write.clear();
  s->awaiting = 0;
  s->ops = 0;
  s->started = s->writing = s->half_closed = s->finishing = s->finished = s->abandoned = false;
  s->open = true;
  ++w->open_streams;
  ++s->ops;
  s->rw->StartCall(&s->start_op);
  const auto now = Clock::now();
  for (int slot : s->slots) SendOnStream(w, s, slot, now);
}

void LoadEngine::SendOnStream(Worker* w, Stream* s, int slot, Clock::time_point scheduled) {
  SlotState& state = slot_states_[static_cast<size_t>(slot)];
  state.sent = scheduled;
  state.awaiting = true;
  ++s->awaiting;
  CountSent(*w);
  s->to_write.push_back(slot);
  if (s->started && !s->writing) WriteNext(s);
}

void LoadEngine::WriteNext(Stream* s) {
  const int slot = s->to_write.front();
  s->to_write.pop_front();
  s->writing = true;
  ++s->ops;
  // More requests queued behind this one: gRPC may send them together (the
  // last one, without the hint, flushes).
  grpc::WriteOptions options;
  if (!s->to_write.empty()) options.set_buffer_hint();
  s->rw->Write(slot_states_[static_cast<size_t>(slot)].request, options, &s->write_op);
}

void LoadEngine::MaybeHalfClose(Stream* s) {
  if (!stopping_.load(std::memory_order_relaxed) || !s->open || !s->started || s->half_closed || s->finishing ||
      s->writing || !s->to_write.empty() || s->awaiting > 0) {
    return;
  }
  s->half_closed = true;
  ++s->ops;
  s->rw->WritesDone(&s->done_op);
}

void LoadEngine::OnStreamEvent(Worker* w, StreamOp* op, bool ok) {
  Stream* s = op->stream;
  --s->ops;
  auto finish = [&] {
    s->finishing = true;
    ++s->ops;
    s->rw->Finish(&s->status, &s->finish_op);
  };
  switch (op->op) {
    case StreamOp::Op::kStart:
      if (!ok) {
        finish();
        break;
      }
      s->started = true;
      ++s->ops;
      s->rw->Read(&s->answer, &s->read_op);
      if (!s->writing && !s->to_write.empty()) WriteNext(s);
      break;
    case StreamOp::Op::kWrite:
      s->writing = false;
      if (ok && !s->to_write.empty()) WriteNext(s);  // when !ok the read fails too and ends the stream
      break;
    case StreamOp::Op::kRead:
      if (!ok) {
        finish();
        break;
      }
      OnStreamAnswer(w, s);
      ++s->ops;
      s->rw->Read(&s->answer, &s->read_op);
      break;
    case StreamOp::Op::kWritesDone:
      break;
    case StreamOp::Op::kFinish:
      s->finished = true;
      break;
  }
  MaybeHalfClose(s);
  MaybeStreamClosed(w, s);
}

void LoadEngine::OnStreamAnswer(Worker* w, Stream* s) {
  const auto now = Clock::now();
  std::string id, error;
  const bool parsed = ScanStreamAnswer(s->answer, &id, &error);
  s->answer.Clear();
  int slot = -1;
  if (parsed && id.size() > 1 && id[0] == 's' && id.size() < 12) {
    slot = std::atoi(id.c_str() + 1);
    if (slot < 0 || static_cast<size_t>(slot) >= slot_states_.size() ||
        !slot_states_[static_cast<size_t>(slot)].awaiting ||
        std::find(s->slots.begin(), s->slots.end(), slot) == s->slots.end()) {
      slot = -1;
    }
  }
  if (slot < 0) {
    // Not an answer to a request of this stream: a server fault, counted
    // as a failure (UNKNOWN, neither hung nor a connection's); no slot
    // waits on it.
    CountAnswer(*w, grpc::StatusCode::UNKNOWN, now, now, now, nullptr, "an answer on the stream to no request of it");
    return;
  }
  SlotState& state = slot_states_[static_cast<size_t>(slot)];
  state.awaiting = false;
  --s->awaiting;
  CountEnded(*w);
  if (s->abandoned) return;  // counted unanswered when Stop() cancelled the stream
  const grpc::StatusCode code = error.empty() ? grpc::StatusCode::OK : CodeOfMessage(error);
  CountAnswer(*w, code, state.sent, state.sent, now, nullptr, error);
  CountConnection(false, {});  // the stream answered: its connection is up
  if (stopping_.load(std::memory_order_relaxed) || lost_server()) return;
  if (code != grpc::StatusCode::UNAVAILABLE) {
    s->backoff = std::chrono::milliseconds(0);
    SendOnStream(w, s, slot, now);
    return;
  }
  // The server answers but a model is unavailable (e.g. its host restarts):
  // the slot waits before it sends again, as in unary closed loop.
  s->backoff = NextBackoff(s->backoff);
  RetryLater(w, slot, s, s->backoff);
}

void LoadEngine::MaybeStreamClosed(Worker* w, Stream* s) {
  if (!s->open || !s->finished || s->ops > 0) return;
  // The requests it had not answered fail with the stream's status (those of
  // an abandoned stream were counted unanswered when it was cancelled).
  const auto now = Clock::now();
  const grpc::StatusCode code = s->status.ok() ? grpc::StatusCode::UNKNOWN : s->status.error_code();
  const bool connection_failure =
      code == grpc::StatusCode::UNAVAILABLE && channels_[s->channel]->GetState(false) != GRPC_CHANNEL_READY;
  for (int slot : s->slots) {
    SlotState& state = slot_states_[static_cast<size_t>(slot)];
    if (!state.awaiting) continue;
    state.awaiting = false;
    CountEnded(*w);
    if (s->abandoned) continue;
    CountAnswer(*w, code, state.sent, state.sent, now, nullptr,
                s->status.ok() ? "the stream closed before answering" : s->status.error_message());
    CountConnection(connection_failure, s->status.error_message());
  }
  s->awaiting = 0;
  s->to_write.clear();
  s->open = false;
  --w->open_streams;
  s->rw.reset();
  s->ctx.reset();
  if (stopping_.load() || lost_server()) return;
  // Reopened after a backoff (the server went away, or ended the stream).
  s->backoff = NextBackoff(s->backoff);
  RetryLater(w, -1, s, s->backoff);
}

}  // namespace es::loadgen
