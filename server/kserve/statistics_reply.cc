#include "server/kserve/statistics_reply.h"

namespace es {
namespace {

void FillOne(const std::string& name, int64_t version, const ModelCounters& c,
             inference::ModelStatisticsResponse* response) {
  auto* s = response->add_model_stats();
  s->set_name(name);
  s->set_version(std::to_string(version));
  s->set_last_inference(c.last_inference_ms.load());
  s->set_inference_count(c.inference_count.load());
  s->set_execution_count(c.execution_count.load());
  auto* stats = s->mutable_inference_stats();
  stats->mutable_success()->set_count(c.success_count.load());
  stats->mutable_success()->set_ns(c.success_ns.load());
  stats->mutable_fail()->set_count(c.fail_count.load());
  stats->mutable_fail()->set_ns(c.fail_ns.load());
  stats->mutable_queue()->set_count(c.success_count.load());
  stats->mutable_queue()->set_ns(c.queue_ns.load());
  // compute_infer: the hosts' forward time, per execution; the rest of
  // `success` is validation, copies, IPC, queueing and (ensembles) combine.
  stats->mutable_compute_infer()->set_count(c.execution_count.load());
  stats->mutable_compute_infer()->set_ns(c.compute_ns.load());
  stats->mutable_cache_hit()->set_count(c.cache_hit_count.load());
  stats->mutable_cache_hit()->set_ns(c.cache_hit_ns.load());
  stats->mutable_cache_miss()->set_count(c.cache_miss_count.load());
  stats->mutable_cache_miss()->set_ns(c.cache_miss_ns.load());
  for (int64_t b = 1; b <= c.max_batch; ++b) {
    const uint64_t n = c.batches[b].count.load();
    if (n == 0) continue;
    auto* batch = s->add_batch_stats();
    batch->set_batch_size(static_cast<uint64_t>(b));
    batch->mutable_compute_infer()->set_count(n);
    batch->mutable_compute_infer()->set_ns(c.batches[b].compute_ns.load());
  }
}

}  // namespace

bool FillModelStatistics(const ModelStatistics& stats, const std::string& model, const std::string& version,
                         inference::ModelStatisticsResponse* response) {
  return stats.Visit(model, version, [response](const std::string& name, int64_t v, const ModelCounters& counters) {
    FillOne(name, v, counters, response);
  });
}

}  // namespace es
