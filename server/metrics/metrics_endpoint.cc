#include "server/metrics/metrics_endpoint.h"

#include <exception>

#include <CivetServer.h>
#include <prometheus/exposer.h>

namespace es {
namespace {

// civetweb reports why it could not start only through this callback;
// without it the exception just says "null context".
thread_local std::string t_start_error;

int RememberCivetError(const mg_connection*, const char* message) {
  t_start_error = message;
  return 1;  // handled: civetweb prints nothing itself
}

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
  CivetCallbacks callbacks{};
  callbacks.log_message = RememberCivetError;
  t_start_error.clear();
  try {
    // Two threads: a scrape is rare and short; Prometheus scrapes one at a time.
    endpoint->exposer_ = std::make_unique<prometheus::Exposer>(bind, 2, &callbacks);
  } catch (const std::exception& e) {
    return Status::Unavailable("cannot listen for metrics on " + bind + ": " +
                               (t_start_error.empty() ? e.what() : t_start_error));
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
