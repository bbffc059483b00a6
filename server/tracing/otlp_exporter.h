// OtlpExporter: request traces as OpenTelemetry spans, posted to a
// collector over OTLP/HTTP (POST <url>, Content-Type
// application/x-protobuf, body an ExportTraceServiceRequest; spans built by
// OtlpSpanBuilder, otlp_spans.h). It is the tracer's TraceExporter in
// trace_mode opentelemetry.
//
// Export runs on the tracer's writer thread, never on a request's: each
// call is one POST with a deadline (kExportTimeout for connect, send and
// the answer together), so a slow or absent collector holds up that thread
// only, and the tracer's bounded queue drops (and counts) what piles up
// behind it. A 2xx answer delivers the batch; anything else, or the
// deadline, loses it (logged at the first failure and every 100th). The
// collector's name is resolved at the first export and again after a
// failed one (a resolver that hangs holds up that thread alone, too).
//
// The URL: "http://HOST[:PORT][/PATH]", or Triton's form without the
// scheme ("localhost:4318/v1/traces"); the port defaults to 4318 (OTLP/HTTP)
// and the path to /v1/traces. https is refused with a clear error: run an
// OpenTelemetry Collector beside the server for TLS and retries.
//
// Thread safety: Export is called by one thread at a time (the tracer's
// writer); the counters may be read from any thread.
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/core/request_trace.h"
#include "server/tracing/otlp_spans.h"

namespace es {

struct OtlpEndpoint {
  std::string host, port, path;
  // host:port, an IPv6 address in brackets (the Host header's form).
  std::string authority() const { return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port; }
  std::string url() const { return "http://" + authority() + path; }
};
// Parses a collector URL (see above); errors name what is wrong.
StatusOr<OtlpEndpoint> ParseOtlpUrl(const std::string& url);

class OtlpExporter : public TraceExporter {
 public:
  static constexpr std::chrono::milliseconds kExportTimeout{2000};

  OtlpExporter(OtlpEndpoint endpoint, SpanResources resources)
      : endpoint_(std::move(endpoint)), builder_(std::move(resources)) {}

  size_t Export(const std::vector<std::shared_ptr<RequestTrace>>& traces) override;

  const OtlpEndpoint& endpoint() const { return endpoint_; }
  uint64_t spans_sent() const { return spans_sent_.load(); }
  uint64_t failed_exports() const { return failed_exports_.load(); }

 private:
  // POSTs `body`; OK for a 2xx answer, else what went wrong (and the
  // addresses are forgotten).
  Status Post(const std::string& body);
  // One POST within kExportTimeout, resolving first when no address is known.
  Status Exchange(const std::string& body);

  const OtlpEndpoint endpoint_;
  const OtlpSpanBuilder builder_;
  std::atomic<uint64_t> spans_sent_{0}, failed_exports_{0};
  // The collector's addresses; empty until resolved, cleared by a failed
  // export. Only Export's thread touches it (see above).
  std::vector<boost::asio::ip::tcp::endpoint> addresses_;
};

}  // namespace es
