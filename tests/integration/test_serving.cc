// Acceptance: the demo repository served end to end by the real binaries.
// KServe v2 health/metadata/index/statistics, the ensemble equals the mean of
// its members called one by one, member outputs and uncertainty on request,
// typed contents, id echo, and one pinned ensemble-model-host process per host.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/allocator.h"
#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/integration/shared_server.h"

namespace es::it {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

const std::vector<std::string> kAllModels = {"mlp", "wide_mlp", "cnn", "demo_ensemble"};

// One server (the demo repository) for the whole suite.
class ServingTest : public SharedServerSuite<ServingTest> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SharedServerSuite::SetUp());
    stub_ = server_->Stub();
  }

  // The model's output for `images`, which must succeed with shape [batch, 10].
  std::vector<float> Probabilities(const std::string& model, const std::vector<float>& images) {
    InferResult r = Infer(*stub_, ImageRequest(model, images));
    EXPECT_TRUE(r.status.ok()) << model << ": " << Describe(r.status);
    Fp32Tensor t;
    EXPECT_TRUE(GetFp32Output(r.response, "probabilities", &t)) << model;
    const int64_t batch = static_cast<int64_t>(images.size()) / kImageElements;
    EXPECT_EQ(t.shape, (std::vector<int64_t>{batch, kClasses})) << model;
    return t.values;
  }

  std::unique_ptr<Stub> stub_;
};

std::vector<float> MeanOf(const std::vector<std::vector<float>>& parts) {
  std::vector<float> mean(parts[0].size());
  for (size_t k = 0; k < mean.size(); ++k) {
    double sum = 0;
    for (const auto& p : parts) sum += p[k];
    mean[k] = static_cast<float>(sum / static_cast<double>(parts.size()));
  }
  return mean;
}

int64_t ArgMax(const float* row) { return std::max_element(row, row + kClasses) - row; }

