// bench-cache: what the response cache costs the router per request, in
// isolation (benchmarks/run_cache.sh measures it under load, where the
// shared machine's noise is larger than the cost).
//
//   build/bin/bench-cache --benchmark_min_time=0.3
//
// Key: the SHA-256 digest of one mlp request (an image, 3,136 bytes).
// Miss: a key, a lookup that misses and the insert of the answer (10 FP32
// probabilities), into a cache already holding `range` entries. Hit: a key
// and a lookup that finds it (the answer copied out).
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "server/core/response_cache.h"

namespace {

struct Mlp {
  es::ModelConfig model;
  std::vector<float> image = std::vector<float>(784, 0.5f);
  es::InferRequest request;
  Mlp() {
    model.name = "mlp";
    model.platform = "torchscript";
    model.max_batch_size = 64;
    model.inputs = {{"input", es::DataType::kFp32, {1, 28, 28}}};
    es::InferInput in;
    in.spec = &model.inputs[0];
    in.datatype = es::DataType::kFp32;
    in.shape = {1, 1, 28, 28};
    in.data = reinterpret_cast<const uint8_t*>(image.data());
    in.bytes = image.size() * sizeof(float);
    request.model = &model;
    request.inputs.push_back(in);
  }
  // A new image each call (the first pixel counts).
  void Next() { image[0] += 1.0f; }
};

std::vector<es::InferOutput> Answer() {
  return {es::InferOutput{"probabilities", es::DataType::kFp32, {1, 10}, std::string(40, '\1')}};
}

void BM_Key(benchmark::State& state) {
  Mlp mlp;
  for (auto _ : state) benchmark::DoNotOptimize(es::ResponseCache::KeyOf(mlp.model, 1, mlp.request));
}
BENCHMARK(BM_Key);

void BM_Miss(benchmark::State& state) {
  Mlp mlp;
  es::ResponseCache cache(uint64_t{1} << 30);
  for (int64_t i = 0; i < state.range(0); ++i) {
    mlp.Next();
    cache.Insert(es::ResponseCache::KeyOf(mlp.model, 1, mlp.request), "mlp", 0, Answer());
  }
  const std::vector<es::InferOutput> answer = Answer();
  for (auto _ : state) {
    mlp.Next();
    const std::string key = es::ResponseCache::KeyOf(mlp.model, 1, mlp.request);
    uint64_t generation = 0;
    benchmark::DoNotOptimize(cache.Lookup(key, "mlp", &generation));
    cache.Insert(key, "mlp", generation, answer);
  }
}
BENCHMARK(BM_Miss)->Arg(0)->Arg(100000);

void BM_Hit(benchmark::State& state) {
  Mlp mlp;
  es::ResponseCache cache(uint64_t{1} << 30);
  cache.Insert(es::ResponseCache::KeyOf(mlp.model, 1, mlp.request), "mlp", 0, Answer());
  for (auto _ : state) {
    const std::string key = es::ResponseCache::KeyOf(mlp.model, 1, mlp.request);
    uint64_t generation = 0;
    benchmark::DoNotOptimize(cache.Lookup(key, "mlp", &generation));
  }
}
BENCHMARK(BM_Hit);

}  // namespace

BENCHMARK_MAIN();
