#include "server/http/http_server.h"

#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <array>
#include <cctype>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "server/http/http_compression.h"

namespace es {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

struct HttpServer::Impl {
  HttpServerOptions options;
  HttpServer::Handler handler;
  std::string address;
  // Declared before `io`: the sessions that io's destruction destroys last
  // still count themselves out and use the TLS context.
  std::atomic<size_t> connections{0};
  std::atomic<int> busy{0};             // requests read and not yet answered
  std::atomic<uint64_t> body_bytes{0};  // reserved by the sessions' requests (memory_budget_bytes)
  std::atomic<bool> stopping{false};
  std::unique_ptr<ssl::context> tls;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  // The acceptor and its retry timer live on one strand: StopAccepting's
  // close never races the accept handler.
  asio::strand<asio::io_context::executor_type> accept_strand{asio::make_strand(io)};
  tcp::acceptor acceptor{accept_strand};
  asio::steady_timer accept_retry{accept_strand};
  std::vector<std::thread> threads;
  bool shut_down = false;

  void Accept();
  void OnAccept(error_code ec, tcp::socket socket);
  // Takes `bytes` of the body budget; false (nothing taken) when it would overflow.
  bool Reserve(uint64_t bytes) {
    const uint64_t budget = options.memory_budget_bytes;
    uint64_t used = body_bytes.load();
    do {
      if (budget > 0 && (bytes > budget || used > budget - bytes)) return false;
    } while (!body_bytes.compare_exchange_weak(used, used + bytes));
    return true;
  }
};

namespace {

constexpr size_t kReadChunk = 16 << 10;
constexpr size_t kKeepBuffer = 1 << 20;     // a connection's read buffer shrinks back below this
constexpr uint64_t kLingerBytes = 8 << 20;  // read and dropped after an error answer, before closing
constexpr std::chrono::seconds kLinger{2};
// Answers shorter than this go uncompressed whatever the client accepts (RFC
// 9110 allows it): gzip's own 18 bytes and the CPU would buy nothing.
constexpr size_t kMinCompressedAnswer = 256;

template <class Stream>
constexpr bool kIsTls = !std::is_same_v<Stream, beast::tcp_stream>;

// One connection (see http_server.h): read a request, hand it to the
// routes, write the answer, again. Everything runs on the stream's strand.
template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(Stream stream, HttpServer::Impl* server) : stream_(std::move(stream)), server_(server) {
    server_->connections.fetch_add(1);
  }
  ~Session() {
    Release();
    server_->connections.fetch_sub(1);
  }

