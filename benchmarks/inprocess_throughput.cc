// bench-inprocess: the compute limit of a model on this machine, measured in
// one process with LibTorch directly (no server): `--threads` workers run
// forward back to back on the same ModelRunner at each batch size; prints
// rows/s per batch size and the best. The baseline for "the server reaches
// N% of in-process throughput", so each worker computes as a host does: one
// intra-op thread, one BLAS thread (OpenBLAS's own pool is limited to the
// calling thread), pinned to a core of its own (worker k on CPU k). The
// cores used are printed.
//
//   bench-inprocess --repo DIR --model mlp [--threads 2] [--batches 1,8,16,32,64] [--seconds 2]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "common/allocator.h"
#include "common/command_line.h"
#include "config/server_config.h"
#include "model_host/model_runner.h"
#include "torch_utils/blas_kernels.h"

int main(int argc, char** argv) {
  es::ConfigureAllocator();  // keeps freed tensor memory (allocator.h)
  es::UseTheCpusBlasKernels(argv);
  CLI::App app{"bench-inprocess: in-process LibTorch throughput of one model by batch size"};
  std::string repo, model;
  int threads = 2;
  double seconds = 2;
  std::vector<int64_t> batches{1, 8, 16, 32, 64};
  app.add_option("--repo", repo, "model repository")->required();
  app.add_option("--model", model, "a torchscript model of the repository")->required();
  app.add_option("--threads", threads, "worker threads, one intra-op thread each")->check(CLI::Range(1, 64));
  app.add_option("--batches", batches, "batch sizes")->delimiter(',');
  app.add_option("--seconds", seconds, "measured time per batch size")->check(CLI::Range(0.1, 600.0));
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "bench-inprocess")) {
    return *exit_code;
  }
  auto models = es::LoadRepository(repo);
  if (!models.ok()) {
    std::fprintf(stderr, "bench-inprocess: %s\n", models.status().message().c_str());
    return 1;
  }
  auto it = models->find(model);
  if (it == models->end() || it->second.is_ensemble()) {
    std::fprintf(stderr, "bench-inprocess: no torchscript model '%s' in %s\n", model.c_str(), repo.c_str());
    return 1;
  }
  const es::ModelConfig& config = it->second;
  torch::set_num_threads(1);
  const int blas_threads = es::LimitBlasThreads(1);
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  std::string cores;
  for (int t = 0; t < threads; ++t) cores += (t ? "," : "") + std::to_string(t % std::max(cpus, 1));
  auto runner = es::ModelRunner::Load(config, config.LatestVersion(), "cpu");
  if (!runner.ok()) {
    std::fprintf(stderr, "bench-inprocess: %s\n", runner.status().message().c_str());
    return 1;
  }
  int64_t sample = 1;
  for (int64_t d : config.inputs[0].dims) sample *= d;
  double best = 0;
  int64_t best_batch = 0;
  std::printf("model %s, %d worker(s) on CPU(s) %s, each 1 intra-op thread and %s\n%8s %14s\n", model.c_str(),
              threads, cores.c_str(), blas_threads > 0 ? "1 BLAS thread (OpenBLAS)" : "no OpenBLAS", "batch",
              "rows/s");
  for (int64_t batch : batches) {
    std::atomic<int64_t> rows{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        es::PinThisThread(t % std::max(cpus, 1));
        // Uniform [0, 1) like ensemble-loadgen's requests: a constant input
        // runs the demo cnn about 1.4 times faster than random data does.
        std::vector<float> input(static_cast<size_t>(batch * sample));
        std::mt19937 rng(static_cast<uint32_t>(batch));
        std::uniform_real_distribution<float> unit(0.0f, 1.0f);
        for (float& x : input) x = unit(rng);
        std::vector<char> output(1 << 20);
        std::vector<int64_t> shape{batch};
        shape.insert(shape.end(), config.inputs[0].dims.begin(), config.inputs[0].dims.end());
        es::TensorView view{es::DataType::kFp32, shape, input.data(), input.size() * sizeof(float)};
        es::OutputAllocator alloc = [&](size_t, es::DataType, const std::vector<int64_t>&, size_t bytes,
                                        es::Status*) -> void* {
          if (bytes > output.size()) output.resize(bytes);
          return output.data();
        };
        (void)(*runner)->Run({view}, alloc);  // warm-up at this size
        while (!stop.load(std::memory_order_relaxed)) {
          (void)(*runner)->Run({view}, alloc);
          rows.fetch_add(batch, std::memory_order_relaxed);
        }
      });
    }
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (auto& w : workers) w.join();
    const double rate = static_cast<double>(rows.load()) /
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%8lld %14.0f\n", static_cast<long long>(batch), rate);
    if (rate > best) {
      best = rate;
      best_batch = batch;
    }
  }
  std::printf("best: %.0f rows/s at batch %lld\n", best, static_cast<long long>(best_batch));
  return 0;
}
