#include "server/tracing/otlp_spans.h"

#include <chrono>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

namespace es {
namespace {

namespace otlp = ensemble_serve::otlp;

void Attribute(google::protobuf::RepeatedPtrField<otlp::KeyValue>* to, const char* key, const std::string& value) {
  otlp::KeyValue* kv = to->Add();
  kv->set_key(key);
  kv->mutable_value()->set_string_value(value);
}
void Attribute(google::protobuf::RepeatedPtrField<otlp::KeyValue>* to, const char* key, int64_t value) {
  otlp::KeyValue* kv = to->Add();
  kv->set_key(key);
  kv->mutable_value()->set_int_value(value);
}

std::optional<uint64_t> At(const RequestTrace::Snapshot& t, std::string_view name) {
  for (const auto& [mark, ns] : t.marks) {
    if (name == mark) return ns;
  }
  return std::nullopt;
}
std::optional<uint64_t> AtEither(const RequestTrace::Snapshot& t, std::string_view a, std::string_view b) {
  std::optional<uint64_t> ns = At(t, a);
  return ns ? ns : At(t, b);
}

// The spans of one trace, placed under the router's or a host's scope.
class TraceSpans {
 public:
  TraceSpans(const RequestTrace::Snapshot& trace, int64_t unix_offset_ns, otlp::ScopeSpans* router,
             otlp::ScopeSpans* host)
      : trace_(trace), offset_(unix_offset_ns), router_(router), host_(host) {}

  void Build() {
    const bool top = trace_.parent_id == 0;
    const std::optional<uint64_t> start =
        top ? AtEither(trace_, "GRPC_WAITREAD_START", "HTTP_RECV_START") : At(trace_, "REQUEST_START");
    const std::optional<uint64_t> end =
        top ? AtEither(trace_, "GRPC_SEND_END", "HTTP_SEND_END") : At(trace_, "REQUEST_END");
    if (!start || !end) return;  // never finished: nothing to show
    otlp::Span* own = router_->add_spans();
    own->set_name((top ? "infer " : "member ") + trace_.model);
    own->set_kind(top ? otlp::Span::SPAN_KIND_SERVER : otlp::Span::SPAN_KIND_INTERNAL);
    Ids(own, trace_.context.span_id, trace_.context.parent_span_id);
    own->set_trace_state(trace_.context.trace_state);
    Times(own, *start, *end);
    Attribute(own->mutable_attributes(), "model.name", trace_.model);
    Attribute(own->mutable_attributes(), "model.version", trace_.version);
    Attribute(own->mutable_attributes(), "triton.trace_id", static_cast<int64_t>(trace_.id));
    if (!trace_.request_id.empty()) Attribute(own->mutable_attributes(), "request.id", trace_.request_id);
    if (top) Attribute(own->mutable_attributes(), "es.transport", At(trace_, "HTTP_RECV_START") ? "http" : "grpc");
    if (!trace_.error.empty()) {
      own->mutable_status()->set_code(otlp::Status::STATUS_CODE_ERROR);
      own->mutable_status()->set_message(trace_.error);
    }

    Child("decode", AtEither(trace_, "GRPC_WAITREAD_END", "HTTP_RECV_END"), At(trace_, "REQUEST_START"));
    Child("queue", At(trace_, "QUEUE_START"), At(trace_, "COMPUTE_START"));
    Child("submit", At(trace_, "COMPUTE_START"), At(trace_, "COMPUTE_INPUT_END"));
    HostSpans();
    Child("read outputs", At(trace_, "COMPUTE_OUTPUT_START"), At(trace_, "COMPUTE_END"));
    for (const RequestTrace::Span& s : trace_.spans) Child(s.name, s.start_ns, s.end_ns);
    Child("send", AtEither(trace_, "GRPC_SEND_START", "HTTP_SEND_START"),
          AtEither(trace_, "GRPC_SEND_END", "HTTP_SEND_END"));
  }

 private:
  static std::string Bytes(const uint8_t* data, size_t size) {
    return std::string(reinterpret_cast<const char*>(data), size);
  }

  void Ids(otlp::Span* span, const SpanId& id, const SpanId& parent) const {
    span->set_trace_id(Bytes(trace_.context.trace_id.data(), trace_.context.trace_id.size()));
    span->set_span_id(Bytes(id.data(), id.size()));
    if (!IsZeroId(parent)) span->set_parent_span_id(Bytes(parent.data(), parent.size()));
  }
  void Times(otlp::Span* span, uint64_t start, uint64_t end) const {
    // Unsigned (wrapping) arithmetic: the times may be a host's claims.
    span->set_start_time_unix_nano(start + static_cast<uint64_t>(offset_));
    span->set_end_time_unix_nano(end + static_cast<uint64_t>(offset_));
  }
  otlp::Span* Child(const std::string& name, std::optional<uint64_t> start, std::optional<uint64_t> end,
                    otlp::ScopeSpans* scope = nullptr, const SpanId* parent = nullptr) {
    if (!start || !end || *end < *start) return nullptr;
    otlp::Span* span = (scope != nullptr ? scope : router_)->add_spans();
    span->set_name(name);
    span->set_kind(otlp::Span::SPAN_KIND_INTERNAL);
    const SpanId id = NewSpanId();
    Ids(span, id, parent != nullptr ? *parent : trace_.context.span_id);
    Times(span, *start, *end);
    return span;
  }

