// MetricsEndpoint: the Prometheus /metrics endpoint of ensemble-server, an
// HTTP server (prometheus-cpp's Exposer, on civetweb) that serialises the
// router's Collectables on every scrape.
//
// Port 0 picks a free port; port() says which. Start() returns an error
// (never throws) when the address cannot be bound.
//
// Thread safety: scrapes run on the exposer's own threads and call the
// Collectables concurrently with the request path; they must be
// thread-safe (RequestMetrics, HostMetrics are). Destroying the endpoint
// stops its threads, so it must go before what its Collectables read.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <prometheus/collectable.h>

#include "common/status.h"

namespace prometheus {
class Exposer;
}

namespace es {

class MetricsEndpoint {
 public:
  static StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& listen_address, int port, const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables);
  ~MetricsEndpoint();

  int port() const { return port_; }
  // "HOST:PORT" as it was bound ("[::1]:PORT" for an IPv6 address).
  std::string address() const;

 private:
  MetricsEndpoint() = default;

  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;  // kept alive for the exposer
  std::unique_ptr<prometheus::Exposer> exposer_;  // declared last: stops before the rest goes
  std::string host_;
  int port_ = 0;
};

}  // namespace es
