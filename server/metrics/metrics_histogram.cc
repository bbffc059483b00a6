#include "server/metrics/metrics_histogram.h"

#include <algorithm>
#include <limits>

namespace es {

AtomicHistogram::AtomicHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void AtomicHistogram::Observe(double value) {
  // Prometheus buckets are "less than or equal": the first bound >= value.
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

uint64_t AtomicHistogram::count() const {
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) total += buckets_[i].load(std::memory_order_relaxed);
  return total;
}

void AtomicHistogram::Fill(prometheus::ClientMetric* metric) const {
  auto& h = metric->histogram;
  h.bucket.clear();
  h.bucket.reserve(bounds_.size() + 1);
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    prometheus::ClientMetric::Bucket b;
    b.cumulative_count = cumulative;
    b.upper_bound = i < bounds_.size() ? bounds_[i] : std::numeric_limits<double>::infinity();
    h.bucket.push_back(b);
  }
  h.sample_count = cumulative;
  h.sample_sum = sum_.load(std::memory_order_relaxed);
}

namespace buckets {

std::vector<double> Latency() {
  return {1e-5,  2.5e-5, 5e-5,  1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
          2.5e-2, 5e-2,  0.1,   0.25, 0.5,    1.0,  2.5,  5.0,    10.0};
}

std::vector<double> BatchSize() { return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}; }

std::vector<double> Fraction() { return {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0}; }
std::vector<double> Entropy() { return {0.01, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0}; }

}  // namespace buckets
}  // namespace es