TEST_F(ServingTest, LiveReadyAndHealth) {
  WatchdogScope watchdog(seconds(60), "LiveReadyAndHealth");
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::ServerLiveResponse resp;
    ASSERT_TRUE(stub_->ServerLive(&ctx, inference::ServerLiveRequest(), &resp).ok());
    EXPECT_TRUE(resp.live());
  }
  EXPECT_EQ(ServerReady(*stub_), std::optional<bool>(true));
  for (const auto& model : kAllModels) EXPECT_EQ(ModelReady(*stub_, model), std::optional<bool>(true)) << model;
  {
    auto health = server_->HealthStub();
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("");
    grpc::health::v1::HealthCheckResponse resp;
    const grpc::Status s = health->Check(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << Describe(s);
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
}

TEST_F(ServingTest, ServerMetadata) {
  WatchdogScope watchdog(seconds(60), "ServerMetadata");
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  inference::ServerMetadataResponse resp;
  const grpc::Status s = stub_->ServerMetadata(&ctx, inference::ServerMetadataRequest(), &resp);
  ASSERT_TRUE(s.ok()) << Describe(s);
  EXPECT_FALSE(resp.name().empty());
  EXPECT_FALSE(resp.version().empty());
}

TEST_F(ServingTest, ModelMetadataOfEveryModel) {
  WatchdogScope watchdog(seconds(60), "ModelMetadataOfEveryModel");
  for (const auto& model : kAllModels) {
    SCOPED_TRACE(model);
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::ModelMetadataRequest req;
    req.set_name(model);
    inference::ModelMetadataResponse resp;
    const grpc::Status s = stub_->ModelMetadata(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << Describe(s);
    EXPECT_EQ(resp.name(), model);
    EXPECT_EQ(std::vector<std::string>(resp.versions().begin(), resp.versions().end()), std::vector<std::string>{"1"});
    EXPECT_EQ(resp.platform(), model == "demo_ensemble" ? "ensemble" : "pytorch_libtorch");
    ASSERT_EQ(resp.inputs_size(), 1);
    EXPECT_EQ(resp.inputs(0).name(), "input");
    EXPECT_EQ(resp.inputs(0).datatype(), "FP32");
    EXPECT_EQ(std::vector<int64_t>(resp.inputs(0).shape().begin(), resp.inputs(0).shape().end()),
              (std::vector<int64_t>{-1, 1, 28, 28}));
    ASSERT_EQ(resp.outputs_size(), 1);
    EXPECT_EQ(resp.outputs(0).name(), "probabilities");
    EXPECT_EQ(resp.outputs(0).datatype(), "FP32");
    EXPECT_EQ(std::vector<int64_t>(resp.outputs(0).shape().begin(), resp.outputs(0).shape().end()),
              (std::vector<int64_t>{-1, 10}));
  }
}

TEST_F(ServingTest, RepositoryIndexListsEveryModelReady) {
  WatchdogScope watchdog(seconds(60), "RepositoryIndex");
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  inference::RepositoryIndexResponse resp;
  const grpc::Status s = stub_->RepositoryIndex(&ctx, inference::RepositoryIndexRequest(), &resp);
  ASSERT_TRUE(s.ok()) << Describe(s);
  std::set<std::string> names;
  for (const auto& m : resp.models()) {
    names.insert(m.name());
    EXPECT_EQ(m.state(), "READY") << m.name();
    EXPECT_EQ(m.version(), "1") << m.name();
  }
  EXPECT_EQ(names, std::set<std::string>(kAllModels.begin(), kAllModels.end()));
}

inference::ModelStatistics Stats(Stub& stub, const std::string& model) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  inference::ModelStatisticsRequest req;
  req.set_name(model);
  inference::ModelStatisticsResponse resp;
  const grpc::Status s = stub.ModelStatistics(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << Describe(s);
  EXPECT_EQ(resp.model_stats_size(), 1);
  return resp.model_stats_size() == 1 ? resp.model_stats(0) : inference::ModelStatistics();
}

TEST_F(ServingTest, ModelStatisticsCountSuccessesAndFailures) {
  WatchdogScope watchdog(seconds(60), "ModelStatistics");
  const inference::ModelStatistics before = Stats(*stub_, "demo_ensemble");
  const inference::ModelStatistics member_before = Stats(*stub_, "cnn");
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Infer(*stub_, ImageRequest("demo_ensemble", RandomImages(2, 100 + i))).status.ok());
  }
  // One invalid request (bad shape) counts as a failure.
  const auto bad = Infer(*stub_, RawRequest("demo_ensemble", {1, 28, 28}, RandomImages(1, 7)));
  ASSERT_EQ(bad.status.error_code(), grpc::INVALID_ARGUMENT) << Describe(bad.status);
  const inference::ModelStatistics after = Stats(*stub_, "demo_ensemble");

  EXPECT_EQ(after.name(), "demo_ensemble");
  EXPECT_EQ(after.version(), "1");
  const auto& b = before.inference_stats();
  const auto& a = after.inference_stats();
  EXPECT_EQ(a.success().count() - b.success().count(), 3u);
  EXPECT_GT(a.success().ns(), b.success().ns());
  EXPECT_EQ(a.fail().count() - b.fail().count(), 1u);
  EXPECT_EQ(after.inference_count() - before.inference_count(), 6u);  // rows, as Triton counts
  EXPECT_GE(after.execution_count() - before.execution_count(), 1u);
  EXPECT_LE(after.execution_count() - before.execution_count(), 3u);
  EXPECT_GT(after.last_inference(), 0u);
  // The ensemble's member calls are requests of the member, as in Triton
  // (the failed request never reached the members).
  const inference::ModelStatistics member_after = Stats(*stub_, "cnn");
  EXPECT_EQ(member_after.inference_stats().success().count() - member_before.inference_stats().success().count(), 3u);
  EXPECT_EQ(member_after.inference_count() - member_before.inference_count(), 6u);

  // An empty name: every model.
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  inference::ModelStatisticsResponse all;
  ASSERT_TRUE(stub_->ModelStatistics(&ctx, inference::ModelStatisticsRequest(), &all).ok());
  std::set<std::string> names;
  for (const auto& m : all.model_stats()) names.insert(m.name());
  EXPECT_EQ(names, std::set<std::string>(kAllModels.begin(), kAllModels.end()));
}