  void Run() {
    asio::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->Begin(); });
  }

 private:
  auto& Lowest() { return beast::get_lowest_layer(stream_); }

  void Begin() {
    if constexpr (kIsTls<Stream>) {
      Lowest().expires_after(server_->options.request_timeout);
      stream_.async_handshake(ssl::stream_base::server, [self = this->shared_from_this()](error_code ec) {
        if (ec) return self->Close();
        self->WaitRequest();
      });
    } else {
      WaitRequest();
    }
  }

  // Idle until the next request's first byte (or the one already buffered).
  void WaitRequest() {
    if (server_->stopping.load()) return Close();
    if (buffer_.size() > 0) return ReadHeader();
    Lowest().expires_after(server_->options.idle_timeout);
    stream_.async_read_some(buffer_.prepare(kReadChunk), [self = this->shared_from_this()](error_code ec, size_t n) {
      if (ec) return self->Close();
      self->buffer_.commit(n);
      self->ReadHeader();
    });
  }

  void ReadHeader() {
    // One deadline for the whole request, headers and body: a client that
    // dribbles bytes cannot stretch it.
    Lowest().expires_after(server_->options.request_timeout);
    parser_.emplace();
    parser_->header_limit(server_->options.max_header_bytes);
    parser_->body_limit(server_->options.max_body_bytes);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](error_code ec, size_t) { self->OnHeader(ec); });
  }

  // True when `ec` was answered (or the connection closed).
  bool ReadFailed(error_code ec) {
    if (!ec) return false;
    if (ec == http::error::body_limit) {
      Fail(413, "request body larger than the limit of " + std::to_string(server_->options.max_body_bytes) +
                    " bytes (limits.max_request_bytes plus room for the JSON)");
    } else if (ec == http::error::header_limit) {
      Fail(431,
           "request headers larger than the limit of " + std::to_string(server_->options.max_header_bytes) + " bytes");
    } else if (ec.category() == http::make_error_code(http::error::bad_method).category() &&
               ec != http::error::end_of_stream && ec != http::error::partial_message) {
      Fail(400, "malformed HTTP request: " + ec.message());
    } else {
      Close();  // the peer went away, or the request deadline passed
    }
    return true;
  }

  void OnHeader(error_code ec) {
    if (ReadFailed(ec)) return;
    // The body's bytes count against the budget until the answer is written
    // (an inference request's tensors live on in its proto until then).
    const uint64_t body = parser_->content_length().value_or(parser_->chunked() ? server_->options.max_body_bytes : 0);
    if (!server_->Reserve(body)) {
      return Fail(429, "server busy: HTTP request bodies being held reach the budget of " +
                           std::to_string(server_->options.memory_budget_bytes) + " bytes; retry later");
    }
    reserved_ = body;
    const auto& header = parser_->get();
    if (beast::iequals(header[http::field::expect], "100-continue")) {
      continue_ = {http::status::continue_, header.version()};
      http::async_write(stream_, continue_, [self = this->shared_from_this()](error_code write_error, size_t) {
        if (write_error) return self->Close();
        self->ReadBody();
      });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](error_code ec, size_t) { self->OnRequest(ec); });
  }

  void OnRequest(error_code ec) {
    if (ReadFailed(ec)) return;
    auto message = parser_->release();
    parser_.reset();
    if (buffer_.capacity() > kKeepBuffer) buffer_.shrink_to_fit();
    auto request = std::make_shared<HttpRequest>();
    request->method = std::string(message.method_string());
    request->target = std::string(message.target());
    request->authorization = std::string(message[http::field::authorization]);
    request->inference_header_length = std::string(message["Inference-Header-Content-Length"]);
    for (const auto& field : message) {
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      const auto value = field.value();
      request->headers.append(name).append(": ").append(value.data(), value.size()).push_back('\n');
    }
    request->body = std::move(message.body());
    request->client_gone = std::make_shared<std::atomic<bool>>(false);
    const auto accept = message[http::field::accept_encoding];
    answer_encoding_ = AnswerEncoding(std::string_view(accept.data(), accept.size()));
    keep_alive_ = message.keep_alive();
    version_ = message.version();
    server_->busy.fetch_add(1);
    const std::string encoding(message[http::field::content_encoding]);
    if (std::optional<HttpResponse> refused = Inflate(encoding, &request->body)) {
      return Write(std::move(*refused), /*error_close=*/false);
    }
    // The run may take long (queues, big models): no deadline while the
    // routes work; the answer's write gets its own.
    Lowest().expires_never();
    auto replied = std::make_shared<std::atomic<bool>>(false);
    auto reply = [self = this->shared_from_this(), replied](HttpResponse r) {
      if (replied->exchange(true)) return;  // one answer per request, whoever calls twice
      asio::post(self->stream_.get_executor(),
                 [self, r = std::move(r)]() mutable { self->Write(std::move(r), /*error_close=*/false); });
    };
    WatchPeer(request->client_gone);
    try {
      server_->handler(std::move(request), reply);
    } catch (const std::exception& e) {
      // Nothing may escape into the I/O thread (it would end the process).
      spdlog::error("http: request handler failed: {}", e.what());
      if (!replied->load()) reply(HttpError(Status::Internal(std::string("internal error: ") + e.what())));
    }
  }

  // While the routes work on a request, the connection is watched: the
  // client closing it (EOF or reset: it gave up, e.g. on a timeout of its
  // own) sets `gone`, which cancels the request's run as a gRPC client's
  // cancellation does, so work still queued for it is never computed.
  // Bytes that arrive instead (a pipelined request, or a TLS alert such as
  // close_notify) end the watch and wait for the next read: so over TLS only
  // an abrupt close is seen.
  void WatchPeer(std::shared_ptr<std::atomic<bool>> gone) {
    const uint64_t watch = ++watch_;
    watching_ = true;
    Lowest().socket().async_wait(
        tcp::socket::wait_read, [self = this->shared_from_this(), watch, gone = std::move(gone)](error_code ec) {
          if (ec || watch != self->watch_) return;  // cancelled: the answer is being written
          self->watching_ = false;
          char byte;
          const ssize_t n = ::recv(self->Lowest().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            gone->store(true);
            spdlog::debug("http: client closed its connection while its request ran: cancelled");
          }
        });
  }
  void StopWatching() {
    if (!watching_) return;
    watching_ = false;
    ++watch_;  // a completion already queued is ignored
    error_code ignored;
    Lowest().socket().cancel(ignored);
  }

  // A compressed body (Content-Encoding gzip or deflate) inflated in place,
  // its inflated bytes counted against the body budget too; or the answer
  // that refuses it.
  std::optional<HttpResponse> Inflate(const std::string& encoding, std::string* body) {
    if (encoding.empty() || beast::iequals(encoding, "identity")) return std::nullopt;
    const bool gzip = beast::iequals(encoding, "gzip");
    if (!gzip && !beast::iequals(encoding, "deflate")) {
      HttpResponse r = HttpError(
          Status::InvalidArgument("Content-Encoding '" + encoding + "' is not supported (gzip, deflate or none)"));
      r.status = 415;
      return r;
    }
    StatusOr<std::string> inflated = InflateBody(*body, gzip, server_->options.max_body_bytes, [this](uint64_t n) {
      if (!server_->Reserve(n)) return false;
      reserved_ += n;
      return true;
    });
    if (!inflated.ok()) {
      HttpResponse r = HttpError(inflated.status());
      if (inflated.status().code() == StatusCode::kOutOfRange) r.status = 413;
      return r;
    }
    *body = std::move(inflated).value();
    return std::nullopt;
  }

  // An error answer to a request that was not (fully) read, then close.
  void Fail(int status, std::string message) {
    parser_.reset();
    server_->busy.fetch_add(1);
    HttpResponse r = HttpError(Status::InvalidArgument(std::move(message)));
    r.status = status;
    keep_alive_ = false;
    Write(std::move(r), /*error_close=*/true);
  }

  void Write(HttpResponse r, bool error_close) {
    StopWatching();
    if (r.render) {
      auto render = std::move(r.render);
      std::shared_ptr<void> hold = std::move(r.hold);
      try {
        render(r);
      } catch (const std::exception& e) {
        r = HttpError(Status::Internal(std::string("internal error: ") + e.what()));
      }
      r.hold = std::move(hold);
    }
    hold_ = std::move(r.hold);
    response_ = {};
    response_.version(version_);
    response_.result(static_cast<unsigned>(r.status));
    if (!r.content_type.empty()) response_.set(http::field::content_type, r.content_type);
    if (r.inference_header_length) {
      response_.set("Inference-Header-Content-Length", std::to_string(*r.inference_header_length));
    }
    if (!r.allow.empty()) response_.set(http::field::allow, r.allow);
    Compress(&r);
    // RFC 7235: a 401 names the scheme the client must use.
    if (r.status == 401) response_.set(http::field::www_authenticate, "Bearer");
    const bool close = error_close || !keep_alive_ || server_->stopping.load();
    response_.keep_alive(!close);
    response_.body() = std::move(r.body);
    response_.prepare_payload();
    // A client that does not read its answer is cut off like a slow sender.
    Lowest().expires_after(server_->options.request_timeout);
    http::async_write(stream_, response_, [self = this->shared_from_this(), close, error_close](error_code ec, size_t) {
      self->hold_.reset();  // e.g. the inference call's place
      self->Release();
      self->response_ = {};
      self->server_->busy.fetch_sub(1);
      if (ec) return self->Close();
      if (error_close) return self->Linger();
      if (close) return self->Close();
      self->WaitRequest();
    });
  }

  // The answer's body compressed when the request's Accept-Encoding asked
  // for gzip or deflate (tritonclient's response_compression_algorithm).
  // Inference-Header-Content-Length keeps counting the uncompressed JSON,
  // as Triton's does: the client inflates the body, then splits it.
  void Compress(HttpResponse* r) {
    const BodyEncoding encoding = std::exchange(answer_encoding_, BodyEncoding::kIdentity);
    if (encoding == BodyEncoding::kIdentity || r->body.size() < kMinCompressedAnswer) return;
    StatusOr<std::string> compressed = DeflateBody(r->body, encoding);
    if (!compressed.ok()) {  // the plain body is a correct answer too
      spdlog::warn("http: answer not compressed: {}", compressed.status().ToString());
      return;
    }
    r->body = std::move(compressed).value();
    response_.set(http::field::content_encoding, BodyEncodingName(encoding));
    response_.set(http::field::vary, "Accept-Encoding");
  }

  // After an error answer to a request whose body may still be arriving:
  // stop sending, drop what comes for a moment, then close. Closing at once
  // with unread bytes makes the kernel reset the connection, and the client
  // could lose the answer.
  void Linger() {
    error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    Lowest().expires_after(kLinger);
    Drop();
  }
  void Drop() {
    Lowest().async_read_some(asio::buffer(drop_), [self = this->shared_from_this()](error_code ec, size_t n) {
      self->dropped_ += n;
      if (ec || self->dropped_ > kLingerBytes) return self->Close();
      self->Drop();
    });
  }

  void Release() {
    server_->body_bytes.fetch_sub(reserved_);
    reserved_ = 0;
  }

  void Close() {
    error_code ignored;
    auto& socket = Lowest().socket();
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
  }

  Stream stream_;
  HttpServer::Impl* const server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::empty_body> continue_;
  http::response<http::string_body> response_;
  std::shared_ptr<void> hold_;
  bool keep_alive_ = true;
  unsigned version_ = 11;
  std::array<char, 16 << 10> drop_{};
  uint64_t dropped_ = 0;
  uint64_t reserved_ = 0;  // of the body budget
  BodyEncoding answer_encoding_ = BodyEncoding::kIdentity;  // of the request being answered
  bool watching_ = false;  // WatchPeer's wait is pending
  uint64_t watch_ = 0;     // the current watch; older completions are ignored
};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor.async_accept(asio::make_strand(io),
                        [this](error_code ec, tcp::socket socket) { OnAccept(ec, std::move(socket)); });
}

