// AtomicHistogram: a Prometheus histogram whose Observe() takes no lock.
//
// prometheus-cpp's Histogram (1.0) guards every Observe with a mutex, and
// ModelInfer observes several histograms per request from every gRPC and
// completion thread. Here each bucket is a relaxed atomic counter and the sum
// an atomic double (C++20 fetch_add), so a request pays a few uncontended
// atomic adds. Collect() reads the buckets one by one: a scrape that races
// with an Observe may see that observation in a bucket but not yet in the
// sum (or the reverse) -- one observation's worth of skew, fixed by the next
// scrape; `_count` is always the sum of the buckets it reports, so the
// exposition is self-consistent.
//
// Thread safety: Observe() and Fill() from any thread, concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <prometheus/client_metric.h>

namespace es {

class AtomicHistogram {
 public:
  // `bounds`: the finite upper bounds, strictly increasing; +Inf is implied.
  explicit AtomicHistogram(std::vector<double> bounds);

  void Observe(double value);
  // Fills metric->histogram (cumulative buckets, count, sum).
  void Fill(prometheus::ClientMetric* metric) const;
  uint64_t count() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1, the last is +Inf
  std::atomic<double> sum_{0.0};
};

// Bucket layouts shared by the router's histograms.
namespace buckets {
// Seconds, 10 µs .. 10 s, roughly 1-2.5-5 per decade: the same for every
// stage so that per-stage quantiles can be compared on one dashboard.
std::vector<double> Latency();
// Rows per batch: powers of two up to 1024.
std::vector<double> BatchSize();
// A fraction in [0, 1] in steps of 0.1.
std::vector<double> Fraction();
// Entropy of a probability vector in nats, 0 .. 3 (ln 10 = 2.30: ten
// classes evenly), finer where confident answers are.
std::vector<double> Entropy();
}  // namespace buckets

}  // namespace es
