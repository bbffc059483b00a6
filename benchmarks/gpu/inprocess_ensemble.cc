// bench-gpu-inprocess: the in-process LibTorch baseline of the GPU check: an
// ensemble's members loaded with torch::jit::load onto one device, averaged
// in process, with the input copied in and the result copied back on every
// call, as a program using LibTorch directly would do it. No server, no IPC.
//
// For each batch size: `--threads` workers (each with a CUDA stream of its
// own, as the hosts' executors have) call back to back for `--seconds`;
// prints rows/s and the latency percentiles of one call, and the best batch.
// With --threads 1 the p50 is "the in-process forward" the server's batch-1
// latency is compared with. Runs on the CPU too (--device cpu), for rehearsal.
//
//   bench-gpu-inprocess --repo DIR --ensemble demo_ensemble [--device cuda:0]
//       [--batches 1,2,4,...,1024] [--threads 1] [--seconds 1] [--pinned] [--csv FILE]
//
// Exit 0 done, 1 failure, 2 usage error.
#include <torch/script.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/allocator.h"
#include "common/command_line.h"
#include "config/server_config.h"
#include "model_host/device_setup.h"
#include "torch_utils/blas_kernels.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  int64_t batch = 0;
  double rows_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  int64_t calls = 0;
};

struct Members {
  std::vector<torch::jit::Module> modules;
  std::vector<int64_t> sample_dims;  // the input's dims after the batch dim
};

Members LoadMembers(const std::map<std::string, es::ModelConfig>& models, const es::ModelConfig& ensemble,
                    const torch::Device& device) {
  Members members;
  for (const auto& member : ensemble.ensemble.members) {
    const es::ModelConfig& config = models.at(member.model);
    const std::string path = config.directory + "/" + std::to_string(config.LatestVersion()) + "/model.pt";
    torch::jit::Module module = torch::jit::load(path, device);
    module.eval();
    members.modules.push_back(std::move(module));
    members.sample_dims = config.inputs.at(0).dims;
  }
  return members;
}

// One call: input to the device, every member, mean, result back to the host.
torch::Tensor Forward(std::vector<torch::jit::Module>& modules, const torch::Tensor& host_input,
                      const torch::Device& device, bool non_blocking) {
  torch::Tensor x = host_input.to(device, host_input.scalar_type(), non_blocking);
  std::vector<torch::Tensor> outs;
  outs.reserve(modules.size());
  for (auto& m : modules) outs.push_back(m.forward({x}).toTensor());
  return torch::stack(outs).mean(0).to(torch::kCPU);  // synchronous: waits for the stream
}

