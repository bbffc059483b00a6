// bench-serving-latency: what one request costs end to end through the
// server, next to the in-process LibTorch floor measured in the same run.
//
//   bench-serving-latency --server 127.0.0.1:8001 --repo build/demo_repo
//       [--model demo_ensemble] [--batch 1] [--requests 2000]
//
// Floor: the model's members loaded in this process with ModelRunner (one
// thread, as each host has) run one after another on the same input, plus the
// mean; the server runs the members in parallel on their hosts, so on a
// machine with a core per host the ratio can be below one member-sum.
// Reports p50/p90/p99 of both and their ratio. Concurrency 1: one request in
// flight, measured on the client with a steady clock.
#include <grpcpp/grpcpp.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "common/allocator.h"
#include "common/command_line.h"
#include "config/server_config.h"
#include "model_host/model_runner.h"
#include "proto/grpc_service.grpc.pb.h"
#include "torch_utils/blas_kernels.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Percentiles {
  double p50, p90, p99;
};

Percentiles Summarise(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))]; };
  return {at(0.50), at(0.90), at(0.99)};
}

std::vector<double> InProcess(const std::vector<es::ModelConfig>& members, const std::vector<float>& input,
                              int64_t batch, int requests) {
  std::vector<std::unique_ptr<es::ModelRunner>> runners;
  for (const auto& m : members) {
    auto r = es::ModelRunner::Load(m, m.LatestVersion(), "cpu");
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().message().c_str());
      std::exit(1);
    }
    runners.push_back(std::move(r).value());
  }
  es::TensorView view{es::DataType::kFp32, {batch, 1, 28, 28}, const_cast<float*>(input.data()),
                      input.size() * sizeof(float)};
  std::vector<std::vector<float>> outs(members.size(), std::vector<float>(static_cast<size_t>(batch) * 10));
  std::vector<float> mean(static_cast<size_t>(batch) * 10);
  std::vector<double> us;
  for (int i = 0; i < requests; ++i) {
    const auto start = Clock::now();
    for (size_t m = 0; m < runners.size(); ++m) {
      es::OutputAllocator alloc = [&](size_t, es::DataType, const std::vector<int64_t>&, size_t bytes,
                                      es::Status*) -> void* { return outs[m].data(); };
      (void)runners[m]->Run({view}, alloc);
    }
    for (size_t k = 0; k < mean.size(); ++k) {
      float s = 0;
      for (const auto& o : outs) s += o[k];
      mean[k] = s / static_cast<float>(outs.size());
    }
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  return us;
}

std::vector<double> ThroughServer(const std::string& server, const std::string& model,
                                  const std::vector<float>& input, int64_t batch, int requests) {
  auto channel = grpc::CreateChannel(server, grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* in = request.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  for (int64_t d : {batch, int64_t{1}, int64_t{28}, int64_t{28}}) in->add_shape(d);
  request.add_raw_input_contents(reinterpret_cast<const char*>(input.data()), input.size() * sizeof(float));
  std::vector<double> us;
  for (int i = 0; i < requests; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    inference::ModelInferResponse response;
    const auto start = Clock::now();
    grpc::Status s = stub->ModelInfer(&ctx, request, &response);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    if (!s.ok()) {
      std::fprintf(stderr, "ModelInfer failed: %s\n", s.error_message().c_str());
      std::exit(1);
    }
  }
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  es::ConfigureAllocator();  // keeps freed tensor memory (allocator.h)
  es::UseTheCpusBlasKernels(argv);
  CLI::App app{"bench-serving-latency: end-to-end latency at concurrency 1 vs in-process LibTorch"};
  std::string server = "127.0.0.1:8001", repo = "build/demo_repo", model = "demo_ensemble";
  int64_t batch = 1;
  int requests = 2000;
  app.add_option("--server", server, "HOST:PORT of a running ensemble-server");
  app.add_option("--repo", repo, "the model repository the server serves");
  app.add_option("--model", model, "model or ensemble to call");
  app.add_option("--batch", batch, "rows per request")->check(CLI::Range(1, 4096));
  app.add_option("--requests", requests, "measured requests (after 200 warm-up)")->check(CLI::Range(10, 10000000));
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "bench-serving-latency")) {
    return *exit_code;
  }
  auto models = es::LoadRepository(repo);
  if (!models.ok()) {
    std::fprintf(stderr, "%s\n", models.status().message().c_str());
    return 1;
  }
  auto it = models->find(model);
  if (it == models->end()) {
    std::fprintf(stderr, "no model '%s' in %s\n", model.c_str(), repo.c_str());
    return 1;
  }
  std::vector<es::ModelConfig> members;
  if (it->second.is_ensemble()) {
    for (const auto& m : it->second.ensemble.members) members.push_back(models->at(m.model));
  } else {
    members.push_back(it->second);
  }
  // The floor computes as a host does: one intra-op thread, one BLAS thread,
  // on one core (CPU 0).
  torch::set_num_threads(1);
  const bool openblas = es::LimitBlasThreads(1) > 0;
  es::PinThisThread(0);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(0, 1);
  std::vector<float> input(static_cast<size_t>(batch) * 784);
  for (float& v : input) v = dist(rng);

  InProcess(members, input, batch, 200);  // warm-up
  const Percentiles local = Summarise(InProcess(members, input, batch, requests));
  ThroughServer(server, model, input, batch, 200);  // warm-up
  const Percentiles remote = Summarise(ThroughServer(server, model, input, batch, requests));

  std::printf("model %s, batch %lld, %d requests at concurrency 1; in-process floor on CPU 0 with 1 intra-op "
              "thread and %s\n",
              model.c_str(), static_cast<long long>(batch), requests,
              openblas ? "1 BLAS thread (OpenBLAS)" : "no OpenBLAS");
  std::printf("%-34s %10s %10s %10s\n", "", "p50 us", "p90 us", "p99 us");
  std::printf("%-34s %10.1f %10.1f %10.1f\n", "in-process members, sequential", local.p50, local.p90, local.p99);
  std::printf("%-34s %10.1f %10.1f %10.1f\n", "through ensemble-server (gRPC)", remote.p50, remote.p90, remote.p99);
  std::printf("%-34s %10.2f %10.2f %10.2f\n", "ratio server / in-process", remote.p50 / local.p50,
              remote.p90 / local.p90, remote.p99 / local.p99);
  return 0;
}
