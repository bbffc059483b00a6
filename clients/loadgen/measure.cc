#include "clients/loadgen/measure.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

namespace es::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

// Sleeps `seconds`, in short slices so that an interrupt is seen quickly.
void SleepFor(double seconds, const std::atomic<bool>* interrupted) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (!(interrupted && interrupted->load())) {
    const auto now = Clock::now();
    if (now >= until) return;
    std::this_thread::sleep_for(std::min<Clock::duration>(until - now, std::chrono::milliseconds(50)));
  }
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// CPU time of this process so far (every thread, gRPC's included), seconds.
double ProcessCpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return secs(usage.ru_utime) + secs(usage.ru_stime);
}

double Average(uint64_t count_a, uint64_t ns_a, uint64_t count_b, uint64_t ns_b) {
  if (count_b <= count_a) return -1;
  return static_cast<double>(ns_b - ns_a) / static_cast<double>(count_b - count_a) / 1000.0;
}

std::string Format(const char* fmt, double a, double b) {
  char buf[128];
  std::snprintf(buf, sizeof buf, fmt, a, b);
  return buf;
}

}  // namespace

std::optional<ServerCounters> ReadServerCounters(const es::client::Client& client, const std::string& model,
                                                 const std::string& version) {
  auto r = client.ModelStatistics(model, version, es::client::CallOptions{std::chrono::milliseconds(5000)});
  if (!r.ok()) return std::nullopt;
  for (const auto& m : r->model_stats()) {
    if (m.name() != model) continue;
    const auto& s = m.inference_stats();
    ServerCounters c;
    c.success_count = s.success().count();
    c.success_ns = s.success().ns();
    c.fail_count = s.fail().count();
    c.fail_ns = s.fail().ns();
    c.queue_count = s.queue().count();
    c.queue_ns = s.queue().ns();
    c.compute_input_count = s.compute_input().count();
    c.compute_input_ns = s.compute_input().ns();
    c.compute_infer_count = s.compute_infer().count();
    c.compute_infer_ns = s.compute_infer().ns();
    c.compute_output_count = s.compute_output().count();
    c.compute_output_ns = s.compute_output().ns();
    c.inference_count = m.inference_count();
    c.execution_count = m.execution_count();
    return c;
  }
  return std::nullopt;
}

ServerStages StagesBetween(const std::optional<ServerCounters>& a, const std::optional<ServerCounters>& b) {
  ServerStages s;
  if (!a || !b || b->success_count < a->success_count) return s;
  s.available = true;
  s.success = b->success_count - a->success_count;
  s.fail = b->fail_count >= a->fail_count ? b->fail_count - a->fail_count : 0;
  s.executions = b->execution_count >= a->execution_count ? b->execution_count - a->execution_count : 0;
  s.inferences = b->inference_count >= a->inference_count ? b->inference_count - a->inference_count : 0;
  s.success_us = Average(a->success_count, a->success_ns, b->success_count, b->success_ns);
  s.queue_us = Average(a->queue_count, a->queue_ns, b->queue_count, b->queue_ns);
  s.compute_input_us = Average(a->compute_input_count, a->compute_input_ns, b->compute_input_count, b->compute_input_ns);
  s.compute_infer_us = Average(a->compute_infer_count, a->compute_infer_ns, b->compute_infer_count, b->compute_infer_ns);
  s.compute_output_us =
      Average(a->compute_output_count, a->compute_output_ns, b->compute_output_count, b->compute_output_ns);
  if (s.executions > 0) s.avg_batch = static_cast<double>(s.inferences) / static_cast<double>(s.executions);
  return s;
}

LatencySummary Summarize(std::vector<int64_t>& ns) {
  LatencySummary s;
  s.count = ns.size();
  if (ns.empty()) return s;
  std::sort(ns.begin(), ns.end());
  auto at = [&](double p) {
    // Nearest rank: the smallest value with at least p% of the values <= it.
    const double rank = std::ceil(p / 100.0 * static_cast<double>(ns.size()) - 1e-9);  // 99.9% of 1000 is 999
    const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(ns.size()))) - 1;
    return static_cast<double>(ns[i]) / 1000.0;
  };
  double sum = 0;
  for (int64_t v : ns) sum += static_cast<double>(v);
  s.mean_us = sum / static_cast<double>(ns.size()) / 1000.0;
  s.min_us = static_cast<double>(ns.front()) / 1000.0;
  s.max_us = static_cast<double>(ns.back()) / 1000.0;
  s.p50_us = at(50);
  s.p90_us = at(90);
  s.p95_us = at(95);
  s.p99_us = at(99);
  s.p999_us = at(99.9);
  return s;
}

