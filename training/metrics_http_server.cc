#include "training/metrics_http_server.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <memory>
#include <thread>

namespace es {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kClientTimeout = std::chrono::seconds(5);

// One connection: read a request, answer it, close. Asynchronous with an
// expiry, so a client that stalls is dropped after kClientTimeout (a
// blocking read would ignore any socket timeout and hold the thread).
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<prometheus::Registry> registry)
      : stream_(std::move(socket)), registry_(std::move(registry)) {}

  void Start() {
    stream_.expires_after(kClientTimeout);
    http::async_read(stream_, buffer_, request_,
                     [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                       if (!ec) self->Answer();
                     });
  }

 private:
  void Answer() {
    response_.version(request_.version());
    response_.keep_alive(false);
    if (request_.method() == http::verb::get && request_.target() == "/metrics") {
      response_.result(http::status::ok);
      response_.set(http::field::content_type, "text/plain; version=0.0.4");
      response_.body() = prometheus::TextSerializer().Serialize(registry_->Collect());
    } else {
      response_.result(http::status::not_found);
      response_.set(http::field::content_type, "text/plain");
      response_.body() = "not found: only GET /metrics is served here\n";
    }
    response_.prepare_payload();
    stream_.expires_after(kClientTimeout);
    http::async_write(stream_, response_,
                      [self = shared_from_this()](boost::system::error_code, std::size_t) {
                        boost::system::error_code ignored;
                        self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
                      });
  }

  boost::beast::tcp_stream stream_;
  std::shared_ptr<prometheus::Registry> registry_;
  boost::beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
};

}  // namespace

struct MetricsHttpServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::shared_ptr<prometheus::Registry> registry;
  std::thread thread;

  void Accept() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec) return;  // the acceptor was closed: stopping
      std::make_shared<Session>(std::move(socket), registry)->Start();
      Accept();
    });
  }
};

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, int port, std::shared_ptr<prometheus::Registry> registry) {
  auto impl = std::make_unique<Impl>();
  impl->registry = std::move(registry);
  boost::system::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(address, ec);
  if (ec) return Status::InvalidArgument("metrics address '" + address + "': " + ec.message());
  const tcp::endpoint endpoint(ip, static_cast<unsigned short>(port));
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::Unavailable("cannot listen for metrics on " + address + ":" +
                               std::to_string(port) + ": " + ec.message());
  }
  impl->Accept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(impl)));
}

MetricsHttpServer::~MetricsHttpServer() {
  // stop() abandons any session still waiting on a client; their sockets
  // close when the io_context (and the handlers holding them) go.
  impl_->io.stop();
  impl_->thread.join();
}

std::string MetricsHttpServer::address() const {
  boost::system::error_code ec;
  const tcp::endpoint endpoint = impl_->acceptor.local_endpoint(ec);
  const std::string host = endpoint.address().to_string();
  return (endpoint.address().is_v6() ? "[" + host + "]" : host) + ":" +
         std::to_string(endpoint.port());
}

}  // namespace es
