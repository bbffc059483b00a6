#include "server/tracing/otlp_exporter.h"

#include <spdlog/spdlog.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>

namespace es {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr size_t kMaxAnswerBytes = size_t{64} * 1024;  // a collector's answer is a few bytes

}  // namespace

StatusOr<OtlpEndpoint> ParseOtlpUrl(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("trace URL '" + url + "': " + why +
                                   " (expected http://HOST[:PORT][/PATH], e.g. http://localhost:4318/v1/traces)");
  };
  std::string rest = url;
  if (rest.rfind("https://", 0) == 0) {
    return bad("https is not supported; export to an OpenTelemetry Collector beside the server over http");
  }
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  if (rest.find("://") != std::string::npos) return bad("unknown scheme");
  OtlpEndpoint endpoint;
  const size_t slash = rest.find('/');
  endpoint.path = slash == std::string::npos ? "/v1/traces" : rest.substr(slash);
  std::string authority = rest.substr(0, slash);
  if (authority.find('@') != std::string::npos) return bad("credentials in the URL are not supported");
  size_t colon = authority.rfind(':');
  if (!authority.empty() && authority.front() == '[') {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string::npos) return bad("unclosed '['");
    endpoint.host = authority.substr(1, close - 1);
    colon = close + 1 < authority.size() && authority[close + 1] == ':' ? close + 1 : std::string::npos;
  } else {
    endpoint.host = authority.substr(0, colon);
  }
  endpoint.port = colon == std::string::npos ? "4318" : authority.substr(colon + 1);
  if (endpoint.host.empty()) return bad("no host");
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(endpoint.port.data(), endpoint.port.data() + endpoint.port.size(), port);
  if (ec != std::errc() || end != endpoint.port.data() + endpoint.port.size() || port == 0 || port > 65535) {
    return bad("port '" + endpoint.port + "' is not a number from 1 to 65535");
  }
  for (const char c : endpoint.path) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return bad("the path has a space or control character");
  }
  return endpoint;
}

size_t OtlpExporter::Export(const std::vector<std::shared_ptr<RequestTrace>>& traces) {
  if (traces.empty()) return 0;
  const ensemble_serve::otlp::ExportTraceServiceRequest request = builder_.Build(traces);
  uint64_t spans = 0;
  for (const auto& resource : request.resource_spans()) {
    for (const auto& scope : resource.scope_spans()) spans += static_cast<uint64_t>(scope.spans_size());
  }
  const Status posted = Post(request.SerializeAsString());
  if (!posted.ok()) {
    const uint64_t failures = failed_exports_.fetch_add(1);
    if (failures % 100 == 0) {
      spdlog::warn("trace export to {} failed ({} so far; traces dropped): {}", endpoint_.url(), failures + 1,
                   posted.message());
    }
    return 0;
  }
  spans_sent_.fetch_add(spans);
  return traces.size();
}

Status OtlpExporter::Post(const std::string& body) {
  Status result = Exchange(body);  // its io_context, and any operation left pending, gone here
  if (!result.ok()) addresses_.clear();  // resolved again next time: the collector may have moved
  return result;
}

Status OtlpExporter::Exchange(const std::string& body) {
  asio::io_context io;
  tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  beast::flat_buffer buffer;
  http::request<http::string_body> request{http::verb::post, endpoint_.path, 11};
  request.set(http::field::host, endpoint_.authority());
  request.set(http::field::user_agent, "ensemble-server");
  request.set(http::field::content_type, "application/x-protobuf");
  request.body() = body;
  request.prepare_payload();
  http::response_parser<http::string_body> answer;
  answer.body_limit(kMaxAnswerBytes);
  Status result = Status::DeadlineExceeded("no answer within " + std::to_string(kExportTimeout.count()) + " ms");
  auto failed = [&](const char* step, const beast::error_code& ec) {
    result = Status::Unavailable(std::string(step) + ": " + ec.message());
  };
  // One chain of asynchronous steps, so the deadline bounds all of them.
  auto exchange = [&](beast::error_code connected, const tcp::endpoint&) {
    if (connected) return failed("connect", connected);
    http::async_write(stream, request, [&](beast::error_code sent, size_t) {
      if (sent) return failed("send", sent);
      http::async_read(stream, buffer, answer, [&](beast::error_code ec, size_t) {
        if (ec) return failed("answer", ec);
        const unsigned code = answer.get().result_int();
        result = code / 100 == 2 ? Status::Ok()
                                 : Status::Unavailable("collector answered HTTP " + std::to_string(code) + ": " +
                                                       answer.get().body().substr(0, 200));
        beast::error_code ignored;
        stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
      });
    });
  };
  if (addresses_.empty()) {
    resolver.async_resolve(endpoint_.host, endpoint_.port,
                           [&](beast::error_code resolved, const tcp::resolver::results_type& found) {
                             if (resolved) return failed("resolve", resolved);
                             addresses_.assign(found.begin(), found.end());
                             stream.expires_after(kExportTimeout);
                             stream.async_connect(addresses_, exchange);
                           });
  } else {
    stream.expires_after(kExportTimeout);
    stream.async_connect(addresses_, exchange);
  }
  io.run_for(kExportTimeout);
  return result;
}

}  // namespace es