void HttpServer::Impl::OnAccept(error_code ec, tcp::socket socket) {
  if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;  // stopping
  if (ec) {
    // E.g. out of file descriptors: try again shortly instead of spinning.
    spdlog::warn("http: accept failed: {}", ec.message());
    accept_retry.expires_after(std::chrono::milliseconds(100));
    accept_retry.async_wait([this](error_code wait_ec) {
      if (!wait_ec) Accept();
    });
    return;
  }
  if (connections.load() >= options.max_connections) {
    error_code ignored;
    socket.close(ignored);  // over the cap: refused at once
  } else if (tls) {
    std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
        beast::ssl_stream<beast::tcp_stream>(beast::tcp_stream(std::move(socket)), *tls), this)
        ->Run();
  } else {
    std::make_shared<Session<beast::tcp_stream>>(beast::tcp_stream(std::move(socket)), this)->Run();
  }
  Accept();
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Shutdown(std::chrono::milliseconds(0)); }

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options, Handler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  if (options.tls != nullptr) {
    auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
    context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                         ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    error_code ec;
    context->use_certificate_chain(asio::buffer(options.tls->cert_chain), ec);
    if (ec) return Status::InvalidArgument("http: tls.cert refused: " + ec.message());
    context->use_private_key(asio::buffer(options.tls->private_key), ssl::context::pem, ec);
    if (ec) return Status::InvalidArgument("http: tls.key refused: " + ec.message());
    if (!options.tls->client_ca.empty()) {
      context->add_certificate_authority(asio::buffer(options.tls->client_ca), ec);
      if (ec) return Status::InvalidArgument("http: tls.client_ca refused: " + ec.message());
      context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    }
    impl->tls = std::move(context);
  }
  const std::string where = options.address + ":" + std::to_string(options.port);
  error_code ec;
  tcp::resolver resolver(impl->io);
  const auto endpoints = resolver.resolve(options.address, std::to_string(options.port),
                                          tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) return Status::Unavailable("cannot listen for HTTP on " + where + ": " + ec.message());
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable("cannot listen for HTTP on " + where + ": " + ec.message());
  impl->address = options.address + ":" + std::to_string(impl->acceptor.local_endpoint().port());
  impl->work.emplace(impl->io.get_executor());
  impl->Accept();
  for (int i = 0; i < std::max(1, options.threads); ++i) {
    impl->threads.emplace_back([io = &impl->io] {
      pthread_setname_np(pthread_self(), "es-http");  // in top -H, perf and /proc
      io->run();
    });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

std::string HttpServer::address() const { return impl_->address; }

void HttpServer::StopAccepting() {
  if (impl_->stopping.exchange(true)) return;
  asio::post(impl_->accept_strand, [impl = impl_.get()] {
    error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_retry.cancel();
  });
}

void HttpServer::Shutdown(std::chrono::milliseconds grace) {
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  StopAccepting();
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (impl_->busy.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  impl_->work.reset();
  impl_->io.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  // The sessions left go with the io_context (when this object does): an
  // answer that arrives after now is posted to a stopped context and dropped.
}

}  // namespace es
