#include "clients/http_client.h"

#include <google/protobuf/util/json_util.h>
#include <openssl/ssl.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/mutex.h"

namespace es::client {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kHeaderLength = "Inference-Header-Content-Length";
// Largest answer read when ClientOptions::max_receive_bytes is -1: far
// above any tensor the server sends, but a bound on what a bad peer can
// make this process allocate.
constexpr uint64_t kDefaultBodyLimit = uint64_t{4} << 30;

Status Error(grpc::StatusCode code, std::string message) { return Status(code, std::move(message)); }

// The message of an error answer: its {"error": "..."}, else the start of the body.
std::string ErrorText(int status, const std::string& reason, const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_string()) return j["error"].get<std::string>();
  std::string text = "HTTP ";
  text.append(std::to_string(status));
  if (!reason.empty()) text.append(" ").append(reason);
  if (!body.empty()) {
    std::string start = body.substr(0, 200);
    for (char& c : start) {
      if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    }
    text.append(": ").append(start);
  }
  return text;
}

// A JSON answer into a proto (fields by their proto names; unknown ones,
// e.g. a newer server's, ignored).
template <typename Message>
Result<Message> ProtoFromJson(const std::string& text, const char* what) {
  Message message;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &message, options);
  if (!status.ok()) {
    return Error(grpc::StatusCode::INTERNAL,
                 std::string("answer of ") + what + " is not valid: " + std::string(status.message()));
  }
  return message;
}

struct Reply {
  int status = 0;
  std::string reason;
  std::string body;
  std::optional<uint64_t> header_length;  // Inference-Header-Content-Length
};

}  // namespace

// ---- the connection ----

struct HttpClient::Impl {
  std::string host, port, address;
  ClientOptions options;
  std::string authorization;  // "Bearer TOKEN", or empty
  std::unique_ptr<ssl::context> tls;

  mutable Mutex mu;
  asio::io_context io ABSL_GUARDED_BY(mu);
  std::optional<beast::tcp_stream> plain ABSL_GUARDED_BY(mu);
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure ABSL_GUARDED_BY(mu);
  beast::flat_buffer buffer ABSL_GUARDED_BY(mu);
  bool open ABSL_GUARDED_BY(mu) = false;