TEST_F(ServingTest, EnsembleEqualsMeanOfMembersCalledOneByOne) {
  WatchdogScope watchdog(seconds(120), "EnsembleEqualsMean");
  for (int64_t batch : {1, 7, 64}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const std::vector<float> images = RandomImages(batch, static_cast<uint32_t>(1000 + batch));
    InferResult r = Infer(*stub_, ImageRequest("demo_ensemble", images));
    ASSERT_TRUE(r.status.ok()) << Describe(r.status);
    EXPECT_EQ(r.response.model_name(), "demo_ensemble");
    EXPECT_EQ(r.response.model_version(), "1");
    EXPECT_EQ(OutputNames(r.response), std::vector<std::string>{"probabilities"});
    Fp32Tensor ensemble;
    ASSERT_TRUE(GetFp32Output(r.response, "probabilities", &ensemble));
    ASSERT_EQ(ensemble.shape, (std::vector<int64_t>{batch, kClasses}));

    std::vector<std::vector<float>> members;
    for (const auto& m : kDemoMembers) members.push_back(Probabilities(m, images));
    ASSERT_FALSE(HasFailure());
    EXPECT_LE(MaxAbsDiff(ensemble.values, MeanOf(members)), 1e-6);
    // The members are different models: their outputs differ.
    EXPECT_GT(MaxAbsDiff(members[0], members[2]), 1e-4);
    for (int64_t row = 0; row < batch; ++row) {
      double sum = 0;
      for (int64_t c = 0; c < kClasses; ++c) sum += ensemble.values[row * kClasses + c];
      EXPECT_NEAR(sum, 1.0, 1e-4) << "row " << row;
    }
  }
}

TEST_F(ServingTest, MemberOutputsAndUncertaintyWhenAsked) {
  WatchdogScope watchdog(seconds(120), "MemberOutputsAndUncertainty");
  for (int64_t batch : {1, 7, 64}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const std::vector<float> images = RandomImages(batch, static_cast<uint32_t>(2000 + batch));
    inference::ModelInferRequest req = ImageRequest("demo_ensemble", images);
    SetBoolParameter(&req, "return_member_outputs", true);
    SetBoolParameter(&req, "return_uncertainty", true);
    InferResult r = Infer(*stub_, req);
    ASSERT_TRUE(r.status.ok()) << Describe(r.status);
    const std::vector<std::string> names = OutputNames(r.response);
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
              (std::set<std::string>{"probabilities", "entropy", "disagreement", "mlp.probabilities",
                                     "wide_mlp.probabilities", "cnn.probabilities"}));
    EXPECT_EQ(names.size(), 6u) << "duplicate outputs";

    Fp32Tensor ensemble, entropy, disagreement;
    ASSERT_TRUE(GetFp32Output(r.response, "probabilities", &ensemble));
    ASSERT_TRUE(GetFp32Output(r.response, "entropy", &entropy));
    ASSERT_TRUE(GetFp32Output(r.response, "disagreement", &disagreement));
    EXPECT_EQ(entropy.shape, std::vector<int64_t>{batch});
    EXPECT_EQ(disagreement.shape, std::vector<int64_t>{batch});
    std::vector<std::vector<float>> members;
    for (const auto& m : kDemoMembers) {
      Fp32Tensor t;
      ASSERT_TRUE(GetFp32Output(r.response, m + ".probabilities", &t));
      EXPECT_EQ(t.shape, (std::vector<int64_t>{batch, kClasses})) << m;
      // Each member output is what the member says when called on its own.
      EXPECT_LE(MaxAbsDiff(t.values, Probabilities(m, images)), 1e-6) << m;
      members.push_back(std::move(t.values));
    }
    ASSERT_FALSE(HasFailure());
    EXPECT_LE(MaxAbsDiff(ensemble.values, MeanOf(members)), 1e-6);

    for (int64_t row = 0; row < batch; ++row) {
      const float* p = &ensemble.values[static_cast<size_t>(row * kClasses)];
      double h = 0;
      for (int64_t c = 0; c < kClasses; ++c) {
        if (p[c] > 0) h -= static_cast<double>(p[c]) * std::log(static_cast<double>(p[c]));
      }
      EXPECT_GE(entropy.values[row], 0.0f) << "row " << row;
      EXPECT_NEAR(entropy.values[row], h, 1e-5 + 1e-5 * h) << "row " << row;
      const int64_t winner = ArgMax(p);
      int differ = 0;
      for (const auto& m : members) differ += ArgMax(&m[static_cast<size_t>(row * kClasses)]) != winner;
      EXPECT_GE(disagreement.values[row], 0.0f) << "row " << row;
      EXPECT_LE(disagreement.values[row], 1.0f) << "row " << row;
      EXPECT_NEAR(disagreement.values[row], differ / 3.0, 1e-6) << "row " << row;
    }
  }
}

