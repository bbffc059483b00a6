// bench-shm-latency: a large tensor through a registered system shared-memory
// region vs inside the gRPC message, in the same run.
//
//   bench-shm-latency --server 127.0.0.1:8001 --model echo16m --elements 4194304
//
// Against a model with FP32 input 'input' [1, elements] and one output
// 'output' no larger (benchmarks/make_shm_models.py: echo16m returns its
// input, so the tensor crosses both ways; sum16m returns one float, so only
// the input is large), one request at a time, the modes interleaved call by
// call so that they share the machine's state:
//   message      input in raw_input_contents, output in raw_output_contents
//   shm-in       input from a registered region, output in the message
//   shm-in-out   input from one region, output written into another
// Each call first puts the input in place, one copy either way (a client
// with fresh data per call): into the region, or into the request message;
// the output is read in place from the region, as the message path's is
// from the parsed response.
// The first call of each mode is checked: every mode gives the same output
// bytes (and an echo model's are its input).
// Prints median, p90, p99 and mean latency per mode and the ratios of the
// message path's median and p99 to each shared-memory mode's (with --modes:
// of the first mode given).
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "clients/shm_region.h"
#include "common/command_line.h"
#include "proto/grpc_service.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Mode {
  std::string name;
  bool shm_input = false;
  bool shm_output = false;
  inference::ModelInferRequest request;
  std::vector<double> micros;
};

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::max(0.0, std::ceil(p / 100.0 * static_cast<double>(v.size())) - 1));
  return v[std::min(rank, v.size() - 1)];
}

// Makes one call of a mode and checks its output when asked: every mode must
// give the first checked call's bytes (and an echo model its input).
struct Caller {
  inference::GRPCInferenceService::Stub& stub;
  es::client::ShmRegion& shm;
  const std::vector<float>& input;
  size_t bytes;
  std::string reference;  // the first checked call's output bytes
  int failures = 0;

  // The call's latency in microseconds.
  double Call(Mode& m, bool check) {
    const auto start = Clock::now();
    // Fresh data for every call, one copy either way: into the region, or
    // into the request message.
    if (m.shm_input) {
      std::memcpy(shm.data(), input.data(), bytes);
    } else {
      m.request.mutable_raw_input_contents(0)->assign(reinterpret_cast<const char*>(input.data()), bytes);
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    inference::ModelInferResponse resp;
    const grpc::Status s = stub.ModelInfer(&ctx, m.request, &resp);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", m.name.c_str(), s.error_message().c_str());
      ++failures;
      return us;
    }
    if (check) {
      std::string out;
      if (m.shm_output && resp.outputs_size() == 1 && resp.outputs(0).parameters().count("shared_memory_byte_size")) {
        const int64_t n = resp.outputs(0).parameters().at("shared_memory_byte_size").int64_param();
        if (n >= 0 && static_cast<size_t>(n) <= bytes) out.assign(reinterpret_cast<const char*>(shm.data() + bytes), n);
      } else if (!m.shm_output && resp.raw_output_contents_size() == 1) {
        out = resp.raw_output_contents(0);
      }
      if (reference.empty()) reference = out;
      // An echo model's output is its input.
      const bool echo_wrong = out.size() == bytes && std::memcmp(out.data(), input.data(), bytes) != 0;
      if (out.empty() || out != reference || echo_wrong) {
        std::fprintf(stderr, "%s: the output (%zu bytes) differs from the first mode's or the input\n", m.name.c_str(),
                     out.size());
        ++failures;
      }
    }
    return us;
  }
};

// The modes asked for (`only`; all when empty), each with its request made
// once: the input in the message or named by the region, the output asked
// into the region or not.
std::optional<std::vector<Mode>> MakeModes(const std::vector<std::string>& only, const std::string& model,
                                           int64_t elements, const std::vector<float>& input) {
  const size_t bytes = static_cast<size_t>(elements) * sizeof(float);
  std::vector<Mode> modes = {
      {"message", false, false, {}, {}}, {"shm-in", true, false, {}, {}}, {"shm-in-out", true, true, {}, {}}};
  if (!only.empty()) {
    std::erase_if(modes, [&](const Mode& m) { return std::find(only.begin(), only.end(), m.name) == only.end(); });
    if (modes.empty()) return std::nullopt;
  }
  for (Mode& m : modes) {
    m.request.set_model_name(model);
    auto* in = m.request.add_inputs();
    in->set_name("input");
    in->set_datatype("FP32");
    in->add_shape(1);
    in->add_shape(elements);
    if (m.shm_input) {
      es::client::SetShmParameters(in, "bench_in", bytes);
    } else {
      m.request.add_raw_input_contents(reinterpret_cast<const char*>(input.data()), bytes);
    }
    if (m.shm_output) {
      auto* out = m.request.add_outputs();
      out->set_name("output");
      es::client::SetShmParameters(out, "bench_out", bytes);
    }
  }
  return modes;
}