  beast::tcp_stream& Lowest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return secure ? beast::get_lowest_layer(*secure) : *plain;
  }
  void Close() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (open) {
      error_code ignored;
      Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
      Lowest().socket().close(ignored);
    }
    secure.reset();
    plain.reset();
    buffer.clear();
    open = false;
  }
  // Runs the io_context until the operation started before completes.
  void Run() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    io.restart();
    io.run();
  }
  // A call's deadline: when it passes, and the length the caller gave (what
  // an error names: the time left when a stage began says less).
  struct Deadline {
    Clock::time_point at;
    std::chrono::milliseconds length;
  };
  Status Connect(const Deadline& deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  Result<Reply> Exchange(http::verb verb, const std::string& target, const std::string& body,
                         std::optional<size_t> header_length, const char* content_type, const CallOptions& call);
  Result<Reply> Once(http::request<http::string_body>& request, const Deadline& deadline, bool* retry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  Status TransportError(const char* stage, const error_code& ec, std::chrono::milliseconds timeout) const;
};

Status HttpClient::Impl::TransportError(const char* stage, const error_code& ec,
                                        std::chrono::milliseconds timeout) const {
  if (ec == beast::error::timeout) {
    std::string message = "deadline of ";
    message.append(std::to_string(timeout.count())).append(" ms exceeded (").append(stage).append(" ");
    message.append(address).append(")");
    return Error(grpc::StatusCode::DEADLINE_EXCEEDED, message);
  }
  if (ec == http::error::body_limit) {
    return Error(grpc::StatusCode::RESOURCE_EXHAUSTED, "the answer from " + address + " is larger than the limit");
  }
  std::string message = stage;
  message.append(" ").append(address).append(": ").append(ec.message());
  return Error(grpc::StatusCode::UNAVAILABLE, message);
}

Status HttpClient::Impl::Connect(const Deadline& deadline) {
  Close();
  tcp::resolver resolver(io);
  error_code ec;
  const auto endpoints = resolver.resolve(host, port, ec);
  if (ec) return TransportError("cannot resolve", ec, deadline.length);
  if (tls) {
    secure.emplace(io, *tls);
  } else {
    plain.emplace(io);
  }
  Lowest().expires_at(deadline.at);
  Lowest().async_connect(endpoints, [&](const error_code& e, const tcp::endpoint&) { ec = e; });
  Run();
  if (ec) {
    Close();
    return TransportError("cannot connect to", ec, deadline.length);
  }
  open = true;
  Lowest().socket().set_option(tcp::no_delay(true), ec);  // small requests must not wait for Nagle
  if (tls) {
    error_code parse;
    asio::ip::make_address(host, parse);
    if (parse) {  // a DNS name: SNI (an IP address is not sent as SNI)
      SSL_set_tlsext_host_name(secure->native_handle(), host.c_str());
    }
    secure->set_verify_callback(ssl::host_name_verification(host));
    secure->async_handshake(ssl::stream_base::client, [&](const error_code& e) { ec = e; });
    Run();
    if (ec) {
      Close();
      return TransportError("TLS handshake with", ec, deadline.length);
    }
  }
  return Status();
}

Result<Reply> HttpClient::Impl::Once(http::request<http::string_body>& request, const Deadline& deadline, bool* retry) {
  const bool reused = open;
  *retry = false;
  if (!open) {
    ES_RETURN_IF_ERROR(Connect(deadline));
  }
  Lowest().expires_at(deadline.at);
  error_code ec;
  http::response_parser<http::string_body> parser;
  parser.body_limit(options.max_receive_bytes >= 0 ? static_cast<uint64_t>(options.max_receive_bytes)
                                                   : kDefaultBodyLimit);
  // The answer is read while the request is written: a server that refuses
  // a request early (413 for a body over its limit) answers and closes
  // before taking the whole body, and that answer is the one to report,
  // not the broken pipe of the write. An answer that came before the write
  // ended leaves the connection unusable: it is closed.
  error_code write_ec;
  bool written = false, answered = false;
  auto exchange = [&](auto& stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    http::async_write(stream, request, [&](const error_code& e, size_t) {
      write_ec = e;
      written = true;
    });
    http::async_read(stream, buffer, parser, [&](const error_code& e, size_t) {
      mu.AssertHeld();  // handlers run inside Run(), on this thread, under mu
      ec = e;
      answered = true;
      if (!written) Lowest().socket().cancel();  // ends the write (operation_aborted)
    });
    Run();
  };
  if (secure) {
    exchange(*secure);
  } else {
    exchange(*plain);
  }
  const bool whole_request = written && !write_ec;
  if (!ec && !whole_request) {
    auto answer = parser.release();
    Close();
    Reply early;
    early.status = static_cast<int>(answer.result_int());
    early.reason = std::string(answer.reason());
    early.body = std::move(answer.body());
    return early;
  }
  if (!ec && !answered) ec = write_ec;
  if (ec && write_ec && write_ec != asio::error::operation_aborted) ec = write_ec;
  if (ec) {
    const bool got_nothing = !parser.got_some();
    Close();
    // The server closed an idle keep-alive connection just before (or as)
    // the request went out: send it once more on a fresh connection.
    *retry = reused && got_nothing && ec != beast::error::timeout;
    return TransportError("HTTP exchange with", ec, deadline.length);
  }
  auto response = parser.release();
  Reply reply;
  reply.status = static_cast<int>(response.result_int());
  reply.reason = std::string(response.reason());
  if (auto it = response.find(kHeaderLength); it != response.end()) {
    const std::string value(it->value());
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(value.c_str(), &end, 10);
    if (value.empty() || end != value.c_str() + value.size() || errno != 0 || value[0] == '-') {
      Close();
      return Error(grpc::StatusCode::INTERNAL, "answer: bad " + std::string(kHeaderLength) + " '" + value + "'");
    }
    reply.header_length = n;
  }
  if (!response.keep_alive()) Close();
  reply.body = std::move(response.body());
  return reply;
}

Result<Reply> HttpClient::Impl::Exchange(http::verb verb, const std::string& target, const std::string& body,
                                         std::optional<size_t> header_length, const char* content_type,
                                         const CallOptions& call) {
  const auto timeout = call.timeout.count() > 0 ? call.timeout : options.timeout;
  const Deadline deadline{Clock::now() + timeout, timeout};
  http::request<http::string_body> request{verb, target, 11};
  request.set(http::field::host, address);
  request.set(http::field::user_agent, "ensemble-client");
  request.keep_alive(true);
  if (!authorization.empty()) request.set(http::field::authorization, authorization);
  if (header_length) request.set(kHeaderLength, std::to_string(*header_length));
  if (verb == http::verb::post) {
    request.set(http::field::content_type, content_type);
    request.body() = body;
  }
  request.prepare_payload();
  MutexLock lock(&mu);
  bool retry = false;
  Result<Reply> reply = Once(request, deadline, &retry);
  if (!reply.ok() && retry && Clock::now() < deadline.at) reply = Once(request, deadline, &retry);
  return reply;
}

// ---- HttpClient ----

HttpClient::HttpClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpClient::~HttpClient() {
  MutexLock lock(&impl_->mu);
  impl_->Close();
}

Result<std::unique_ptr<HttpClient>> HttpClient::Create(const std::string& address, const ClientOptions& options) {
  auto impl = std::make_unique<Impl>();
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT, "expected HOST:PORT, got '" + address + "'");
  }
  impl->host = address.substr(0, colon);
  if (impl->host.size() > 2 && impl->host.front() == '[' && impl->host.back() == ']') {
    impl->host = impl->host.substr(1, impl->host.size() - 2);  // [::1]:8000
  }
  impl->port = address.substr(colon + 1);
  impl->address = address;
  impl->options = options;
  if (!options.token.empty()) impl->authorization = "Bearer " + options.token;
  if (options.ssl) {
    try {
      impl->tls = std::make_unique<ssl::context>(ssl::context::tls_client);
      impl->tls->set_verify_mode(ssl::verify_peer);
      if (options.ssl_root_certs.empty()) {
        impl->tls->set_default_verify_paths();
      } else {
        impl->tls->add_certificate_authority(asio::buffer(options.ssl_root_certs));
      }
    } catch (const boost::system::system_error& e) {
      return Error(grpc::StatusCode::INVALID_ARGUMENT, std::string("TLS CA certificates: ") + e.what());
    }
    if (!options.ssl_cert_chain.empty()) {
      try {
        impl->tls->use_certificate_chain(asio::buffer(options.ssl_cert_chain));
      } catch (const boost::system::system_error& e) {
        return Error(grpc::StatusCode::INVALID_ARGUMENT, std::string("TLS client certificate: ") + e.what());
      }
      try {
        impl->tls->use_private_key(asio::buffer(options.ssl_private_key), ssl::context::pem);
      } catch (const boost::system::system_error& e) {
        return Error(grpc::StatusCode::INVALID_ARGUMENT, std::string("TLS client key: ") + e.what());
      }
    }
  }
  return std::unique_ptr<HttpClient>(new HttpClient(std::move(impl)));
}

