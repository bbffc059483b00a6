// Acceptance of the response cache (docs/configuration.md, "Response
// cache") through the real server and hosts: the demo repository with
// `response_cache: {enable: true}` on mlp and a server cache of 10 MB.
//
//  - The same request twice: the same answer, the second from the cache
//    (mlp's statistics: one miss, one hit; one execution on its host).
//  - An ensemble with mlp as a member reuses the answer of a direct call
//    of mlp on the same image (a member hit), and its answer equals the
//    ensemble's computed without the cache on that image.
//  - Another image is a miss; /metrics counts the hits and misses.
//  - An image in a client's shared-memory region is keyed by the bytes the
//    host computed on: the same image inline is a hit, and the region
//    rewritten with another image is a miss answered for that image.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "clients/shm_region.h"

#include "tests/integration/kserve_helpers.h"
#include "tests/integration/metrics/metrics_support.h"
#include "tests/integration/server_process.h"

namespace es::it {
namespace {

using metrics_test::Scrape;
using std::chrono::seconds;

struct CacheFigures {
  uint64_t hits = 0, misses = 0, executions = 0, successes = 0;
};

CacheFigures Figures(Stub& stub, const std::string& model) {
  const inference::ModelStatistics s = ModelStats(stub, model);
  return {s.inference_stats().cache_hit().count(), s.inference_stats().cache_miss().count(), s.execution_count(),
          s.inference_stats().success().count()};
}

std::vector<float> ProbabilitiesOf(const InferResult& result) {
  EXPECT_TRUE(result.status.ok()) << Describe(result.status);
  Fp32Tensor out;
  EXPECT_TRUE(GetFp32Output(result.response, "probabilities", &out));
  return out.values;
}

std::vector<float> Probabilities(Stub& stub, const std::string& model, const std::vector<float>& image) {
  return ProbabilitiesOf(Infer(stub, ImageRequest(model, image)));
}

// A server on a copy of the demo repository in `repo`, mlp's cache on, a
// server cache of 10 MB; null (and a failure) when it does not start.
std::unique_ptr<ServerProcess> StartWithMlpCached(const TempDir& repo) {
  std::string error;
  EXPECT_TRUE(CopyDemoRepository(repo.path(), &error)) << error;
  const fs::path mlp_config = repo.path() / "mlp" / "config.yaml";
  EXPECT_TRUE(WriteTextFile(mlp_config, ReadTextFile(mlp_config) + "response_cache: {enable: true}\n"));
  ServerProcess::Options options;
  options.repository = repo.path().string();
  options.extra_config = "response_cache: {size_bytes: 10000000}\n";
  auto server = ServerProcess::Start(options);
  EXPECT_TRUE(server) << ServerProcess::last_start_error();
  return server;
}

TEST(ResponseCacheTest, RepeatedRequestsAndEnsembleMembersAreAnsweredFromTheCache) {
  WatchdogScope watchdog(seconds(240), "ResponseCacheTest");
  TempDir repo;
  auto server = StartWithMlpCached(repo);
  ASSERT_TRUE(server);
  auto stub = server->Stub();

  // The ensemble on image B before any cache entry for it: its own answer.
  const std::vector<float> image_a = RandomImages(1, 7), image_b = RandomImages(1, 8);
  const std::vector<float> ensemble_fresh = Probabilities(*stub, "demo_ensemble", image_b);
  const CacheFigures start = Figures(*stub, "mlp");
  EXPECT_EQ(start.misses, 1u) << "the ensemble's member call of mlp looked first";
  EXPECT_EQ(start.hits, 0u);

  const std::vector<float> first = Probabilities(*stub, "mlp", image_a);
  const std::vector<float> second = Probabilities(*stub, "mlp", image_a);
  EXPECT_EQ(first, second);
  const CacheFigures twice = Figures(*stub, "mlp");
  EXPECT_EQ(twice.misses - start.misses, 1u);
  EXPECT_EQ(twice.hits - start.hits, 1u);
  EXPECT_EQ(twice.executions - start.executions, 1u) << "the second answer never reached the host";
  EXPECT_EQ(twice.successes - start.successes, 2u) << "a hit is a successful request all the same";

  // The ensemble on image B again: its mlp member answered from the cache,
  // and the same answer as before.
  const std::vector<float> ensemble_cached = Probabilities(*stub, "demo_ensemble", image_b);
  EXPECT_EQ(ensemble_cached, ensemble_fresh);
  const CacheFigures member = Figures(*stub, "mlp");
  EXPECT_EQ(member.hits - twice.hits, 1u);
  EXPECT_EQ(member.executions, twice.executions);
  EXPECT_EQ(Figures(*stub, "cnn").hits, 0u) << "cnn does not enable the cache";

  // A direct call of mlp on image B reuses the member call's answer.
  Probabilities(*stub, "mlp", image_b);
  EXPECT_EQ(Figures(*stub, "mlp").hits - member.hits, 1u);
  // Another image: a miss.
  Probabilities(*stub, "mlp", RandomImages(1, 9));
  const CacheFigures last = Figures(*stub, "mlp");
  EXPECT_EQ(last.misses - member.misses, 1u);

  std::optional<Scrape> scrape = Scrape::From(server->metrics_address());
  ASSERT_TRUE(scrape.has_value());
  EXPECT_EQ(scrape->Value("ensemble_cache_hits_total"), static_cast<double>(last.hits));
  EXPECT_EQ(scrape->Value("ensemble_cache_misses_total"), static_cast<double>(last.misses));
  EXPECT_EQ(scrape->Value("ensemble_cache_entries"), 3.0) << "images A, B and the last";
  EXPECT_EQ(scrape->Value("ensemble_cache_capacity_bytes"), 10000000.0);
}

TEST(ResponseCacheTest, SharedMemoryInputsAreKeyedByTheBytesTheHostsRead) {
  WatchdogScope watchdog(seconds(240), "ResponseCacheTest.SharedMemory");
  TempDir repo;
  auto server = StartWithMlpCached(repo);
  ASSERT_TRUE(server);
  auto stub = server->Stub();

  const std::vector<float> image_a = RandomImages(1, 21), image_c = RandomImages(1, 22);
  const size_t bytes = image_a.size() * sizeof(float);
  auto region = client::ShmRegion::Create(client::ShmRegion::UniqueKey("es_it_cache"), bytes);
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  std::memcpy((*region)->data(), image_a.data(), bytes);
  ASSERT_TRUE(client::RegisterShm(*stub, "image", (*region)->key(), 0, bytes).ok());
  inference::ModelInferRequest from_region = ImageRequest("mlp", image_a);
  from_region.clear_raw_input_contents();
  client::SetShmParameters(from_region.mutable_inputs(0), "image", bytes);


  const std::vector<float> a_shm = ProbabilitiesOf(Infer(*stub, from_region));
  const CacheFigures first = Figures(*stub, "mlp");
  EXPECT_EQ(first.misses, 1u);
  EXPECT_EQ(Probabilities(*stub, "mlp", image_a), a_shm) << "the same bytes inline: the entry the region's made";
  const CacheFigures inline_a = Figures(*stub, "mlp");
  EXPECT_EQ(inline_a.hits - first.hits, 1u);

  // The client rewrites its region: a new key, and the answer for what it now holds.
  std::memcpy((*region)->data(), image_c.data(), bytes);
  const std::vector<float> c_shm = ProbabilitiesOf(Infer(*stub, from_region));
  const CacheFigures rewritten = Figures(*stub, "mlp");
  EXPECT_EQ(rewritten.misses - inline_a.misses, 1u);
  EXPECT_NE(c_shm, a_shm);
  EXPECT_EQ(Probabilities(*stub, "mlp", image_c), c_shm);
  EXPECT_EQ(Figures(*stub, "mlp").hits - rewritten.hits, 1u);
  EXPECT_TRUE(client::UnregisterShm(*stub, "image").ok());
}

}  // namespace
}  // namespace es::it
