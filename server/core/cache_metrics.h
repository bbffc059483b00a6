// CacheMetrics: the response cache's figures for /metrics, read at each
// scrape (server/core/response_cache.h):
//   ensemble_cache_hits_total, ensemble_cache_misses_total    lookups
//   ensemble_cache_insertions_total, ensemble_cache_evictions_total
//   ensemble_cache_bytes, ensemble_cache_entries              now
//   ensemble_cache_capacity_bytes                             its bound
// Per model, the statistics' cache_hit and cache_miss say the same.
//
// Thread safety: Collect() runs on the exposer's threads; the cache is
// thread-safe and outlives the endpoint.
#pragma once

#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "server/core/response_cache.h"

namespace es {

class CacheMetrics final : public prometheus::Collectable {
 public:
  explicit CacheMetrics(const ResponseCache* cache) : cache_(cache) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const ResponseCache* cache_;
};

}  // namespace es