bool HttpClient::connected() const {
  MutexLock lock(&impl_->mu);
  return impl_->open;
}

namespace {

// A non-2xx answer as the client's Status.
Status StatusOf(const Reply& reply) {
  const grpc::StatusCode code = CodeOfHttpStatus(reply.status);
  if (code == grpc::StatusCode::OK) return Status();
  return Status(code, ErrorText(reply.status, reply.reason, reply.body));
}

// live / ready: 200 yes, 400 no, anything else an error.
Result<bool> Probe(Result<Reply> exchanged) {
  ES_ASSIGN_OR_RETURN(const Reply reply, std::move(exchanged));
  if (reply.status == 200) return true;
  if (reply.status == 400) return false;
  return StatusOf(reply);
}

// The reply when the exchange worked and its HTTP status is a success; else
// the error (the transport's, or the server's answer as a Status).
Result<Reply> Answered(Result<Reply> reply) {
  if (!reply.ok()) return reply;
  ES_RETURN_IF_ERROR(StatusOf(*reply));
  return reply;
}

template <typename Message>
Result<Message> JsonAnswer(Result<Reply> exchanged, const char* what) {
  ES_ASSIGN_OR_RETURN(const Reply reply, Answered(std::move(exchanged)));
  return ProtoFromJson<Message>(reply.body, what);
}

}  // namespace

Result<bool> HttpClient::ServerLive(const CallOptions& call) const {
  return Probe(impl_->Exchange(http::verb::get, "/v2/health/live", "", std::nullopt, "", call));
}

Result<bool> HttpClient::ServerReady(const CallOptions& call) const {
  return Probe(impl_->Exchange(http::verb::get, "/v2/health/ready", "", std::nullopt, "", call));
}

