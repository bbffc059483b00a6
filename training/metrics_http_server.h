// MetricsHttpServer: a minimal Prometheus /metrics endpoint (Boost.Beast, one
// thread) for processes that link LibTorch.
//
// Why not the router's MetricsEndpoint (prometheus-cpp's civetweb Exposer):
// Debian's civetweb creates its threads with a fixed 100 KiB stack, and a
// process with LibTorch loaded needs more than that for its static TLS
// alone, so pthread_create fails and the exposer cannot start ("Cannot
// create threads"). Here the serving thread has a default stack.
//
// GET /metrics answers the registry in the text exposition format (0.0.4);
// anything else is 404. One request per connection; connections are served
// concurrently on the one thread (asynchronous I/O), and a client that
// stalls for 5 s is dropped, so it can neither block a scrape nor the exit.
//
// Thread safety: Start/destructor from one thread; the registry is read on
// the server's thread while others update its metrics (prometheus-cpp
// metrics are thread-safe).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace prometheus {
class Registry;
}

namespace es {

class MetricsHttpServer {
 public:
  // port 0: a free port (see address()).
  static StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, int port, std::shared_ptr<prometheus::Registry> registry);
  ~MetricsHttpServer();  // stops and joins the serving thread

  std::string address() const;  // "HOST:PORT" as bound

 private:
  struct Impl;
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace es