TEST_F(ServingTest, EachExtraOutputOnlyWhenAsked) {
  WatchdogScope watchdog(seconds(60), "EachExtraOutputOnlyWhenAsked");
  const std::vector<float> images = RandomImages(3, 77);
  {
    inference::ModelInferRequest req = ImageRequest("demo_ensemble", images);
    SetBoolParameter(&req, "return_uncertainty", true);
    InferResult r = Infer(*stub_, req);
    ASSERT_TRUE(r.status.ok()) << Describe(r.status);
    const auto names = OutputNames(r.response);
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
              (std::set<std::string>{"probabilities", "entropy", "disagreement"}));
  }
  {
    inference::ModelInferRequest req = ImageRequest("demo_ensemble", images);
    SetBoolParameter(&req, "return_member_outputs", true);
    SetBoolParameter(&req, "return_uncertainty", false);
    InferResult r = Infer(*stub_, req);
    ASSERT_TRUE(r.status.ok()) << Describe(r.status);
    const auto names = OutputNames(r.response);
    EXPECT_EQ(
        std::set<std::string>(names.begin(), names.end()),
        (std::set<std::string>{"probabilities", "mlp.probabilities", "wide_mlp.probabilities", "cnn.probabilities"}));
  }
}

TEST_F(ServingTest, TypedContentsGiveTheSameAnswerAsRaw) {
  WatchdogScope watchdog(seconds(60), "TypedContents");
  const std::vector<float> images = RandomImages(7, 4242);
  for (const std::string model : {"demo_ensemble", "cnn"}) {
    SCOPED_TRACE(model);
    InferResult raw = Infer(*stub_, ImageRequest(model, images));
    ASSERT_TRUE(raw.status.ok()) << Describe(raw.status);

    inference::ModelInferRequest typed;
    typed.set_model_name(model);
    auto* in = typed.add_inputs();
    in->set_name("input");
    in->set_datatype("FP32");
    for (int64_t d : {7, 1, 28, 28}) in->add_shape(d);
    for (float v : images) in->mutable_contents()->add_fp32_contents(v);
    InferResult r = Infer(*stub_, typed);
    ASSERT_TRUE(r.status.ok()) << Describe(r.status);
    // The answer always comes back as raw_output_contents.
    ASSERT_EQ(r.response.raw_output_contents_size(), r.response.outputs_size());
    for (const auto& o : r.response.outputs()) EXPECT_EQ(o.contents().fp32_contents_size(), 0) << o.name();
    Fp32Tensor a, b;
    ASSERT_TRUE(GetFp32Output(raw.response, "probabilities", &a));
    ASSERT_TRUE(GetFp32Output(r.response, "probabilities", &b));
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_LE(MaxAbsDiff(a.values, b.values), 1e-6);
  }
}

TEST_F(ServingTest, RequestIdModelNameAndVersionAreEchoed) {
  WatchdogScope watchdog(seconds(60), "IdEcho");
  for (const std::string model : {"demo_ensemble", "wide_mlp"}) {
    for (const std::string version : {"", "1"}) {
      inference::ModelInferRequest req = ImageRequest(model, RandomImages(2, 5));
      req.set_id("request-" + model + "-" + version + "-\xc3\xa9");
      req.set_model_version(version);
      InferResult r = Infer(*stub_, req);
      ASSERT_TRUE(r.status.ok()) << model << " v'" << version << "': " << Describe(r.status);
      EXPECT_EQ(r.response.id(), req.id());
      EXPECT_EQ(r.response.model_name(), model);
      EXPECT_EQ(r.response.model_version(), "1");
    }
  }
}