Result<bool> HttpClient::ModelReady(const std::string& model, const std::string& version,
                                    const CallOptions& call) const {
  return Probe(impl_->Exchange(http::verb::get, ModelPath(model, version) + "/ready", "", std::nullopt, "", call));
}

Result<inference::ServerMetadataResponse> HttpClient::ServerMetadata(const CallOptions& call) const {
  return JsonAnswer<inference::ServerMetadataResponse>(
      impl_->Exchange(http::verb::get, "/v2", "", std::nullopt, "", call), "GET /v2");
}

Result<inference::ModelMetadataResponse> HttpClient::ModelMetadata(const std::string& model, const std::string& version,
                                                                   const CallOptions& call) const {
  return JsonAnswer<inference::ModelMetadataResponse>(
      impl_->Exchange(http::verb::get, ModelPath(model, version), "", std::nullopt, "", call), "model metadata");
}

Result<inference::RepositoryIndexResponse> HttpClient::RepositoryIndex(bool ready_only, const CallOptions& call) const {
  ES_ASSIGN_OR_RETURN(const Reply reply,
                      Answered(impl_->Exchange(http::verb::post, "/v2/repository/index",
                                               ready_only ? R"({"ready":true})" : "{}", std::nullopt,
                                               "application/json", call)));
  // The answer is a bare array of the proto's ModelIndex entries.
  const json models = json::parse(reply.body, nullptr, false);
  if (!models.is_array()) return Error(grpc::StatusCode::INTERNAL, "answer of the repository index is not an array");
  return ProtoFromJson<inference::RepositoryIndexResponse>(json{{"models", models}}.dump(), "the repository index");
}

Result<inference::ModelStatisticsResponse> HttpClient::ModelStatistics(const std::string& model,
                                                                       const std::string& version,
                                                                       const CallOptions& call) const {
  const std::string path = model.empty() ? "/v2/models/stats" : ModelPath(model, version) + "/stats";
  return JsonAnswer<inference::ModelStatisticsResponse>(
      impl_->Exchange(http::verb::get, path, "", std::nullopt, "", call), "model statistics");
}

Result<inference::ModelInferResponse> HttpClient::Infer(const inference::ModelInferRequest& request,
                                                        const CallOptions& call) const {
  std::string body;
  size_t header_length = 0;
  ES_RETURN_IF_ERROR(EncodeHttpInferRequest(request, &body, &header_length));
  ES_ASSIGN_OR_RETURN(const Reply reply,
                      Answered(impl_->Exchange(http::verb::post,
                                               ModelPath(request.model_name(), request.model_version()) + "/infer",
                                               body, header_length, "application/octet-stream", call)));
  inference::ModelInferResponse response;
  ES_RETURN_IF_ERROR(DecodeHttpInferResponse(reply.body, reply.header_length, &response));
  return response;
}

Status HttpClient::RegisterSystemSharedMemory(const std::string& name, const std::string& key, uint64_t offset,
                                              uint64_t byte_size, const CallOptions& call) const {
  const std::string body = json{{"key", key}, {"offset", offset}, {"byte_size", byte_size}}.dump();
  return Answered(impl_->Exchange(http::verb::post, ShmRegionPath(name) + "/register", body, std::nullopt,
                                  "application/json", call))
      .status();
}

Status HttpClient::UnregisterSystemSharedMemory(const std::string& name, const CallOptions& call) const {
  const std::string path = name.empty() ? "/v2/systemsharedmemory/unregister" : ShmRegionPath(name) + "/unregister";
  return Answered(impl_->Exchange(http::verb::post, path, "", std::nullopt, "application/json", call)).status();
}

Status HttpClient::PostInfer(const std::string& path, const std::string& body, size_t header_length,
                             const CallOptions& call) const {
  return Answered(impl_->Exchange(http::verb::post, path, body, header_length, "application/octet-stream", call))
      .status();
}

Result<std::unique_ptr<Api>> MakeApi(const std::string& address, const ClientOptions& options, bool http) {
  if (!http) return std::unique_ptr<Api>(new GrpcApi(Client::Create(address, options)));
  ES_ASSIGN_OR_RETURN(auto client, HttpClient::Create(address, options));
  return std::unique_ptr<Api>(std::move(client));
}

}  // namespace es::client