Result MeasureBatch(Members& members, const torch::Device& device, int64_t batch, int threads,
                    double seconds, bool pinned) {
  std::vector<int64_t> shape{batch};
  shape.insert(shape.end(), members.sample_dims.begin(), members.sample_dims.end());
  std::atomic<bool> stop{false};
  std::atomic<bool> go{false};
  std::mutex mutex;
  std::vector<double> latencies;
  std::atomic<int64_t> calls{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      es::ExecutorDeviceScope scope(device.str());  // own stream on a GPU
      c10::InferenceMode guard;
      torch::Tensor input = torch::rand(shape);
      if (pinned && device.is_cuda()) input = input.pin_memory();
      for (int i = 0; i < 3; ++i) Forward(members.modules, input, device, pinned);  // warm-up at this size
      std::vector<double> mine;
      while (!go.load()) std::this_thread::yield();
      while (!stop.load(std::memory_order_relaxed)) {
        const auto start = Clock::now();
        Forward(members.modules, input, device, pinned);
        mine.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
      calls.fetch_add(static_cast<int64_t>(mine.size()));
      std::lock_guard<std::mutex> lock(mutex);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // workers warm up
  go = true;
  const auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& w : workers) w.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(latencies.begin(), latencies.end());
  Result r;
  r.batch = batch;
  r.calls = calls.load();
  r.rows_per_s = static_cast<double>(r.calls * batch) / elapsed;
  if (!latencies.empty()) {
    r.p50_us = latencies[latencies.size() / 2];
    r.p99_us = latencies[std::min(latencies.size() - 1, latencies.size() * 99 / 100)];
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  es::ConfigureAllocator();  // keeps freed tensor memory (allocator.h)
  es::UseTheCpusBlasKernels(argv);
  CLI::App app{"bench-gpu-inprocess: an ensemble's members averaged in process with LibTorch, by batch size"};
  std::string repo, ensemble_name = "demo_ensemble", device_name = "cuda:0", csv;
  std::vector<int64_t> batches{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  int threads = 1;
  double seconds = 1;
  bool pinned = false;
  app.add_option("--repo", repo, "model repository")->required();
  app.add_option("--ensemble", ensemble_name, "the ensemble of the repository (default demo_ensemble)");
  app.add_option("--device", device_name, "cuda:N or cpu (default cuda:0)");
  app.add_option("--batches", batches, "batch sizes (default 1,2,4,...,1024)")->delimiter(',');
  app.add_option("--threads", threads, "callers, each with its own stream (default 1)")->check(CLI::Range(1, 64));
  app.add_option("--seconds", seconds, "measured time per batch size (default 1)")->check(CLI::Range(0.1, 600.0));
  app.add_flag("--pinned", pinned, "input in pinned host memory, copied with non_blocking (default pageable)");
  app.add_option("--csv", csv, "also write the rows to this CSV file");
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "bench-gpu-inprocess")) {
    return *exit_code;
  }
  auto models = es::LoadRepository(repo);
  if (!models.ok()) {
    std::fprintf(stderr, "bench-gpu-inprocess: %s\n", models.status().message().c_str());
    return 1;
  }
  auto it = models->find(ensemble_name);
  if (it == models->end() || !it->second.is_ensemble()) {
    std::fprintf(stderr, "bench-gpu-inprocess: no ensemble '%s' in %s\n", ensemble_name.c_str(), repo.c_str());
    return 1;
  }
  std::vector<Result> results;
  try {
    const torch::Device device(device_name);
    if (device.is_cuda() && !torch::cuda::is_available()) {
      std::fprintf(stderr, "bench-gpu-inprocess: %s requested but this LibTorch sees no GPU\n",
                   device_name.c_str());
      return 1;
    }
    // One intra-op thread and one BLAS thread per worker, as a host has (on
    // CPU the BLAS pool would otherwise spread each product over every core).
    torch::set_num_threads(1);
    const bool openblas = es::LimitBlasThreads(1) > 0;
    Members members = LoadMembers(*models, it->second, device);
    std::printf("bench-gpu-inprocess: %s (%zu members) on %s, %d thread(s) of 1 intra-op thread and %s, %s input\n",
                ensemble_name.c_str(), members.modules.size(), device_name.c_str(), threads,
                openblas ? "1 BLAS thread (OpenBLAS)" : "no OpenBLAS", pinned ? "pinned" : "pageable");
    std::printf("%8s %14s %12s %12s %10s\n", "batch", "rows/s", "p50_us", "p99_us", "calls");
    for (int64_t batch : batches) {
      results.push_back(MeasureBatch(members, device, batch, threads, seconds, pinned));
      const Result& r = results.back();
      std::printf("%8lld %14.0f %12.1f %12.1f %10lld\n", static_cast<long long>(r.batch), r.rows_per_s, r.p50_us,
                  r.p99_us, static_cast<long long>(r.calls));
      std::fflush(stdout);
    }
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "bench-gpu-inprocess: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-gpu-inprocess: %s\n", e.what());
    return 1;
  }
  const auto best = std::max_element(results.begin(), results.end(),
                                     [](const Result& a, const Result& b) { return a.rows_per_s < b.rows_per_s; });
  if (best != results.end()) {
    std::printf("best: %.0f rows/s at batch %lld\n", best->rows_per_s, static_cast<long long>(best->batch));
  }
  if (!csv.empty()) {
    std::ofstream out(csv);
    out << "batch,threads,rows_per_s,p50_us,p99_us,calls\n";
    for (const Result& r : results) {
      out << r.batch << "," << threads << "," << r.rows_per_s << "," << r.p50_us << "," << r.p99_us << ","
          << r.calls << "\n";
    }
  }
  return 0;
}
