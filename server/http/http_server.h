// HttpServer: the HTTP/1.1 transport of the KServe v2 REST API (Boost.Beast
// on an asio io_context with a small thread pool), plain TCP or TLS. It reads
// requests, hands them to a handler (the router's: HttpRoutes::Handle) and
// writes the answers; what a route means is http_routes.h's.
//
// One session per connection, with keep-alive: requests on a connection are
// answered in order (the next is read once the answer has been written), so
// a connection holds at most one request and one answer at a time. Limits,
// against clients that would make the router hold memory or connections:
//   - headers at most max_header_bytes (431 and close);
//   - a body at most max_body_bytes (413 with a JSON error, sent as soon as
//     the headers announce it, then close; a chunked body is cut at the limit);
//   - a whole request (headers and body, from its first byte) must arrive
//     within request_timeout, and an answer be taken within it: a client that
//     dribbles bytes (slow-loris) or never reads is cut off, whatever its pace;
//   - a connection idle between requests is closed after idle_timeout;
//   - at most max_connections connections; more are closed at once;
//   - the request bodies held at once (from their headers until their answer
//     has been written; a chunked body counts as max_body_bytes) at most
//     memory_budget_bytes: beyond it a request is answered 429 at once.
// A body sent with `Content-Encoding: gzip` or `deflate` is inflated before
// the routes see it, at most to max_body_bytes (413 beyond: no zip bombs),
// its inflated bytes counted in the budget too; other encodings get 415.
// `Expect: 100-continue` is answered before the body is read (curl sends it
// for large bodies and would otherwise wait a second).
//
// TLS (tls set): TLS 1.2 or later with the given certificate chain and key;
// with a client CA, clients must present a certificate it signed
// (verify_peer | verify_fail_if_no_peer_cert). The handshake falls under
// request_timeout.
//
// Shutdown: StopAccepting() closes the listening socket and makes every
// answer close its connection; Shutdown(grace) then waits (at most `grace`)
// for the answers being handled or written, and stops the threads; the
// sessions left (idle or unanswered) are closed.
//
// Thread safety: Start/StopAccepting/Shutdown from one thread; the sessions
// run on the pool, each on its own strand.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "server/http/http_routes.h"
#include "server/security/tls_files.h"

namespace es {

struct HttpServerOptions {
  std::string address = "127.0.0.1";
  int port = 8000;  // 0 picks a free port
  uint64_t max_body_bytes = 64ull << 20;
  uint32_t max_header_bytes = 16 << 10;
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds idle_timeout{60000};
  size_t max_connections = 512;
  uint64_t memory_budget_bytes = 2ull << 30;  // 0 = no budget
  int threads = 2;
  const TlsFiles* tls = nullptr;  // null: plain HTTP; read only during Start
};

class HttpServer {
 public:
  // Listens and starts the threads; UNAVAILABLE when it cannot listen,
  // INVALID_ARGUMENT when the TLS material is refused.
  // `handler` answers each request through its Reply, exactly once, from
  // any thread (HttpRoutes::Handle's contract); it must outlive the server.
  using Handler = std::function<void(std::shared_ptr<HttpRequest>, HttpRoutes::Reply)>;
  static StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options, Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  std::string address() const;  // "HOST:PORT"
  void StopAccepting();
  void Shutdown(std::chrono::milliseconds grace);

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace es
