// bench-throughput: closed-loop ModelInfer throughput against a running
// ensemble-server, for comparing two server configurations run by a script
// (benchmarks/run_metrics_overhead.sh: metrics on vs --no-metrics).
//
//   bench-throughput --server 127.0.0.1:8001 [--model mlp] [--batch 1]
//       [--concurrency 8] [--seconds 10] [--warmup 2]
//
// One thread drives `concurrency` calls at once on gRPC's async API (a
// completion queue): each answer immediately starts the next call, so the
// server is always offered exactly `concurrency` requests. Requests finishing
// during the warm-up are not counted. Prints one line:
//   requests_per_s=R rows_per_s=N ok=K errors=E seconds=S total_ok=T
// (total_ok: every successful call of the run, warm-up included, for a
// caller that divides the server's CPU time by it).
// and exits 1 if any call failed.
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/grpc_process.h"
#include "proto/grpc_service.grpc.pb.h"
#include "common/command_line.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Call {
  grpc::ClientContext ctx;
  inference::ModelInferResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<inference::ModelInferResponse>> reader;
};

inference::ModelInferRequest MakeRequest(const std::string& model, int64_t batch) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  for (int64_t d : {batch, int64_t{1}, int64_t{28}, int64_t{28}}) input->add_shape(d);
  std::vector<float> pixels(static_cast<size_t>(batch) * 28 * 28);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(0.f, 1.f);
  for (float& p : pixels) p = uniform(rng);
  request.add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(pixels.data()), pixels.size() * sizeof(float)));
  return request;
}

}  // namespace

int main(int argc, char** argv) {
  es::TuneGrpcProcess();
  CLI::App app{"bench-throughput: closed-loop ModelInfer throughput against a running ensemble-server"};
  std::string server, model = "mlp";
  int64_t batch = 1;
  int concurrency = 8;
  double seconds = 10, warmup = 2;
  app.add_option("--server", server, "HOST:PORT of ensemble-server")->required();
  app.add_option("--model", model, "model to call (FP32 input [batch,1,28,28])");
  app.add_option("--batch", batch, "rows per request")->check(CLI::Range(1, 4096));
  app.add_option("--concurrency", concurrency, "calls in flight at all times")->check(CLI::Range(1, 4096));
  app.add_option("--seconds", seconds, "measured time")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "time before measuring")->check(CLI::NonNegativeNumber);
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "bench-throughput")) {
    return *exit_code;
  }

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    std::fprintf(stderr, "bench-throughput: cannot connect to %s\n", server.c_str());
    return 1;
  }
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  const inference::ModelInferRequest request = MakeRequest(model, batch);
  grpc::CompletionQueue cq;

  auto start_call = [&] {
    auto* call = new Call();
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    call->reader = stub->PrepareAsyncModelInfer(&call->ctx, request, &cq);
    call->reader->StartCall();
    call->reader->Finish(&call->response, &call->status, call);
  };

  const auto begin = Clock::now();
  const auto measure_from = begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warmup));
  const auto measure_to =
      measure_from + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int i = 0; i < concurrency; ++i) start_call();
  int64_t ok = 0, errors = 0, total_ok = 0, in_flight = concurrency;
  std::string first_error;
  void* tag = nullptr;
  bool got = false;
  while (in_flight > 0 && cq.Next(&tag, &got)) {
    std::unique_ptr<Call> call(static_cast<Call*>(tag));
    --in_flight;
    if (got && call->status.ok()) ++total_ok;
    const auto now = Clock::now();
    if (now >= measure_from && now < measure_to) {
      if (got && call->status.ok()) {
        ++ok;
      } else {
        ++errors;
        if (first_error.empty()) first_error = call->status.error_message();
      }
    }
    if (now < measure_to) {
      start_call();
      ++in_flight;
    }
  }
  cq.Shutdown();
  while (cq.Next(&tag, &got)) delete static_cast<Call*>(tag);

  std::printf("requests_per_s=%.1f rows_per_s=%.1f ok=%lld errors=%lld seconds=%.1f total_ok=%lld\n",
              static_cast<double>(ok) / seconds, static_cast<double>(ok * batch) / seconds, static_cast<long long>(ok),
              static_cast<long long>(errors), seconds, static_cast<long long>(total_ok));
  if (errors > 0) std::fprintf(stderr, "bench-throughput: %lld call(s) failed, first: %s\n",
                               static_cast<long long>(errors), first_error.c_str());
  return errors > 0 ? 1 : 0;
}
