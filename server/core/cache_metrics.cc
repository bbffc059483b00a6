#include "server/core/cache_metrics.h"

#include "server/metrics/metrics_families.h"

namespace es {

std::vector<prometheus::MetricFamily> CacheMetrics::Collect() const {
  using prometheus::MetricType;
  const ResponseCache::Figures f = cache_->figures();
  std::vector<prometheus::MetricFamily> out;
  auto add = [&out](const char* name, const char* help, MetricType type, uint64_t value) {
    auto family = Family(name, help, type);
    if (type == MetricType::Counter) {
      AddCounter(&family, {}, static_cast<double>(value));
    } else {
      AddGauge(&family, {}, static_cast<double>(value));
    }
    out.push_back(std::move(family));
  };
  add("ensemble_cache_hits_total", "Response cache lookups answered from the cache.", MetricType::Counter, f.hits);
  add("ensemble_cache_misses_total", "Response cache lookups that ran the model.", MetricType::Counter, f.misses);
  add("ensemble_cache_insertions_total", "Answers kept in the response cache.", MetricType::Counter, f.insertions);
  add("ensemble_cache_evictions_total", "Answers dropped from the response cache to make room (least recently used).",
      MetricType::Counter, f.evictions);
  add("ensemble_cache_bytes", "Bytes the response cache holds.", MetricType::Gauge, f.bytes);
  add("ensemble_cache_entries", "Answers the response cache holds.", MetricType::Gauge, f.entries);
  add("ensemble_cache_capacity_bytes", "The response cache's bound (response_cache.size_bytes).", MetricType::Gauge,
      cache_->capacity());
  return out;
}

}  // namespace es
