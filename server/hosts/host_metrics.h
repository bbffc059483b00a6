// HostMetrics: the per-host figures of /metrics (a prometheus-cpp
// Collectable), read from the HostSupervisors at scrape time, labelled with
// `host`: up, restarts, seconds since the last heartbeat, tensor arena bytes
// used and capacity, resident memory, CPU seconds (a counter across host
// restarts) and, on CUDA hosts, the device memory LibTorch's caching
// allocator has allocated and reserved.
//
// Nothing here is on the request path: the figures are atomics the
// supervisors' monitor threads keep (see HostSupervisor::figures()).
//
// Thread safety: Collect() from any thread; the supervisors outlive it.
#pragma once

#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "server/hosts/host_supervisor.h"

namespace es {

class HostMetrics final : public prometheus::Collectable {
 public:
  explicit HostMetrics(std::vector<const HostSupervisor*> hosts) : hosts_(std::move(hosts)) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::vector<const HostSupervisor*> hosts_;
};

}  // namespace es
