#include "server/kserve/infer_calls.h"

#include <algorithm>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/log_setup.h"
#include "common/steady_clock.h"
#include "server/core/response_cache.h"
#include "server/kserve/request_codec.h"

namespace es {

InferCalls::PlaceState::~PlaceState() {
  EndRun();
  calls_->held_.fetch_sub(1);
}

void InferCalls::PlaceState::EndRun() {
  if (!run_ended_.exchange(true)) calls_->running_.fetch_sub(1);
}

InferCalls::InferCalls(const ServerConfig* config, ModelRepository* repository, InferenceCore* core,
                       ModelStatistics* stats, RequestMetrics* metrics, SharedMemoryRegistry* shm)
    : config_(config), repository_(repository), core_(core), stats_(stats), metrics_(metrics), shm_(shm) {}

void InferCalls::CountRefused(ModelMetrics* metrics, const Status& status) {
  if (metrics != nullptr) {
    metrics->Refused(static_cast<int>(status.code()));
  } else if (metrics_ != nullptr) {
    metrics_->CountUnknownModel();  // no label: a client must not be able to create series
  }
}

StatusOr<InferCalls::Place> InferCalls::Admit(const std::string& model_name) {
  // Both counts first: a drain that begins now either sees this call running
  // or the call sees accepting_ false.
  running_.fetch_add(1);
  const int64_t held = held_.fetch_add(1) + 1;
  Place place = std::make_shared<PlaceState>(this);
  auto refuse = [&](Status status) -> StatusOr<Place> {
    CountRefused(metrics_ != nullptr ? metrics_->Find(model_name) : nullptr, status);
    return status;  // `place` goes, giving both counts back
  };
  if (!accepting_.load()) return refuse(Status::Unavailable("server is shutting down"));
  // Refused before decoding: the point is to bound what the router holds.
  const int64_t max_calls = config_->limits.max_inflight_calls;
  if (held > max_calls) {
    return refuse(Status::ResourceExhausted("server busy: " + std::to_string(held - 1) +
                                            " inference calls are held (limits.max_inflight_calls " +
                                            std::to_string(max_calls) + "); retry later"));
  }
  return place;
}

namespace {

// The value of request parameter `name` ("" when unnamed or absent), as text.
std::string StickyValue(const inference::ModelInferRequest& proto, const std::string& name) {
  if (name.empty()) return "";
  auto it = proto.parameters().find(name);
  if (it == proto.parameters().end()) return "";
  switch (it->second.parameter_choice_case()) {
    case inference::InferParameter::kStringParam: return it->second.string_param();
    case inference::InferParameter::kInt64Param: return std::to_string(it->second.int64_param());
    case inference::InferParameter::kUint64Param: return std::to_string(it->second.uint64_param());
    default: return "";
  }
}

// A client's W3C trace context (traceparent, tracestate), when it sent one:
// the trace continues it. A malformed traceparent is ignored, as the
// standard asks (the trace starts afresh).
void ContinueClientTrace(const InferCalls::CallContext& context, RequestTrace* trace) {
  if (!context.header) return;
  const std::string traceparent = context.header("traceparent");
  if (traceparent.empty()) return;
  if (const std::optional<RemoteParent> parent = ParseTraceparent(traceparent)) {
    std::string state = context.header("tracestate");
    if (state.size() > 512) state.clear();  // the standard's bound on what must be passed on
    trace->Continue(*parent, std::move(state));
  } else {
    spdlog::debug("traceparent '{}' is malformed; the trace starts afresh", traceparent.substr(0, 64));
  }
}

}  // namespace

void InferCalls::Run(const Place& place, const inference::ModelInferRequest& proto,
                     inference::ModelInferResponse* response, CallContext context, Done done) {
  const auto start = std::chrono::steady_clock::now();
  // Read-only map lookup; from here on metrics are relaxed atomics only.
  ModelMetrics* metrics = metrics_ != nullptr ? metrics_->Find(proto.model_name()) : nullptr;
  auto decoded = DecodeInferRequest(proto, *repository_, config_->limits, shm_);
  if (!decoded.ok()) {
    const LogRequestScope log_request(proto.id(), {});
    if (spdlog::should_log(spdlog::level::debug)) {  // the arguments cost allocations: only when written
      spdlog::debug("request {} to model {} refused: {}", QuoteClientText(proto.id()),
                    QuoteClientText(proto.model_name()), decoded.status().ToString());
    }
    CountUndecodable(metrics, proto.model_name(), decoded.status());
    done(decoded.status());
    place->EndRun();
    return;
  }
  std::shared_ptr<InferRequest> request = std::move(decoded).value();
  if (Status owned = OwnCachedSharedMemoryInputs(request.get()); !owned.ok()) {
    done(owned);
    place->EndRun();
    return;
  }
  request->deadline = std::min(request->deadline, context.deadline);
  request->cancelled = std::move(context.cancelled);
  Tracer* tracer = tracer_.load();
  std::string trace_hex;  // the trace's W3C id, for the log lines of a traced request
  if (tracer != nullptr) {
    request->trace = tracer->Sample(request->model->name, request->version, request->id);
    if (request->trace != nullptr) {
      // Triton's names: the request had been read when the call reached us.
      const uint64_t at = SteadyNs(start);
      request->trace->Mark(context.http ? "HTTP_RECV_START" : "GRPC_WAITREAD_START", at);
      request->trace->Mark(context.http ? "HTTP_RECV_END" : "GRPC_WAITREAD_END", at);
      request->trace->Mark("REQUEST_START");
      ContinueClientTrace(context, request->trace.get());
      const TraceId id = request->trace->context().trace_id;
      trace_hex = HexId(id.data(), id.size());
    }
  }
  // No scope is open from here: what the core logs on this thread may be
  // about other requests (a batch's). The answer's lines open their own.
  if (metrics != nullptr) metrics->Started();
  InferDone answered = [place, response, request, start, stats = stats_, metrics, tracer, http = context.http,
                        trace_hex, done = std::move(done)](const Status& status, InferResponse answer) {
    const LogRequestScope log_answer(request->id, trace_hex);
    // Encoding can fail after a good run: an output too big for the
    // shared-memory room its client gave, or a region that shrank (the
    // answer then is that error, and it is counted as one).
    Status outcome = status;
    if (status.ok()) {
      if (metrics != nullptr && metrics->ensemble()) {
        for (const InferOutput& out : answer.outputs) {
          if (out.name == request->model->outputs[0].name) metrics->ObserveAnswer(out);
        }
      }
      InferResponse encoded;  // the outputs move; stages and disagreement stay for the metrics
      encoded.outputs = std::move(answer.outputs);
      encoded.member_versions = answer.member_versions;
      encoded.version = answer.version;
      encoded.ensemble = answer.ensemble;
      encoded.cascade = answer.cascade;
      encoded.served_by = answer.served_by;
      encoded.served_accuracy = answer.served_accuracy;
      const uint64_t encoding = request->trace != nullptr ? RequestTrace::NowNs() : 0;
      outcome = EncodeInferResponse(*request, std::move(encoded), response);
      if (request->trace != nullptr) request->trace->AddSpan("encode", encoding, RequestTrace::NowNs());
    }
    const auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
    stats->Record(request->model->name, answer.version > 0 ? answer.version : request->version, outcome.ok(), static_cast<uint64_t>(elapsed.count()),
                  answer.stages, static_cast<uint64_t>(request->batch_rows()));
    if (metrics != nullptr) {
      metrics->Finished(static_cast<int>(outcome.code()), static_cast<uint64_t>(elapsed.count()), answer,
                        request->batch_rows());
    }
    if (!outcome.ok() && spdlog::should_log(spdlog::level::debug)) {  // the arguments cost allocations
      spdlog::debug("request {} to model '{}' version {} failed after {} us: {}", QuoteClientText(request->id),
                    request->model->name, request->version, elapsed.count() / 1000, outcome.ToString());
    }
    if (request->trace == nullptr) {
      done(outcome);
    } else {
      RequestTrace& trace = *request->trace;
      trace.set_version(answer.version > 0 ? answer.version : request->version);
      if (!outcome.ok()) trace.SetError(outcome.ToString());
      trace.Mark("REQUEST_END");
      trace.Mark(http ? "HTTP_SEND_START" : "GRPC_SEND_START");
      done(outcome);  // the answer handed to the transport
      trace.Mark(http ? "HTTP_SEND_END" : "GRPC_SEND_END");
      tracer->Finish(request->trace);
    }
    place->EndRun();
  };
  Experiments* experiments = experiments_.load();
  if (experiments == nullptr) return core_->Infer(request, std::move(answered));
  const std::string sticky = experiments->StickyParameter(*request->model);
  std::string sticky_value = StickyValue(proto, sticky);
  if (sticky_value.empty() && !sticky.empty() && context.header) sticky_value = context.header(sticky);
  experiments->Run(request, sticky_value, std::move(answered));
}

Status InferCalls::OwnCachedSharedMemoryInputs(InferRequest* request) const {
  if (config_->response_cache_bytes == 0) return Status::Ok();
  const bool in_shared_memory = std::any_of(request->inputs.begin(), request->inputs.end(),
                                            [](const InferInput& in) { return in.data == nullptr && in.bytes > 0; });
  if (!in_shared_memory) return Status::Ok();
  // The model itself, or (an ensemble, a cascade) a member whose answers are cached.
  bool cached = request->model->response_cache;
  for (const EnsembleMember& member : request->model->ensemble.members) {
    const ModelConfig* m = repository_->Find(member.model);
    cached = cached || (m != nullptr && m->response_cache);
  }
  return cached ? ResponseCache::OwnInputs(request) : Status::Ok();
}

void InferCalls::CountUndecodable(ModelMetrics* metrics, const std::string& model_name, const Status& status) {
  // Counted against the version it would have gone to (none: not counted).
  if (const es::ModelConfig* model = repository_->Find(model_name); model != nullptr) {
    const std::vector<int64_t> ready = repository_->ReadyVersions(*model);
    if (!ready.empty()) stats_->Record(model->name, ready.back(), false, 0, {}, 0);
  }
  CountRefused(metrics, status);
}

void InferCalls::Refuse(const Place& place, const std::string& model_name, const Status& status) {
  CountUndecodable(metrics_ != nullptr ? metrics_->Find(model_name) : nullptr, model_name, status);
  place->EndRun();
}

bool InferCalls::WaitForInFlight(std::chrono::steady_clock::time_point deadline) const {
  // A short poll: this runs once, at shutdown, and must not slow the hot path
  // with a condition variable that every call would have to signal.
  while (running_.load() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace es
