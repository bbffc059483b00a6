// OpenTelemetry export (server/tracing/, server/core/trace_context.h): W3C
// traceparent parsing, collector URLs, the span tree OtlpSpanBuilder makes of
// request traces (parents, names, the host's times inside its call, shifted
// when on another clock, left out when they cannot fit), the tracer in mode
// opentelemetry (traces reach the exporter, undelivered ones are counted
// dropped, a member call's span a child of its ensemble's, a client's trace
// continued), and an export to a closed port failing fast.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "server/core/request_trace.h"
#include "server/core/trace_context.h"
#include "server/tracing/otlp_exporter.h"
#include "server/tracing/otlp_spans.h"

namespace es {
namespace {

namespace otlp = ensemble_serve::otlp;

std::string Hex(const std::string& bytes) {
  return HexId(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

TEST(TraceparentTest, ParsesVersion00AndRefusesWhatTheStandardRefuses) {
  const auto parent = ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(parent.has_value());
  EXPECT_EQ(HexId(parent->trace_id.data(), 16), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(HexId(parent->span_id.data(), 8), "00f067aa0ba902b7");
  // A later version may append fields; version 00 may not.
  EXPECT_TRUE(ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future").has_value());
  for (const char* bad : {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  // 00 with more
                          "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",        // upper case
                          "00-00000000000000000000000000000000-00f067aa0ba902b7-01",        // zero trace id
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",        // zero span id
                          "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",        // version ff
                          "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",         // short trace id
                          "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",        // separator
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",        // flags
                          "", "00"}) {
    EXPECT_FALSE(ParseTraceparent(bad).has_value()) << bad;
  }
}

TEST(TraceparentTest, NewIdsAreNeverZeroAndDiffer) {
  const TraceId a = NewTraceId(), b = NewTraceId();
  EXPECT_NE(a, b);
  EXPECT_NE(a, TraceId{});
  EXPECT_NE(NewSpanId(), SpanId{});
}

TEST(OtlpUrlTest, DefaultsAndTritonsFormAndClearErrors) {
  auto full = ParseOtlpUrl("http://collector.local:4319/otlp/v1/traces");
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->host, "collector.local");
  EXPECT_EQ(full->port, "4319");
  EXPECT_EQ(full->path, "/otlp/v1/traces");
  auto bare = ParseOtlpUrl("localhost");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->url(), "http://localhost:4318/v1/traces");
  auto triton = ParseOtlpUrl("localhost:4318/v1/traces");
  ASSERT_TRUE(triton.ok());
  EXPECT_EQ(triton->url(), "http://localhost:4318/v1/traces");
  auto v6 = ParseOtlpUrl("http://[::1]:9/t");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, "9");
  const std::map<std::string, std::string> bad = {
      {"https://collector:4318/v1/traces", "https is not supported"},
      {"grpc://collector:4317", "unknown scheme"},
      {"http://:4318/v1/traces", "no host"},
      {"http://collector:99999/v1/traces", "port '99999'"},
      {"http://collector:x/v1/traces", "port 'x'"},
      {"http://user:pw@collector/v1/traces", "credentials"},
      {"http://collector/v1/tr aces", "space or control"},
  };
  for (const auto& [url, why] : bad) {
    auto parsed = ParseOtlpUrl(url);
    ASSERT_FALSE(parsed.ok()) << url;
    EXPECT_NE(parsed.status().message().find(why), std::string::npos) << parsed.status().message();
    EXPECT_NE(parsed.status().message().find(url), std::string::npos) << "the error names the URL";
  }
}

class RecordingExporter : public TraceExporter {
 public:
  explicit RecordingExporter(bool deliver) : deliver_(deliver) {}
  size_t Export(const std::vector<std::shared_ptr<RequestTrace>>& traces) override {
    MutexLock lock(&mu_);
    for (const auto& t : traces) got_.push_back(t);
    return deliver_ ? traces.size() : 0;
  }
  size_t count() const {
    MutexLock lock(&mu_);
    return got_.size();
  }

 private:
  const bool deliver_;
  mutable Mutex mu_;
  std::vector<std::shared_ptr<RequestTrace>> got_ ABSL_GUARDED_BY(mu_);
};

TraceSettings OpenTelemetry() {
  TraceSettings s;
  s.timestamps = true;
  s.rate = 1;
  s.mode = "opentelemetry";
  s.url = "http://127.0.0.1:9/v1/traces";
  return s;
}

// The spans of an export by name; it keeps the export alive, as by_name
// points into it.
struct Spans {
  std::shared_ptr<const otlp::ExportTraceServiceRequest> request;
  std::map<std::string, const otlp::Span*> by_name;
  std::map<std::string, std::string> resource_of;  // span name -> service.name
  std::map<std::string, std::map<std::string, std::string>> attributes;
};
Spans Index(otlp::ExportTraceServiceRequest built) {
  Spans out;
  out.request = std::make_shared<const otlp::ExportTraceServiceRequest>(std::move(built));
  for (const auto& rs : out.request->resource_spans()) {
    std::string service;
    for (const auto& kv : rs.resource().attributes()) {
      if (kv.key() == "service.name") service = kv.value().string_value();
    }
    for (const auto& scope : rs.scope_spans()) {
      for (const auto& span : scope.spans()) {
        out.by_name[span.name()] = &span;
        out.resource_of[span.name()] = service;
        for (const auto& kv : span.attributes()) {
          out.attributes[span.name()][kv.key()] =
              kv.value().has_int_value() ? std::to_string(kv.value().int_value()) : kv.value().string_value();
        }
      }
    }
  }
  return out;
}

TEST(OtlpSpansTest, TheTreeOfAnEnsembleRequestWithTheHostsTimesInsideItsCall) {
  // An ensemble request with one member call, marked as the router marks it
  // (the tracer has no exporter, so the root is made by hand; Child is the tracer's).
  Tracer tracer(OpenTelemetry(), nullptr);
  TraceContext context;
  context.trace_id = NewTraceId();
  context.span_id = NewSpanId();
  struct {
    std::shared_ptr<RequestTrace> root, member;
  } t;
  t.root = std::make_shared<RequestTrace>(1, 0, "ens", 1, "req-7", context);
  t.root->Mark("GRPC_WAITREAD_START", 1000);
  t.root->Mark("GRPC_WAITREAD_END", 1000);
  t.root->Mark("REQUEST_START", 1100);
  t.member = tracer.Child(*t.root, "mlp");
  EXPECT_EQ(t.member->context().trace_id, context.trace_id);
  EXPECT_EQ(t.member->context().parent_span_id, context.span_id);
  t.member->Mark("REQUEST_START", 1200);
  t.member->Mark("QUEUE_START", 1210);
  t.member->Mark("COMPUTE_START", 1220);
  t.member->Mark("COMPUTE_INPUT_END", 1300);
  t.member->SetHost({"cpu1", 1400, 1500, 2200});
  t.member->Mark("COMPUTE_OUTPUT_START", 2300);
  t.member->Mark("COMPUTE_END", 2310);
  t.member->Mark("REQUEST_END", 2320);
  t.root->AddSpan("combine", 2330, 2400);
  t.root->AddSpan("encode", 2400, 2450);
  t.root->Mark("REQUEST_END", 2450);
  t.root->Mark("GRPC_SEND_START", 2450);
  t.root->Mark("GRPC_SEND_END", 2600);

  OtlpSpanBuilder builder({"machine-a", 4242, {{"cpu1", "cpu"}}});
  const auto before = std::chrono::system_clock::now();
  const otlp::ExportTraceServiceRequest request = builder.Build({t.member, t.root});
  Spans s = Index(request);
  for (const char* name : {"infer ens", "decode", "combine", "encode", "send", "member mlp", "queue", "submit",
                           "host cpu1", "host queue", "compute", "read outputs"}) {
    ASSERT_TRUE(s.by_name.count(name)) << "no span " << name;
    EXPECT_EQ(Hex(s.by_name[name]->trace_id()), HexId(context.trace_id.data(), 16)) << name;
  }
  const otlp::Span& top = *s.by_name["infer ens"];
  EXPECT_EQ(top.kind(), otlp::Span::SPAN_KIND_SERVER);
  EXPECT_TRUE(top.parent_span_id().empty()) << "no client context: a root span";
  EXPECT_EQ(s.attributes["infer ens"]["request.id"], "req-7");
  EXPECT_EQ(s.attributes["infer ens"]["es.transport"], "grpc");
  auto parent_of = [&](const char* name) { return s.by_name[name]->parent_span_id(); };
  for (const char* name : {"decode", "combine", "encode", "send", "member mlp"}) {
    EXPECT_EQ(parent_of(name), top.span_id()) << name;
  }
  for (const char* name : {"queue", "submit", "host cpu1", "read outputs"}) {
    EXPECT_EQ(parent_of(name), s.by_name["member mlp"]->span_id()) << name;
  }
  for (const char* name : {"host queue", "compute"}) {
    EXPECT_EQ(parent_of(name), s.by_name["host cpu1"]->span_id()) << name;
    EXPECT_EQ(s.resource_of[name], "ensemble-model-host") << name;
    EXPECT_FALSE(s.attributes[name].count("es.clock_offset_ns")) << "same clock: not shifted";
  }
  EXPECT_EQ(s.resource_of["host cpu1"], "ensemble-server");
  EXPECT_EQ(s.by_name["host cpu1"]->kind(), otlp::Span::SPAN_KIND_CLIENT);
  // Durations are the marks' (times only moved to the Unix epoch).
  auto length = [&](const char* name) {
    return s.by_name[name]->end_time_unix_nano() - s.by_name[name]->start_time_unix_nano();
  };
  EXPECT_EQ(length("infer ens"), 1600u);
  EXPECT_EQ(length("host queue"), 100u);  // submitted 1300 .. received 1400
  EXPECT_EQ(length("compute"), 700u);
  EXPECT_EQ(s.by_name["compute"]->start_time_unix_nano() - top.start_time_unix_nano(), 500u);
  const uint64_t epoch_now =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(before.time_since_epoch()).count());
  // The marks are tiny steady-clock values, so their Unix times lie in the
  // past, by the machine's uptime: within a year of now, not 1970.
  EXPECT_LT(epoch_now - top.start_time_unix_nano(), uint64_t{366} * 24 * 3600 * 1000000000);
  // Resources.
  ASSERT_EQ(request.resource_spans_size(), 2);
  std::map<std::string, std::string> host_resource;
  for (const auto& kv : request.resource_spans(1).resource().attributes()) {
    host_resource[kv.key()] = kv.value().string_value();
  }
  EXPECT_EQ(host_resource["es.host"], "cpu1");
  EXPECT_EQ(host_resource["es.device"], "cpu");
  EXPECT_EQ(host_resource["host.name"], "machine-a");
}

std::shared_ptr<RequestTrace> PlainCall(const HostTimes& host) {
  TraceContext context;
  context.trace_id = NewTraceId();
  context.span_id = NewSpanId();
  auto t = std::make_shared<RequestTrace>(1, 0, "mlp", 1, "", context);
  t->Mark("HTTP_RECV_START", 1000);
  t->Mark("HTTP_RECV_END", 1000);
  t->Mark("REQUEST_START", 1010);
  t->Mark("QUEUE_START", 1020);
  t->Mark("COMPUTE_START", 1030);
  t->Mark("COMPUTE_INPUT_END", 1100);
  t->SetHost(host);
  t->Mark("COMPUTE_OUTPUT_START", 2100);
  t->Mark("COMPUTE_END", 2110);
  t->Mark("REQUEST_END", 2120);
  t->Mark("HTTP_SEND_START", 2120);
  t->Mark("HTTP_SEND_END", 2200);
  return t;
}

TEST(OtlpSpansTest, AHostOnAnotherClockIsShiftedIntoItsCallAndImpossibleTimesAreLeftOut) {
  OtlpSpanBuilder builder({"m", 1, {}});
  // 600 ns of host work 1,000,000 ns off the router's clock: centred in the
  // 1000 ns window, the shift an attribute.
  Spans shifted = Index(builder.Build({PlainCall({"cpu0", 1001000, 1001100, 1001600})}));
  ASSERT_TRUE(shifted.by_name.count("compute"));
  EXPECT_EQ(shifted.attributes["infer mlp"]["es.transport"], "http");
  const otlp::Span& call = *shifted.by_name["host cpu0"];
  for (const char* name : {"host queue", "compute"}) {
    const otlp::Span& span = *shifted.by_name[name];
    EXPECT_GE(span.start_time_unix_nano(), call.start_time_unix_nano()) << name;
    EXPECT_LE(span.end_time_unix_nano(), call.end_time_unix_nano()) << name;
  }
  // The window's middle 1600, the host's 1001300.
  EXPECT_EQ(shifted.attributes["compute"]["es.clock_offset_ns"], "-999700");
  EXPECT_EQ(shifted.by_name["compute"]->end_time_unix_nano() - shifted.by_name["compute"]->start_time_unix_nano(),
            500u);

  // Host times near 2^63 and near 2^64 (a host's claims): shifted without
  // overflow into the window all the same.
  constexpr uint64_t kHalf = uint64_t{1} << 63;
  for (const HostTimes& far : {HostTimes{"cpu0", kHalf - 100, kHalf, kHalf + 400},
                               HostTimes{"cpu0", UINT64_MAX - 600, UINT64_MAX - 500, UINT64_MAX}}) {
    Spans s = Index(builder.Build({PlainCall(far)}));
    ASSERT_TRUE(s.by_name.count("compute")) << far.received_ns;
    const otlp::Span& window = *s.by_name["host cpu0"];
    for (const char* name : {"host queue", "compute"}) {
      EXPECT_GE(s.by_name[name]->start_time_unix_nano(), window.start_time_unix_nano()) << name;
      EXPECT_LE(s.by_name[name]->end_time_unix_nano(), window.end_time_unix_nano()) << name;
    }
  }

  for (const HostTimes& bad : {HostTimes{"cpu0", 1500, 1400, 1600},     // compute before it was received
                               HostTimes{"cpu0", 100, 200, 5000},       // longer than the router's window
                               HostTimes{"cpu0", 1200, 1300, 1200}}) {  // ends before it starts
    Spans s = Index(builder.Build({PlainCall(bad)}));
    ASSERT_TRUE(s.by_name.count("host cpu0"));
    EXPECT_EQ(s.attributes["host cpu0"]["es.host_times"], "inconsistent");
    EXPECT_FALSE(s.by_name.count("compute"));
    EXPECT_FALSE(s.by_name.count("host queue"));
  }
}

TEST(OtlpTracerTest, TracesGoToTheExporterAndUndeliveredOnesAreCountedDropped) {
  EXPECT_EQ(Tracer(OpenTelemetry(), nullptr).Sample("m", 1, ""), nullptr) << "no exporter: nowhere to go";
  for (const bool deliver : {true, false}) {
    RecordingExporter exporter(deliver);
    Tracer tracer(OpenTelemetry(), &exporter);
    for (int i = 0; i < 5; ++i) {
      auto trace = tracer.Sample("m", 1, "");
      ASSERT_NE(trace, nullptr);
      tracer.Finish(trace);
    }
    tracer.Stop();
    EXPECT_EQ(exporter.count(), 5u);
    EXPECT_EQ(tracer.written(), deliver ? 5u : 0u);
    EXPECT_EQ(tracer.dropped(), deliver ? 0u : 5u);
  }
}

TEST(OtlpTracerTest, AClientsTraceIsContinuedByTheRequestAndItsMembers) {
  RecordingExporter exporter(true);
  Tracer tracer(OpenTelemetry(), &exporter);
  auto root = tracer.Sample("ens", 1, "");
  ASSERT_NE(root, nullptr);
  const TraceId own = root->context().trace_id;
  const auto parent = ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(parent.has_value());
  root->Continue(*parent, "vendor=1");
  EXPECT_NE(root->context().trace_id, own);
  EXPECT_EQ(root->context().trace_id, parent->trace_id);
  EXPECT_EQ(root->context().parent_span_id, parent->span_id);
  auto member = tracer.Child(*root, "mlp");
  EXPECT_EQ(member->context().trace_id, parent->trace_id);
  EXPECT_EQ(member->context().parent_span_id, root->context().span_id);
  EXPECT_EQ(member->context().trace_state, "vendor=1");
  EXPECT_NE(member->context().span_id, root->context().span_id);
  // The settings API keeps the mode and URL set at start.
  TraceSettings changed = OpenTelemetry();
  changed.mode = "triton";
  changed.url = "";
  changed.rate = 7;
  tracer.SetServer(changed);
  EXPECT_EQ(tracer.Settings("").mode, "opentelemetry");
  EXPECT_EQ(tracer.Settings("").url, OpenTelemetry().url);
  EXPECT_EQ(tracer.Settings("").rate, 7u);
}

// A TCP socket bound to a free loopback port (not listening yet).
int BoundLoopbackSocket(uint16_t* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  *port = ntohs(addr.sin_port);
  return fd;
}

// A collector on a port of its own that takes one export: reads the
// request (headers and Content-Length body) and answers `status`, or, with
// `hold`, answers nothing until the exporter gives up and closes.
class OneShotCollector {
 public:
  OneShotCollector(int status, bool hold) : status_(status), hold_(hold) {
    listener_ = BoundLoopbackSocket(&port_);
    EXPECT_EQ(listen(listener_, 1), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~OneShotCollector() {
    thread_.join();
    close(listener_);
  }
  OneShotCollector(const OneShotCollector&) = delete;
  OneShotCollector& operator=(const OneShotCollector&) = delete;
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1/traces"; }
  // What was posted; read once the export returned (the thread has it all).
  std::string request() {
    thread_.join();
    thread_ = std::thread([] {});
    return request_;
  }

 private:
  void Serve() {
    const int fd = accept(listener_, nullptr, nullptr);
    if (fd < 0) return;
    char buf[65536];
    size_t want = std::string::npos;
    while (want == std::string::npos || request_.size() < want) {
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) break;
      request_.append(buf, static_cast<size_t>(n));
      const size_t end = request_.find("\r\n\r\n");
      const size_t length = request_.find("Content-Length: ");
      if (want == std::string::npos && end != std::string::npos && length != std::string::npos) {
        want = end + 4 + std::stoul(request_.substr(length + 16));
      }
    }
    if (!hold_) {
      const std::string answer = "HTTP/1.1 " + std::to_string(status_) + " X\r\nContent-Length: 0\r\n\r\n";
      EXPECT_EQ(write(fd, answer.data(), answer.size()), static_cast<ssize_t>(answer.size()));
    } else {
      while (read(fd, buf, sizeof buf) > 0) {  // until the exporter gives up and closes
      }
    }
    close(fd);
  }

  const int status_;
  const bool hold_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::string request_;
  std::thread thread_;
};

// One plain call's trace exported to `url`: traces delivered, exports
// failed, and how long Export took.
struct ExportOutcome {
  size_t delivered = 0;
  uint64_t failed = 0;
  double seconds = 0;
};
ExportOutcome ExportOneTo(const std::string& url) {
  auto endpoint = ParseOtlpUrl(url);
  EXPECT_TRUE(endpoint.ok()) << url;
  OtlpExporter exporter(*endpoint, {"m", 1, {}});
  const auto start = std::chrono::steady_clock::now();
  ExportOutcome out;
  out.delivered = exporter.Export({PlainCall({"cpu0", 1200, 1300, 1400})});
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.failed = exporter.failed_exports();
  return out;
}

TEST(OtlpExporterTest, A2xxAnswerDeliversTheBatchAndOthersLoseIt) {
  for (const int status : {200, 503}) {
    OneShotCollector collector(status, /*hold=*/false);
    auto endpoint = ParseOtlpUrl(collector.url());
    ASSERT_TRUE(endpoint.ok());
    OtlpExporter exporter(*endpoint, {"m", 1, {}});
    auto failed = PlainCall({"cpu0", 1200, 1300, 1400});
    failed->SetError("INTERNAL: model 'mlp' exploded");
    EXPECT_EQ(exporter.Export({PlainCall({"cpu0", 1200, 1300, 1400}), failed}), status == 200 ? 2u : 0u);
    EXPECT_EQ(exporter.failed_exports(), status == 200 ? 0u : 1u);
    const std::string request = collector.request();
    if (status != 200) continue;
    EXPECT_EQ(exporter.spans_sent(), 2u * 9u) << "9 spans a plain call (the host's two among them)";
    EXPECT_EQ(request.rfind("POST /v1/traces HTTP/1.1\r\n", 0), 0u) << request.substr(0, 80);
    EXPECT_NE(request.find("Content-Type: application/x-protobuf"), std::string::npos);
    // The body decodes as the export message, the failed call's span with its ERROR.
    otlp::ExportTraceServiceRequest body;
    ASSERT_TRUE(body.ParseFromString(request.substr(request.find("\r\n\r\n") + 4)));
    int errors = 0;
    for (const auto& rs : body.resource_spans()) {
      for (const auto& scope : rs.scope_spans()) {
        for (const auto& span : scope.spans()) {
          if (span.status().code() != otlp::Status::STATUS_CODE_ERROR) continue;
          ++errors;
          EXPECT_EQ(span.name(), "infer mlp");
          EXPECT_EQ(span.status().message(), "INTERNAL: model 'mlp' exploded");
        }
      }
    }
    EXPECT_EQ(errors, 1);
  }
}

TEST(OtlpExporterTest, ACollectorThatNeverAnswersLosesTheBatchAtTheDeadline) {
  OneShotCollector collector(200, /*hold=*/true);
  const ExportOutcome out = ExportOneTo(collector.url());
  EXPECT_EQ(out.delivered, 0u);
  EXPECT_EQ(out.failed, 1u);
  // It waited for the deadline (2 s), and then stopped.
  EXPECT_GE(out.seconds, 1.5);
  EXPECT_LT(out.seconds, 10.0);
}

TEST(OtlpExporterTest, AClosedPortFailsTheExportAtOnce) {
  uint16_t port = 0;
  close(BoundLoopbackSocket(&port));  // free a moment ago, and nobody listens on it
  const ExportOutcome out = ExportOneTo("http://127.0.0.1:" + std::to_string(port) + "/v1/traces");
  EXPECT_EQ(out.delivered, 0u);
  EXPECT_EQ(out.failed, 1u);
  EXPECT_LT(out.seconds, 1.0) << "refused at once, not after the 2 s deadline";
}

}  // namespace
}  // namespace es
