#include "server/metrics_endpoint.h"

#include <exception>

#include <prometheus/exposer.h>

namespace es {
namespace {

// civetweb wants IPv6 addresses in brackets.
std::string HostPart(const std::string& address) {
  return address.find(':') != std::string::npos && address.front() != '[' ? "[" + address + "]" : address;
}

}  // namespace

StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& listen_address, int port, const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables) {
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  endpoint->host_ = HostPart(listen_address);
  const std::string bind = endpoint->host_ + ":" + std::to_string(port);
  try {
    // Two threads: a scrape is rare and short; Prometheus scrapes one at a time.
    endpoint->exposer_ = std::make_unique<prometheus::Exposer>(bind, 2);
  } catch (const std::exception& e) {
    return Status::Unavailable("cannot listen for metrics on " + bind + ": " + e.what());
  }
  const std::vector<int> ports = endpoint->exposer_->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0) return Status::Unavailable("cannot listen for metrics on " + bind);
  endpoint->port_ = ports.front();
  endpoint->collectables_ = collectables;
  for (const auto& c : collectables) endpoint->exposer_->RegisterCollectable(c);
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() = default;

std::string MetricsEndpoint::address() const { return host_ + ":" + std::to_string(port_); }

}  // namespace es