  // "host <name>" over the router's window of the call, and under it the
  // host's own "host queue" and "compute" (see the header on their times).
  void HostSpans() {
    const std::optional<uint64_t> submitted = At(trace_, "COMPUTE_INPUT_END");
    const std::optional<uint64_t> arrived = At(trace_, "COMPUTE_OUTPUT_START");
    if (!trace_.host || !submitted || !arrived || *arrived < *submitted) return;
    const HostTimes& h = *trace_.host;
    otlp::Span* call = Child("host " + h.host, submitted, arrived);
    call->set_kind(otlp::Span::SPAN_KIND_CLIENT);
    Attribute(call->mutable_attributes(), "es.host", h.host);
    SpanId call_id{};
    std::memcpy(call_id.data(), call->span_id().data(), call_id.size());

    const bool ordered = h.received_ns <= h.compute_start_ns && h.compute_start_ns <= h.compute_end_ns;
    const uint64_t window = *arrived - *submitted;
    if (!ordered || h.compute_end_ns - h.received_ns > window) {
      Attribute(call->mutable_attributes(), "es.host_times", "inconsistent");
      return;
    }
    int64_t shift = 0;  // host clock -> router clock
    if (h.received_ns < *submitted || h.compute_end_ns > *arrived) {
      const uint64_t host_mid = h.received_ns + (h.compute_end_ns - h.received_ns) / 2;
      const uint64_t router_mid = *submitted + window / 2;
      shift = static_cast<int64_t>(router_mid - host_mid);  // two's complement: the signed difference
    }
    // Wrapping unsigned arithmetic (no signed overflow whatever a host sent);
    // the result lies in the router's window by construction.
    auto moved = [shift](uint64_t ns) { return ns + static_cast<uint64_t>(shift); };
    otlp::Span* queued = Child("host queue", *submitted, moved(h.received_ns), host_, &call_id);
    otlp::Span* compute = Child("compute", moved(h.compute_start_ns), moved(h.compute_end_ns), host_, &call_id);
    for (otlp::Span* span : {queued, compute}) {
      if (span == nullptr) continue;
      Attribute(span->mutable_attributes(), "model.name", trace_.model);
      if (shift != 0) Attribute(span->mutable_attributes(), "es.clock_offset_ns", shift);
    }
  }

  const RequestTrace::Snapshot& trace_;
  const int64_t offset_;
  otlp::ScopeSpans* const router_;
  otlp::ScopeSpans* const host_;
};

otlp::ScopeSpans* NewScope(otlp::ResourceSpans* resource) {
  otlp::ScopeSpans* scope = resource->add_scope_spans();
  scope->mutable_scope()->set_name("ensemble-serve");
  return scope;
}

// System-clock nanoseconds minus steady-clock nanoseconds, now.
int64_t UnixOffsetNs() {
  const auto system = std::chrono::system_clock::now().time_since_epoch();
  const auto steady = std::chrono::steady_clock::now().time_since_epoch();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(system).count() -
         std::chrono::duration_cast<std::chrono::nanoseconds>(steady).count();
}

}  // namespace

otlp::ExportTraceServiceRequest OtlpSpanBuilder::Build(const std::vector<std::shared_ptr<RequestTrace>>& traces) const {
  otlp::ExportTraceServiceRequest request;
  otlp::ResourceSpans* router = request.add_resource_spans();
  Attribute(router->mutable_resource()->mutable_attributes(), "service.name", std::string("ensemble-server"));
  Attribute(router->mutable_resource()->mutable_attributes(), "host.name", resources_.machine);
  Attribute(router->mutable_resource()->mutable_attributes(), "process.pid", resources_.router_pid);
  otlp::ScopeSpans* router_scope = NewScope(router);

  std::map<std::string, otlp::ScopeSpans*> hosts;  // made as spans need them
  auto host_scope = [&](const std::string& name) {
    otlp::ScopeSpans*& scope = hosts[name];
    if (scope == nullptr) {
      otlp::ResourceSpans* resource = request.add_resource_spans();
      auto* attributes = resource->mutable_resource()->mutable_attributes();
      Attribute(attributes, "service.name", std::string("ensemble-model-host"));
      Attribute(attributes, "service.instance.id",
                resources_.machine + "/" + name);  // host names repeat across machines
      Attribute(attributes, "host.name", resources_.machine);
      Attribute(attributes, "es.host", name);
      auto device = resources_.devices.find(name);
      Attribute(attributes, "es.device", device != resources_.devices.end() ? device->second : std::string("unknown"));
      scope = NewScope(resource);
    }
    return scope;
  };

  const int64_t offset = UnixOffsetNs();
  for (const std::shared_ptr<RequestTrace>& trace : traces) {
    const RequestTrace::Snapshot snapshot = trace->Take();
    otlp::ScopeSpans* host = snapshot.host ? host_scope(snapshot.host->host) : nullptr;  // no host spans without
    TraceSpans(snapshot, offset, router_scope, host).Build();
  }
  return request;
}

}  // namespace es
