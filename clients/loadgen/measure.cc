#include "clients/loadgen/measure.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <functional>
#include <thread>

#include "clients/loadgen/process_cpu.h"

namespace es::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

// Sleeps `seconds`, in short slices so that an interrupt (or the engine
// losing the server) is seen quickly.
void SleepFor(double seconds, const std::function<bool()>& stop) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (!stop()) {
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

// The server's CPU (--server-pid) at a window boundary; nullopt without
// --server-pid or when the process is gone.
std::optional<ProcessCpu> ServerCpu(const StepSettings& settings) {
  if (settings.server_pid <= 0) return std::nullopt;
  return ReadProcessCpu(static_cast<pid_t>(settings.server_pid));
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

std::optional<ServerCounters> ReadServerCounters(const es::client::Api& client, const std::string& model,
                                                 const std::string& version) {
  auto r = client.ModelStatistics(model, version, es::client::CallOptions{std::chrono::milliseconds(5000)});
  if (!r.ok()) return std::nullopt;
  // One entry per version of the model (all of them when `version` is
  // empty, as a server may serve several): their sum.
  std::optional<ServerCounters> sum;
  for (const auto& m : r->model_stats()) {
    if (m.name() != model) continue;
    const auto& s = m.inference_stats();
    ServerCounters& c = sum ? *sum : sum.emplace();
    c.success_count += s.success().count();
    c.success_ns += s.success().ns();
    c.fail_count += s.fail().count();
    c.fail_ns += s.fail().ns();
    c.queue_count += s.queue().count();
    c.queue_ns += s.queue().ns();
    c.compute_input_count += s.compute_input().count();
    c.compute_input_ns += s.compute_input().ns();
    c.compute_infer_count += s.compute_infer().count();
    c.compute_infer_ns += s.compute_infer().ns();
    c.compute_output_count += s.compute_output().count();
    c.compute_output_ns += s.compute_output().ns();
    c.inference_count += m.inference_count();
    c.execution_count += m.execution_count();
  }
  return sum;
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

int LatencyBucket(int64_t ns) {
  const double us = std::max(1.0, static_cast<double>(ns) / 1000.0);
  return static_cast<int>(std::floor(std::log2(us) * 16.0));
}

double BucketUpperUs(int bucket) { return std::exp2(static_cast<double>(bucket + 1) / 16.0); }

WindowStats MakeWindow(const Sample& sample, std::vector<int64_t> latencies_ns) {
  WindowStats w;
  w.seconds = Seconds(sample.elapsed);
  w.start_unix_s = std::chrono::duration<double>(sample.end_wall.time_since_epoch()).count() - w.seconds;
  w.sent = sample.sent;
  w.ok = latencies_ns.size();
  w.failed = sample.failed();
  w.hung = sample.hung;
  w.unanswered = sample.unanswered;
  for (const auto& [code, count] : sample.errors) w.errors[es::client::CodeName(code)] += count;
  for (int64_t ns : latencies_ns) ++w.histogram[LatencyBucket(ns)];
  const LatencySummary l = Summarize(latencies_ns);
  w.p50_us = l.p50_us;
  w.p99_us = l.p99_us;
  w.max_us = l.max_us;
  return w;
}

bool LastAgree(const std::vector<double>& values, int n, double tolerance) {
  if (n <= 0 || values.size() < static_cast<size_t>(n)) return false;
  const auto first = values.end() - n;
  const double lo = *std::min_element(first, values.end());
  const double hi = *std::max_element(first, values.end());
  return lo > 0 && hi <= lo * (1.0 + tolerance);
}

namespace {

// Calls that ended while the engine stopped (`rest`) join the last window:
// its figures (`last`) and its sample (`last_sample`); the window keeps its
// measured length.
void AddToLastWindow(Sample rest, WindowStats* last, Sample* last_sample) {
  const WindowStats tail = MakeWindow(rest, rest.latencies_ns);
  last->sent += tail.sent;
  last->ok += tail.ok;
  last->failed += tail.failed;
  last->hung += tail.hung;
  last->unanswered += tail.unanswered;
  for (const auto& [code, count] : tail.errors) last->errors[code] += count;
  for (const auto& [bucket, count] : tail.histogram) last->histogram[bucket] += count;
  rest.elapsed = {};
  last_sample->Merge(std::move(rest));
}

// The step's call counts, rates and latencies from its merged windows
// (`result->seconds` already set).
void SetCallFigures(Sample merged, int64_t batch, StepResult* result) {
  result->sent = merged.sent;
  result->ok = merged.ok();
  result->failed = merged.failed();
  result->hung = merged.hung;
  result->unanswered = merged.unanswered;
  result->skipped = merged.skipped;
  result->labelled = merged.checked;
  result->labelled_by_served_by = std::move(merged.checked_by_served_by);
  result->labelled_by_request = std::move(merged.checked_by_request);
  result->unreadable = merged.unreadable;
  for (const auto& [code, count] : merged.errors) result->errors[es::client::CodeName(code)] += count;
  const double secs = std::max(1e-9, result->seconds);
  result->throughput_rps = static_cast<double>(result->ok) / secs;
  result->rows_per_s = result->throughput_rps * static_cast<double>(batch);
  result->send_rate = static_cast<double>(result->sent) / secs;
  if (result->open_loop && merged.sent > 0) {
    result->mean_late_us = static_cast<double>(merged.late_ns_sum) / static_cast<double>(merged.sent) / 1000.0;
  }
  result->latency = Summarize(merged.latencies_ns);
}

}  // namespace

StepResult RunStep(Engine& engine, const es::client::Api& stats_client, const LoadPlan& plan,
                   const RequestSet& requests, const StepSettings& settings, const ProgressFn& progress,
                   const std::atomic<bool>* interrupted) {
  StepResult result;
  result.checked = requests.checked();
  result.model = settings.model;
  result.open_loop = plan.concurrency <= 0;
  result.concurrency = plan.concurrency;
  result.rate = plan.rate;
  const std::string label = result.open_loop ? Format("rate %.6g/s", plan.rate, 0) : Format("concurrency %.0f", plan.concurrency, 0);

  result.soak = settings.run_s > 0 || settings.requests > 0;
  const auto stop = [&] { return (interrupted && interrupted->load()) || engine.lost_server(); };
  // A counted step is over once its calls were sent and none is in flight
  // (calls of the warm-up still out are waited for too: they end at their deadline).
  const auto counted = [&] { return settings.requests > 0 && engine.limit_sent() && engine.in_flight() == 0; };
  engine.Start(plan, requests);
  if (progress) progress(label + ": warm-up");
  SleepFor(settings.warmup_s, stop);
  engine.TakeSample();  // the warm-up, and whatever the previous step left
  // The measured window sends the requests from the first, and checks the answers of its own calls only.
  const uint32_t turn = engine.RestartRequests(settings.requests);

  std::vector<std::optional<ServerCounters>> counters{ReadServerCounters(stats_client, settings.model, settings.version)};
  std::vector<double> cpu{ProcessCpuSeconds()};
  std::vector<std::optional<ProcessCpu>> server_cpu{ServerCpu(settings)};
  std::vector<Sample> samples;
  const auto soak_end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(settings.run_s));
  const int max_windows = settings.requests > 0 ? INT_MAX
                          : result.soak ? static_cast<int>(std::ceil(settings.run_s / settings.duration_s - 1e-9))
                                        : settings.max_windows;
  // A server lost during the warm-up still gets its (short) window: what
  // succeeded is reported.
  bool lost_in_warmup = engine.lost_server();
  while (result.windows < max_windows && (lost_in_warmup || !stop()) && !counted()) {
    lost_in_warmup = false;
    double window_s = settings.duration_s;
    if (settings.run_s > 0) {
      window_s = std::min(window_s, std::chrono::duration<double>(soak_end - Clock::now()).count());
    }
    SleepFor(window_s, [&] { return stop() || counted(); });
    Sample s = engine.TakeSample();
    result.timeline.push_back(MakeWindow(s, s.latencies_ns));
    cpu.push_back(ProcessCpuSeconds());
    server_cpu.push_back(ServerCpu(settings));
    // A soak reads the server's counters at its two ends only: a stalled
    // server must not stretch every window by the statistics call's deadline.
    counters.push_back(result.soak ? std::nullopt : ReadServerCounters(stats_client, settings.model, settings.version));
    const double rps = static_cast<double>(s.ok()) / std::max(1e-9, Seconds(s.elapsed));
    result.window_rps.push_back(rps);
    samples.push_back(std::move(s));
    ++result.windows;
    result.stable = LastAgree(result.window_rps, settings.stable_windows, settings.stability);
    if (progress) {
      std::string line = label + ": window " + std::to_string(result.windows);
      if (settings.requests == 0) {  // a counted step's end is not a count of windows
        line += '/';
        line += std::to_string(max_windows);
      }
      line += Format(", %.1f req/s, in flight %.0f", rps, static_cast<double>(engine.in_flight()));
      if (result.stable) line += ", stable";
      progress(line);
    }
    if (result.stable && !result.soak) break;
  }
  engine.Stop();
  if (engine.lost_server()) result.lost_server = engine.lost_server_reason();
  if (result.soak && !samples.empty()) {
    counters.back() = ReadServerCounters(stats_client, settings.model, settings.version);
  }
  if ((result.soak || !result.lost_server.empty()) && !samples.empty()) {
    // What completed while stopping (unanswered calls among it) belongs to
    // the last window: a soak, or a step that lost the server, must not lose
    // the calls that ended it. (A sweep's steps leave them to the totals.)
    AddToLastWindow(engine.TakeSample(), &result.timeline.back(), &samples.back());
  }
  if (samples.empty()) return result;

  const int n = result.soak || !result.lost_server.empty()
                    ? static_cast<int>(samples.size())
                    : std::min<int>(settings.stable_windows, static_cast<int>(samples.size()));
  result.merged_windows = n;
  Sample merged;
  for (size_t i = samples.size() - static_cast<size_t>(n); i < samples.size(); ++i) merged.Merge(std::move(samples[i]));
  result.server = StagesBetween(counters[counters.size() - 1 - static_cast<size_t>(n)], counters.back());
  result.seconds = Seconds(merged.elapsed);
  result.client_cpu = (cpu.back() - cpu[cpu.size() - 1 - static_cast<size_t>(n)]) / std::max(1e-9, result.seconds);
  const auto& server_cpu_start = server_cpu[server_cpu.size() - 1 - static_cast<size_t>(n)];
  if (server_cpu_start && server_cpu.back() && merged.ok() > 0) {
    const double ok = static_cast<double>(merged.ok());
    result.server_cpu_us_per_request = (server_cpu.back()->own_s - server_cpu_start->own_s) * 1e6 / ok;
    result.hosts_cpu_us_per_request = ChildrenCpuBetween(*server_cpu_start, *server_cpu.back()) * 1e6 / ok;
  }
  // No answer of the measured turn was checked: what is there is the warm-up's.
  if (merged.checked_turn != turn) merged.ClearChecked();
  SetCallFigures(std::move(merged), settings.batch, &result);
  return result;
}

}  // namespace es::loadgen
