#include "model_host/training/metrics_http_server.h"

#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <thread>

namespace es {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

struct MetricsHttpServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::shared_ptr<prometheus::Registry> registry;
  std::thread thread;

  void Accept() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec) return;  // the acceptor was closed: stopping
      Serve(std::move(socket));
      Accept();
    });
  }

  void Serve(tcp::socket socket) {
    const timeval timeout{5, 0};
    setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(socket.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    boost::beast::flat_buffer buffer;
    http::request<http::string_body> request;
    boost::system::error_code ec;
    http::read(socket, buffer, request, ec);
    if (ec) return;
    http::response<http::string_body> response;
    response.version(request.version());
    response.keep_alive(false);
    if (request.method() == http::verb::get && request.target() == "/metrics") {
      response.result(http::status::ok);
      response.set(http::field::content_type, "text/plain; version=0.0.4");
      response.body() = prometheus::TextSerializer().Serialize(registry->Collect());
    } else {
      response.result(http::status::not_found);
      response.set(http::field::content_type, "text/plain");
      response.body() = "not found: only GET /metrics is served here\n";
    }
    response.prepare_payload();
    http::write(socket, response, ec);
    socket.shutdown(tcp::socket::shutdown_both, ec);
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
  asio::post(impl_->io, [this] {
    boost::system::error_code ec;
    impl_->acceptor.close(ec);
  });
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