bool LastAgree(const std::vector<double>& values, int n, double tolerance) {
  if (n <= 0 || values.size() < static_cast<size_t>(n)) return false;
  const auto first = values.end() - n;
  const double lo = *std::min_element(first, values.end());
  const double hi = *std::max_element(first, values.end());
  return lo > 0 && hi <= lo * (1.0 + tolerance);
}

StepResult RunStep(LoadEngine& engine, const es::client::Client& stats_client, const LoadPlan& plan,
                   const std::string& request_bytes, const StepSettings& settings, const ProgressFn& progress,
                   const std::atomic<bool>* interrupted) {
  StepResult result;
  result.model = settings.model;
  result.open_loop = plan.concurrency <= 0;
  result.concurrency = plan.concurrency;
  result.rate = plan.rate;
  const std::string label = result.open_loop ? Format("rate %.6g/s", plan.rate, 0) : Format("concurrency %.0f", plan.concurrency, 0);

  engine.Start(plan, request_bytes);
  if (progress) progress(label + ": warm-up");
  SleepFor(settings.warmup_s, interrupted);
  engine.TakeSample();  // the warm-up, and whatever the previous step left

  std::vector<std::optional<ServerCounters>> counters{ReadServerCounters(stats_client, settings.model, settings.version)};
  std::vector<double> cpu{ProcessCpuSeconds()};
  std::vector<Sample> samples;
  while (result.windows < settings.max_windows && !(interrupted && interrupted->load())) {
    SleepFor(settings.duration_s, interrupted);
    Sample s = engine.TakeSample();
    cpu.push_back(ProcessCpuSeconds());
    counters.push_back(ReadServerCounters(stats_client, settings.model, settings.version));
    const double rps = static_cast<double>(s.ok()) / std::max(1e-9, Seconds(s.elapsed));
    result.window_rps.push_back(rps);
    samples.push_back(std::move(s));
    ++result.windows;
    result.stable = LastAgree(result.window_rps, settings.stable_windows, settings.stability);
    if (progress) {
      progress(label + ": window " + std::to_string(result.windows) + "/" + std::to_string(settings.max_windows) +
               Format(", %.1f req/s, in flight %.0f", rps, static_cast<double>(engine.in_flight())) +
               (result.stable ? ", stable" : ""));
    }
    if (result.stable) break;
  }
  engine.Stop();
  if (samples.empty()) return result;

  const int n = std::min<int>(settings.stable_windows, static_cast<int>(samples.size()));
  result.merged_windows = n;
  Sample merged;
  for (size_t i = samples.size() - static_cast<size_t>(n); i < samples.size(); ++i) merged.Merge(std::move(samples[i]));
  result.server = StagesBetween(counters[counters.size() - 1 - static_cast<size_t>(n)], counters.back());
  result.seconds = Seconds(merged.elapsed);
  result.client_cpu = (cpu.back() - cpu[cpu.size() - 1 - static_cast<size_t>(n)]) / std::max(1e-9, result.seconds);
  result.sent = merged.sent;
  result.ok = merged.ok();
  result.failed = merged.failed();
  result.skipped = merged.skipped;
  for (const auto& [code, count] : merged.errors) result.errors[es::client::CodeName(code)] += count;
  const double secs = std::max(1e-9, result.seconds);
  result.throughput_rps = static_cast<double>(result.ok) / secs;
  result.rows_per_s = result.throughput_rps * static_cast<double>(settings.batch);
  result.send_rate = static_cast<double>(result.sent) / secs;
  if (result.open_loop && merged.sent > 0) {
    result.mean_late_us = static_cast<double>(merged.late_ns_sum) / static_cast<double>(merged.sent) / 1000.0;
  }
  result.latency = Summarize(merged.latencies_ns);
  return result;
}

}  // namespace es::loadgen