// The figures per mode and their ratios to the first mode's.
void PrintTable(const std::vector<Mode>& modes, const std::string& model, int64_t elements, int iterations,
                int warmup) {
  const size_t bytes = static_cast<size_t>(elements) * sizeof(float);
  std::printf("tensor: FP32 [1, %lld] = %.1f MiB, model %s, %d calls per mode (after %d warm-up), interleaved\n",
              static_cast<long long>(elements), static_cast<double>(bytes) / (1 << 20), model.c_str(), iterations,
              warmup);
  std::printf("| mode | median ms | p90 ms | p99 ms | mean ms | median vs %s | p99 vs %s |\n", modes[0].name.c_str(),
              modes[0].name.c_str());
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  const double base_median = Percentile(modes[0].micros, 50);
  const double base_p99 = Percentile(modes[0].micros, 99);
  for (const Mode& m : modes) {
    double mean = 0;
    for (double v : m.micros) mean += v;
    mean /= static_cast<double>(m.micros.size());
    const double median = Percentile(m.micros, 50);
    const double p99 = Percentile(m.micros, 99);
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2fx | %.2fx |\n", m.name.c_str(), median / 1000,
                Percentile(m.micros, 90) / 1000, p99 / 1000, mean / 1000, base_median / median, base_p99 / p99);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench-shm-latency: a large tensor through system shared memory vs in the gRPC message"};
  std::string server;
  std::string model = "echo16m";
  int64_t elements = 4 << 20;  // FP32: 16 MiB
  int iterations = 30;
  int warmup = 3;
  app.add_option("--server", server, "ensemble-server address HOST:PORT")->required();
  app.add_option("--model", model,
                 "a model with FP32 input 'input' [1, elements] and one FP32 output 'output' of at most as many "
                 "bytes (benchmarks/make_shm_models.py: echo16m, sum16m)");
  app.add_option("--elements", elements, "FP32 elements of the tensor (default 4194304 = 16 MiB)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 28));
  app.add_option("--iterations", iterations, "measured calls per mode")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", warmup, "unmeasured calls per mode first")->check(CLI::Range(0, 1000));
  std::vector<std::string> only;
  app.add_option("--modes", only, "only these modes (message, shm-in, shm-in-out); default all")->delimiter(',');
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "bench-shm-latency")) return *exit_code;

  const size_t bytes = static_cast<size_t>(elements) * sizeof(float);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), args);
  auto stub = inference::GRPCInferenceService::NewStub(channel);

  auto region = es::client::ShmRegion::Create(es::client::ShmRegion::UniqueKey("bench_shm"), 2 * bytes);
  if (!region.ok()) {
    std::fprintf(stderr, "creating the shared-memory object: %s\n", region.status().ToString().c_str());
    return 1;
  }
  es::client::ShmRegion& shm = **region;
  for (const auto& [name, offset] : {std::pair<const char*, size_t>{"bench_in", 0}, {"bench_out", bytes}}) {
    const grpc::Status s = es::client::RegisterShm(*stub, name, shm.key(), offset, bytes);
    if (!s.ok()) {
      std::fprintf(stderr, "registering %s: %s\n", name, s.error_message().c_str());
      return 1;
    }
  }

  std::vector<float> input(static_cast<size_t>(elements));
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : input) v = dist(gen);

  std::optional<std::vector<Mode>> made = MakeModes(only, model, elements, input);
  if (!made) {
    std::fprintf(stderr, "--modes: none of message, shm-in, shm-in-out\n");
    return 2;
  }
  std::vector<Mode>& modes = *made;

  Caller caller{*stub, shm, input, bytes, {}, 0};
  auto call = [&](Mode& m, bool check) { return caller.Call(m, check); };
  int& failures = caller.failures;

  for (int i = 0; i < warmup; ++i) {
    for (Mode& m : modes) call(m, i == 0);
  }
  if (warmup == 0) {
    for (Mode& m : modes) call(m, true);
  }
  for (int i = 0; i < iterations && failures == 0; ++i) {
    for (Mode& m : modes) m.micros.push_back(call(m, false));
  }
  for (const char* name : {"bench_in", "bench_out"}) (void)es::client::UnregisterShm(*stub, name);
  if (failures > 0) return 1;

  PrintTable(modes, model, elements, iterations, warmup);
  return 0;
}