TEST_F(ServingTest, RequestedOutputsSelectWhatComesBack) {
  WatchdogScope watchdog(seconds(60), "RequestedOutputs");
  inference::ModelInferRequest req = ImageRequest("demo_ensemble", RandomImages(4, 6));
  SetBoolParameter(&req, "return_uncertainty", true);
  req.add_outputs()->set_name("entropy");
  InferResult r = Infer(*stub_, req);
  ASSERT_TRUE(r.status.ok()) << Describe(r.status);
  EXPECT_EQ(OutputNames(r.response), std::vector<std::string>{"entropy"});
}

TEST_F(ServingTest, TimeoutParameterThatIsLongEnoughIsHonoured) {
  WatchdogScope watchdog(seconds(60), "TimeoutParameter");
  inference::ModelInferRequest req = ImageRequest("demo_ensemble", RandomImages(2, 8));
  (*req.mutable_parameters())["timeout"].set_int64_param(10'000'000);  // 10 s in µs
  InferResult r = Infer(*stub_, req);
  EXPECT_TRUE(r.status.ok()) << Describe(r.status);
}

// Concurrent clients (which the router may batch together) each get the
// answer to their own rows.
TEST_F(ServingTest, ConcurrentClientsGetTheirOwnAnswers) {
  WatchdogScope watchdog(seconds(120), "ConcurrentClients");
  constexpr int kInputs = 8;
  std::vector<std::vector<float>> inputs, expected;
  for (int i = 0; i < kInputs; ++i) {
    inputs.push_back(RandomImages(1 + i % 3, 3000 + i));
    expected.push_back(Probabilities("demo_ensemble", inputs.back()));
  }
  ASSERT_FALSE(HasFailure());
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto stub = server_->NewConnectionStub();
      for (int k = 0; k < 24; ++k) {
        const int i = (t * 3 + k) % kInputs;
        InferResult r = Infer(*stub, ImageRequest("demo_ensemble", inputs[i]));
        Fp32Tensor out;
        if (!r.status.ok() || !GetFp32Output(r.response, "probabilities", &out)) {
          ++failed;
        } else if (MaxAbsDiff(out.values, expected[i]) > 1e-6) {
          ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(ServingTest, EachHostIsItsOwnPinnedModelHostProcess) {
  WatchdogScope watchdog(seconds(60), "HostProcesses");
  const std::map<std::string, pid_t> hosts = server_->HostPids();
  ASSERT_EQ(hosts.size(), 2u) << "host processes found: " << hosts.size();
  ASSERT_TRUE(hosts.count("cpu0") && hosts.count("cpu1"));
  EXPECT_NE(hosts.at("cpu0"), hosts.at("cpu1"));
  const std::map<std::string, std::string> expected_cpus = {{"cpu0", "0"}, {"cpu1", "1"}};
  for (const auto& [name, pid] : hosts) {
    SCOPED_TRACE(name);
    EXPECT_NE(pid, server_->pid());
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
    EXPECT_EQ(exe.filename(), "ensemble-model-host") << exe;
    const std::vector<std::string> args = ProcessArgs(pid);
    auto value_of = [&args](const std::string& flag) {
      auto it = std::find(args.begin(), args.end(), flag);
      return it != args.end() && it + 1 != args.end() ? *(it + 1) : std::string("<missing>");
    };
    EXPECT_EQ(value_of("--host"), name);
    EXPECT_EQ(value_of("--channel-fd"), "3");
    // The router tells a host what it is on its command line; it reads no config file.
    EXPECT_EQ(std::find(args.begin(), args.end(), "--config"), args.end());
    EXPECT_EQ(value_of("--device"), "cpu");
    EXPECT_EQ(value_of("--cpus"), expected_cpus.at(name));
    EXPECT_EQ(ProcStatusField(pid, "Cpus_allowed_list"), std::optional<std::string>(expected_cpus.at(name)));
  }
}

// sched_setaffinity(0, ...) pins only the calling thread: threads a host
// started before pinning itself keep running on every CPU.
TEST_F(ServingTest, EveryThreadOfAHostIsPinned) {
  WatchdogScope watchdog(seconds(60), "HostThreadsPinned");
  const std::map<std::string, pid_t> hosts = server_->HostPids();
  ASSERT_EQ(hosts.size(), 2u);
  const std::map<std::string, std::string> expected_cpus = {{"cpu0", "0"}, {"cpu1", "1"}};
  for (const auto& [name, pid] : hosts) {
    SCOPED_TRACE(name);
    std::error_code ec;
    const fs::path tasks = "/proc/" + std::to_string(pid) + "/task";
    int threads = 0;
    for (const auto& task : fs::directory_iterator(tasks, ec)) {
      const std::string status = ReadTextFile(task.path() / "status");
      const auto at = status.find("Cpus_allowed_list:");
      if (at == std::string::npos) continue;  // the thread just exited
      ++threads;
      const std::string line = status.substr(at, status.find('\n', at) - at);
      const std::string comm = ReadTextFile(task.path() / "comm");
      const std::string wchan = ReadTextFile(task.path() / "wchan");
      EXPECT_EQ(line, "Cpus_allowed_list:\t" + expected_cpus.at(name))
          << task.path() << " (thread '" << comm.substr(0, comm.find('\n')) << "', waiting in " << wchan << ")";
    }
    EXPECT_GE(threads, 1);
  }
}

// The build links the malloc it chose (cmake/EsAllocator.cmake) into the
// router and the hosts: a process runs tcmalloc exactly when the build chose
// it, by the libraries mapped into it (a build for tcmalloc whose binaries
// lost the library, e.g. to the linker dropping a dependency it thinks
// unneeded, fails here), and each says so in its log, tcmalloc with its
// thread caches bounded (common/allocator.h).
TEST_F(ServingTest, TheRouterAndItsHostsRunTheMallocTheBuildChose) {
  const bool tcmalloc = std::string(ES_ALLOCATOR_IN_USE) == "tcmalloc";
  std::map<std::string, pid_t> processes = server_->HostPids();
  ASSERT_EQ(processes.size(), 2u);
  processes["router"] = server_->pid();
  for (const auto& [name, pid] : processes) {
    const std::string maps = ReadTextFile("/proc/" + std::to_string(pid) + "/maps");
    ASSERT_FALSE(maps.empty()) << name;
    EXPECT_EQ(maps.find("/libtcmalloc_minimal.so") != std::string::npos, tcmalloc)
        << name << " (pid " << pid << "): the build chose " << ES_ALLOCATOR_IN_USE;
  }
  // The router logs its line after the stdout lines Start() waits for.
  const std::vector<std::string> line_starts = {"] ready (pid ", "info serving "};
  std::string log;
  for (const auto deadline = Clock::now() + seconds(10); Clock::now() < deadline;) {
    log = server_->LogTail(size_t{1} << 20);
    if (log.find(line_starts[0]) != std::string::npos && log.find(line_starts[1]) != std::string::npos) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  // The bound is ours unless the environment the server inherited sets one.
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing in the suite sets the environment
  const bool our_bound = std::getenv("TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES") == nullptr;
  const std::string bound = "thread caches " + std::to_string(kThreadCacheBytes >> 10) + " KiB)";
  for (const std::string& line_start : line_starts) {
    size_t lines = 0;
    for (size_t at = log.find(line_start); at != std::string::npos; at = log.find(line_start, at + 1)) {
      const std::string line = log.substr(at, log.find('\n', at) - at);
      ++lines;
      const size_t said = line.find("malloc: ");
      ASSERT_NE(said, std::string::npos) << line;
      EXPECT_EQ(line.compare(said, 18, "malloc: tcmalloc (") == 0, tcmalloc) << line;
      if (tcmalloc && our_bound) {
        EXPECT_NE(line.find(bound), std::string::npos) << line;
      }
    }
    EXPECT_GE(lines, 1u) << "no line with '" << line_start << "' in the server's log";
  }
}

}  // namespace
}  // namespace es::it
