// bench-metrics: what /metrics costs the request path, in isolation.
//
//   build/bin/bench-metrics --benchmark_min_time=0.3
//
// Finished*: one ModelInfer's recording (request counter, rows, pending, six
// histograms; the ensemble variant adds combine and 3 disagreement rows), on
// 1 and 2 threads hammering the same model (the worst case: every thread on
// the same cache lines). Collect: one scrape of the request families for the
// 4 demo models (runs on the exposer's thread, not the request path).
#include <benchmark/benchmark.h>

#include <map>

#include "server/kserve/request_metrics.h"

namespace {

std::map<std::string, es::ModelConfig> DemoModels() {
  std::map<std::string, es::ModelConfig> models;
  for (const char* name : {"mlp", "wide_mlp", "cnn"}) {
    es::ModelConfig m;
    m.name = name;
    m.platform = "torchscript";
    m.versions = {1};
    models[name] = m;
  }
  es::ModelConfig e;
  e.name = "demo_ensemble";
  e.platform = "ensemble";
  models[e.name] = e;
  return models;
}

es::RequestMetrics& Metrics() {
  static es::RequestMetrics metrics(DemoModels());
  return metrics;
}

es::InferResponse Response(bool ensemble) {
  es::InferResponse r;
  r.stages = {20000, 40000, 150000, ensemble ? 15000u : 0u, 4};
  if (ensemble) r.disagreement = {0.f, 1.f / 3, 2.f / 3};
  return r;
}

void BM_FinishedModel(benchmark::State& state) {
  es::ModelMetrics* m = Metrics().Find("mlp");
  const es::InferResponse response = Response(false);
  for (auto _ : state) {
    m->Started();
    m->Finished(0, 300000, response, 1);
  }
}
BENCHMARK(BM_FinishedModel)->Threads(1)->Threads(2);

void BM_FinishedEnsemble(benchmark::State& state) {
  es::ModelMetrics* m = Metrics().Find("demo_ensemble");
  const es::InferResponse response = Response(true);
  for (auto _ : state) {
    m->Started();
    m->Finished(0, 900000, response, 3);
  }
}
BENCHMARK(BM_FinishedEnsemble)->Threads(1)->Threads(2);

void BM_Collect(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(Metrics().Collect());
}
BENCHMARK(BM_Collect);

}  // namespace

BENCHMARK_MAIN();
