// ensemble-train as users run it: the real binary, real rank processes, real
// Gloo, then the real ensemble-server on what it wrote.
//
//   train then serve   the repository is served unchanged and answers what
//                      the trainer's own evaluation said on the same rows
//   resume             --max-steps K, then --resume, ends where an
//                      uninterrupted run ends
//   faults             a killed rank makes the others exit non-zero within
//                      the collective timeout (launcher and torchrun modes)
//   metrics            /metrics of a rank while it trains
//   usage errors       exit 2 (1 for a missing data file) with a clear message
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <thread>

#include "common/allocator.h"
#include "tests/common/test_paths.h"
#include "tests/integration/kserve_helpers.h"
#include "tests/integration/metrics/metrics_support.h"
#include "tests/integration/server_process.h"
#include "tests/training/integration/background_process.h"
#include "training/dataset.h"
#include "training/fashion_mnist.h"

namespace es {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kCollectiveTimeoutMs = 3000;

// A synthetic-data config: quick, and learnable so the report is meaningful.
std::string SyntheticConfig(int epochs, int64_t checkpoint_every) {
  return "run: test-run\n"
         "data: {dataset: synthetic, synthetic_train_rows: 1024, synthetic_test_rows: 256}\n"
         "training: {epochs: " + std::to_string(epochs) +
         ", batch_size: 32, optimizer: adam, learning_rate: 0.003, seed: 4}\n"
         "distributed: {collective_timeout_ms: " + std::to_string(kCollectiveTimeoutMs) + "}\n"
         "checkpoint: {every_steps: " + std::to_string(checkpoint_every) + "}\n"
         "members:\n"
         "  - {name: syn_mlp, architecture: mlp, seed: 1}\n"
         "  - {name: syn_cnn, architecture: cnn, seed: 2}\n"
         "ensemble: {name: syn_ensemble}\n";
}

int Train(const std::vector<std::string>& args, std::string* output,
          seconds timeout = seconds(120)) {
  std::vector<std::string> argv{es::test_paths::kTrainBin};
  argv.insert(argv.end(), args.begin(), args.end());
  return it::RunCommand(argv, timeout, output);
}

nlohmann::json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// A process started in the background with extra environment, its output
// in a file; killed (with its process group) when the object goes.
using Background = testing::BackgroundProcess;

// The real server on a trained repository (no metrics port).
std::unique_ptr<it::ServerProcess> ServeRepository(const fs::path& repository) {
  it::ServerProcess::Options options;
  options.repository = repository.string();
  options.metrics = false;
  return it::ServerProcess::Start(options);
}

// ---- train then serve ------------------------------------------------------

TEST(TrainCommandTest, TrainedRepositoryIsServedAsIsAndAnswersAsTheTrainerEvaluated) {
  it::WatchdogScope watchdog(seconds(240), "train then serve");
  it::TempDir dir;
  const std::string config = dir.Write("train.yaml", SyntheticConfig(3, 0));
  const fs::path out = dir.path() / "out";
  std::string output;
  ASSERT_EQ(Train({"--config", config, "--devices", "cpu:2", "--out", out.string()}, &output), 0)
      << output;
  // The printed report: every model, and the ensemble's margin.
  for (const char* needle : {"syn_mlp", "syn_cnn", "syn_ensemble", "ensemble vs best member",
                             "2 rank(s)", "server.yaml", "Cascade (syn_ensemble_cascade)", "chosen: exit_threshold"}) {
    EXPECT_NE(output.find(needle), std::string::npos) << needle << "\n" << output;
  }
  const nlohmann::json report = ReadJson(out / "report.json");
  ASSERT_FALSE(report.is_discarded());
  EXPECT_EQ(report["world_size"], 2);
  EXPECT_EQ(report["steps"], 3 * (1024 / 32));
  EXPECT_GT(report["members"]["syn_mlp"]["accuracy"].get<double>(), 0.5) << report.dump(2);
  EXPECT_GT(report["ensemble"]["accuracy"].get<double>(), 0.5) << report.dump(2);

  auto server = ServeRepository(out);
  ASSERT_TRUE(server) << it::ServerProcess::last_start_error();
  auto stub = server->Stub();

  const nlohmann::json samples = ReadJson(out / "eval_samples.json");
  ASSERT_TRUE(samples.is_array());
  ASSERT_EQ(samples.size(), 8u);
  std::vector<float> images;
  for (const auto& sample : samples) {
    for (float v : sample["input"].get<std::vector<float>>()) images.push_back(v);
  }
  auto expect_model = [&](const std::string& model, const std::function<std::vector<float>(const nlohmann::json&)>& want) {
    it::InferResult result = it::Infer(*stub, it::ImageRequest(model, images));
    ASSERT_TRUE(result.status.ok()) << model << ": " << it::Describe(result.status);
    it::Fp32Tensor probabilities;
    ASSERT_TRUE(it::GetFp32Output(result.response, "probabilities", &probabilities));
    ASSERT_EQ(probabilities.values.size(), samples.size() * 10);
    for (size_t row = 0; row < samples.size(); ++row) {
      const std::vector<float> served(probabilities.values.begin() + row * 10,
                                      probabilities.values.begin() + (row + 1) * 10);
      EXPECT_LE(it::MaxAbsDiff(served, want(samples[row])), 1e-5) << model << " row " << row;
    }
  };
  expect_model("syn_ensemble", [](const nlohmann::json& s) { return s["ensemble"].get<std::vector<float>>(); });
  for (const char* member : {"syn_mlp", "syn_cnn"}) {
    expect_model(member, [member](const nlohmann::json& s) {
      return s["members"][member].get<std::vector<float>>();
    });
  }

  // The cascade variant the sweep chose: served as written, each row
  // leaving at the stage the trainer's outputs and the threshold say, with
  // the mean of the members it ran through.
  const nlohmann::json& cascade = report["cascade"];
  ASSERT_TRUE(cascade.contains("chosen")) << cascade.dump(2);
  EXPECT_EQ(cascade["variant"], "syn_ensemble_cascade");
  EXPECT_EQ(cascade["thresholds"].size(), 14u);
  EXPECT_EQ(cascade["thresholds"].back()["threshold"], 1.0);
  EXPECT_EQ(cascade["chosen"]["within_tolerance"], true);
  EXPECT_GE(cascade["chosen"]["accuracy"].get<double>(), cascade["full_ensemble"]["accuracy"].get<double>() - 0.001);
  const double threshold = cascade["chosen"]["threshold"];
  std::vector<std::string> stages;
  for (const auto& stage : cascade["stages"]) stages.push_back(stage[0]);
  ASSERT_EQ(stages.size(), 2u);
  inference::ModelInferRequest request = it::ImageRequest("syn_ensemble_cascade", images);
  request.add_outputs()->set_name("probabilities");
  request.add_outputs()->set_name("exit_stage");
  it::InferResult result = it::Infer(*stub, request);
  ASSERT_TRUE(result.status.ok()) << it::Describe(result.status);
  it::Fp32Tensor answer;
  ASSERT_TRUE(it::GetFp32Output(result.response, "probabilities", &answer));
  ASSERT_EQ(answer.values.size(), samples.size() * 10);
  ASSERT_EQ(result.response.outputs_size(), 2);
  ASSERT_EQ(result.response.raw_output_contents(1).size(), samples.size() * sizeof(int32_t));
  std::vector<int32_t> exits(samples.size());
  std::memcpy(exits.data(), result.response.raw_output_contents(1).data(), exits.size() * sizeof(int32_t));
  for (size_t row = 0; row < samples.size(); ++row) {
    const std::vector<float> first = samples[row]["members"][stages[0]].get<std::vector<float>>();
    const std::vector<float> second = samples[row]["members"][stages[1]].get<std::vector<float>>();
    const bool sure = *std::max_element(first.begin(), first.end()) >= threshold;
    EXPECT_EQ(exits[row], sure ? 0 : 1) << "row " << row;
    std::vector<float> want = first;
    if (!sure) {
      for (size_t c = 0; c < want.size(); ++c) want[c] = (first[c] + second[c]) / 2;
    }
    const std::vector<float> served(answer.values.begin() + row * 10, answer.values.begin() + (row + 1) * 10);
    EXPECT_LE(it::MaxAbsDiff(served, want), 1e-5) << "cascade row " << row;
  }
}

// ---- the packed variant --------------------------------------------------------

// Fashion-MNIST, one epoch: two mlps and two cnns, so the run packs each
// pair into one model and writes the packed ensemble beside the ensemble.
std::string PackedFashionMnistConfig() {
  return "run: test-packed\n"
         "data: {dataset: fashion-mnist}\n"
         "training: {epochs: 1, batch_size: 512, optimizer: adam, learning_rate: 0.004, seed: 4}\n"
         "distributed: {collective_timeout_ms: " + std::to_string(kCollectiveTimeoutMs) + "}\n"
         "members:\n"
         "  - {name: pk_mlp_1, architecture: mlp, seed: 1}\n"
         "  - {name: pk_cnn_1, architecture: cnn, seed: 2}\n"
         "  - {name: pk_mlp_2, architecture: mlp, seed: 3}\n"
         "  - {name: pk_cnn_2, architecture: cnn, seed: 4}\n"
         "ensemble: {name: pk}\n";
}

// The answers of `model` through the server for every row of `images`
// ([N, 1, 28, 28]), in requests of `rows` rows; `outputs` the output names
// to ask for (each answer's values row after row; a member's, "<member>.<output>",
// with return_member_outputs).
std::map<std::string, std::vector<float>> ServeAll(inference::GRPCInferenceService::Stub& stub,
                                                   const std::string& model, const at::Tensor& images, int64_t rows,
                                                   const std::vector<std::string>& outputs) {
  std::map<std::string, std::vector<float>> answers;
  const at::Tensor flat = images.reshape({images.size(0), -1}).contiguous();
  for (int64_t begin = 0; begin < flat.size(0); begin += rows) {
    const int64_t n = std::min(rows, flat.size(0) - begin);
    const float* first = flat[begin].data_ptr<float>();
    inference::ModelInferRequest request =
        it::ImageRequest(model, std::vector<float>(first, first + n * flat.size(1)));
    for (const std::string& output : outputs) {
      request.add_outputs()->set_name(output);
      if (output.find('.') != std::string::npos) it::SetBoolParameter(&request, "return_member_outputs", true);
    }
    it::InferResult result = it::Infer(stub, request);
    if (!result.status.ok()) {
      ADD_FAILURE() << model << " rows " << begin << "+" << n << ": " << it::Describe(result.status);
      return {};
    }
    for (const std::string& output : outputs) {
      it::Fp32Tensor answer;
      if (!it::GetFp32Output(result.response, output, &answer)) {
        ADD_FAILURE() << model << ": no output " << output;
        return {};
      }
      std::vector<float>& all = answers[output];
      all.insert(all.end(), answer.values.begin(), answer.values.end());
    }
  }
  return answers;
}

TEST(TrainCommandTest, PackedEnsembleAnswersAsTheEnsembleOnTheWholeTestSet) {
  it::WatchdogScope watchdog(seconds(300), "packed variant");
  StatusOr<Dataset> test = LoadFashionMnist("/usr/share/datasets/fashion-mnist", DataSplit::kTest);
  ASSERT_TRUE(test.ok()) << test.status().ToString();
  it::TempDir dir;
  const std::string config = dir.Write("train.yaml", PackedFashionMnistConfig());
  const fs::path out = dir.path() / "out";
  std::string output;
  ASSERT_EQ(Train({"--config", config, "--devices", "cpu:2", "--out", out.string()}, &output), 0) << output;
  EXPECT_NE(output.find("Packed (pk_packed): pk_packed_mlp (2 members), pk_packed_cnn (2 members)"),
            std::string::npos)
      << output;
  const nlohmann::json report = ReadJson(out / "report.json");
  ASSERT_TRUE(report.contains("packed")) << report.dump(2);
  EXPECT_LE(report["packed"]["max_abs_difference_vs_members"].get<double>(), 1e-5);

  auto server = ServeRepository(out);
  ASSERT_TRUE(server) << it::ServerProcess::last_start_error();
  auto stub = server->Stub();
  // All 10000 test rows, 64 per request (the served max_batch_size).
  const std::vector<std::string> probabilities{"probabilities"};
  const std::vector<float> plain = ServeAll(*stub, "pk", test->images, 64, probabilities)["probabilities"];
  const std::vector<float> packed = ServeAll(*stub, "pk_packed", test->images, 64, probabilities)["probabilities"];
  ASSERT_EQ(plain.size(), static_cast<size_t>(test->size()) * 10);
  ASSERT_EQ(packed.size(), plain.size());
  EXPECT_LE(it::MaxAbsDiff(packed, plain), 1e-5);
  // And not because both answer something constant: the rows differ.
  EXPECT_GT(it::MaxAbsDiff(std::vector<float>(plain.begin(), plain.begin() + 10),
                           std::vector<float>(plain.begin() + 10, plain.begin() + 20)),
            1e-3);

  // A packed member's own answers on request, as a separate member's: the
  // trainer's evaluation of that member on the first test rows.
  const nlohmann::json samples = ReadJson(out / "eval_samples.json");
  ASSERT_TRUE(samples.is_array());
  const std::vector<std::string> members{"pk_mlp_2.probabilities", "pk_cnn_1.probabilities"};
  std::map<std::string, std::vector<float>> per_member =
      ServeAll(*stub, "pk_packed", test->images.narrow(0, 0, static_cast<int64_t>(samples.size())), 64, members);
  for (const auto& [name, member] : std::map<std::string, std::string>{{members[0], "pk_mlp_2"}, {members[1], "pk_cnn_1"}}) {
    ASSERT_EQ(per_member[name].size(), samples.size() * 10) << name;
    for (size_t row = 0; row < samples.size(); ++row) {
      const std::vector<float> served(per_member[name].begin() + static_cast<long>(row * 10),
                                      per_member[name].begin() + static_cast<long>(row * 10 + 10));
      EXPECT_LE(it::MaxAbsDiff(served, samples[row]["members"][member].get<std::vector<float>>()), 1e-5)
          << name << " row " << row;
    }
  }
}

// ---- progress ----------------------------------------------------------------

// Under CI, nohup, systemd or Kubernetes stderr is no terminal: progress
// comes as a log line every --progress-every seconds instead of silence.
TEST(TrainCommandTest, ProgressIsLoggedWhenStderrIsNotATerminal) {
  it::WatchdogScope watchdog(seconds(240), "progress");
  it::TempDir dir;
  const std::string config = dir.Write("train.yaml", SyntheticConfig(24, 1000));  // ~3 s here
  std::string output;
  ASSERT_EQ(Train({"--config", config, "--devices", "cpu:2", "--out", dir.Path("out"), "--progress-every", "1"},
                  &output), 0)
      << output;
  const std::regex line(R"(\[rank 0\] \[info\] progress: epoch \d+, step \d+/768, loss [0-9.]+, \d+ samples/s, ETA \S+)");
  EXPECT_TRUE(std::regex_search(output, line)) << output;
  EXPECT_EQ(output.find("\r"), std::string::npos) << "terminal redraws in a pipe";
}

// ---- malloc ------------------------------------------------------------------

// ensemble-train links the malloc the build chose (cmake/EsAllocator.cmake),
// as the server and the hosts do: each rank says which one it runs, and runs
// tcmalloc exactly when the build chose it, with its thread caches bounded
// (common/allocator.h).
TEST(TrainCommandTest, EachRankRunsTheMallocTheBuildChose) {
  it::WatchdogScope watchdog(seconds(240), "malloc");
  it::TempDir dir;
  const std::string config = dir.Write("train.yaml", SyntheticConfig(24, 1000));
  std::string output;
  ASSERT_EQ(Train({"--config", config, "--devices", "cpu:2", "--out", dir.Path("out"), "--max-steps", "2"}, &output), 0)
      << output;
  const bool tcmalloc = std::string(ES_ALLOCATOR_IN_USE) == "tcmalloc";
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing in the suite sets the environment
  const bool our_bound = std::getenv("TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES") == nullptr;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string start = "rank " + std::to_string(rank) + " of 2 on cpu";
    const size_t at = output.find(start);
    ASSERT_NE(at, std::string::npos) << start << "\n" << output;
    const std::string line = output.substr(at, output.find('\n', at) - at);
    const size_t said = line.find("malloc: ");
    ASSERT_NE(said, std::string::npos) << line;
    EXPECT_EQ(line.compare(said, 18, "malloc: tcmalloc (") == 0, tcmalloc)
        << line << " (the build chose " << ES_ALLOCATOR_IN_USE << ")";
    if (tcmalloc && our_bound) {
      EXPECT_NE(line.find("thread caches " + std::to_string(es::kThreadCacheBytes >> 10) + " KiB)"), std::string::npos)
          << line;
    }
  }
}

// ---- resume ------------------------------------------------------------------

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(TrainCommandTest, ResumeContinuesFromTheCheckpointsStep) {
  it::WatchdogScope watchdog(seconds(240), "resume");
  it::TempDir dir;
  const std::string config = dir.Write("train.yaml", SyntheticConfig(2, 10));
  const fs::path straight = dir.path() / "straight";
  const fs::path split = dir.path() / "split";
  std::string output;
  ASSERT_EQ(Train({"--config", config, "--devices", "cpu:2", "--out", straight.string()}, &output), 0)
      << output;

  // 45 steps: mid-epoch (32 steps each), between checkpoints.
  output.clear();
  ASSERT_EQ(Train({"--config", config, "--devices", "cpu:2", "--out", split.string(), "--max-steps", "45"},
                  &output), 0) << output;
  EXPECT_NE(output.find("stopped at step 45"), std::string::npos) << output;
  EXPECT_FALSE(fs::exists(split / "report.json")) << "an interrupted run writes no repository";

  // Without --resume the checkpoint is protected.
  output.clear();
  EXPECT_EQ(Train({"--config", config, "--devices", "cpu:2", "--out", split.string()}, &output), 2);
  EXPECT_NE(output.find("pass --resume"), std::string::npos) << output;

  output.clear();
  ASSERT_EQ(Train({"--config", config, "--devices", "cpu:2", "--out", split.string(), "--resume"}, &output), 0)
      << output;
  EXPECT_NE(output.find("step 45 of 64, epoch 2/2, batch 13"), std::string::npos) << output;

  // Resuming a finished run has nothing to do and says so; the report (and
  // its timings) stay as they were instead of being rewritten with zeros.
  const fs::path again = dir.path() / "again";
  fs::copy(straight, again, fs::copy_options::recursive);
  const std::string report_before = ReadText(again / "report.json");
  output.clear();
  ASSERT_EQ(Train({"--config", config, "--devices", "cpu:2", "--out", again.string(), "--resume"}, &output), 0)
      << output;
  EXPECT_NE(output.find("nothing left to do: the run in " + again.string() + " had finished (step 64 of 64)"),
            std::string::npos)
      << output;
  EXPECT_EQ(ReadText(again / "report.json"), report_before) << "resuming a finished run rewrote its report";
  // Resuming with another schedule length is refused, not silently retrained.
  output.clear();
  const fs::path other = dir.path() / "other";
  ASSERT_EQ(Train({"--config", config, "--devices", "cpu:2", "--out", other.string(), "--max-steps", "10"},
                  &output), 0) << output;
  output.clear();
  EXPECT_EQ(Train({"--config", config, "--devices", "cpu:2", "--out", other.string(), "--resume",
                   "--epochs", "3"}, &output), 2) << output;
  EXPECT_NE(output.find("written by a run with other settings (total steps"), std::string::npos) << output;

  const nlohmann::json a = ReadJson(straight / "report.json");
  const nlohmann::json b = ReadJson(split / "report.json");
  EXPECT_EQ(a["steps"], 64);
  EXPECT_EQ(b["steps"], 64);
  // The resumed run reports the whole run's timings (both processes').
  EXPECT_GT(b["train_seconds"].get<double>(), 0.0);
  EXPECT_GT(b["mean_step_seconds"].get<double>(), 0.0);
  // Same data order, same optimizer state, same schedule: the same model.
  const nlohmann::json sa = ReadJson(straight / "eval_samples.json");
  const nlohmann::json sb = ReadJson(split / "eval_samples.json");
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t row = 0; row < sa.size(); ++row) {
    EXPECT_LE(it::MaxAbsDiff(sa[row]["ensemble"].get<std::vector<float>>(),
                             sb[row]["ensemble"].get<std::vector<float>>()),
              1e-5)
        << "row " << row;
  }
}

// ---- faults and metrics --------------------------------------------------------

// Rank pids from the launcher's "rank N on DEVICE: pid P" lines.
std::map<int, pid_t> RankPids(const std::string& log) {
  std::map<int, pid_t> pids;
  static const std::regex line(R"(rank (\d+) on \S+: pid (\d+))");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it) {
    pids[std::stoi((*it)[1])] = static_cast<pid_t>(std::stol((*it)[2]));
  }
  return pids;
}

TEST(TrainCommandTest, KilledRankStopsTheLauncherAndTheOtherRanksWithinTheTimeout) {
  it::WatchdogScope watchdog(seconds(120), "rank kill (launcher)");
  it::TempDir dir;
  const std::string config = dir.Write("train.yaml", SyntheticConfig(100000, 0));
  const int port = metrics_test::FreePort();
  Background launcher({es::test_paths::kTrainBin, "--config", config, "--devices", "cpu:2", "--out", dir.Path("out"),
                       "--metrics-port", std::to_string(port)},
                      {}, dir.path() / "train.log");
  ASSERT_TRUE(launcher.WaitForLog("epoch 2/", milliseconds(60000))) << launcher.Log();

  // While it trains: rank 0's /metrics, per rank and member.
  std::optional<metrics_test::Scrape> scrape =
      metrics_test::Scrape::From("127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(scrape.has_value());
  for (const char* member : {"syn_mlp", "syn_cnn"}) {
    EXPECT_TRUE(scrape->Value("es_train_loss", {{"rank", "0"}, {"member", member}}).has_value()) << member;
    EXPECT_TRUE(scrape->Value("es_train_accuracy", {{"rank", "0"}, {"member", member}}).has_value());
  }
  EXPECT_GT(scrape->Value("es_train_steps_total", {{"rank", "0"}}).value_or(0), 32);
  EXPECT_TRUE(scrape->Value("es_train_samples_per_second", {{"rank", "0"}}).has_value());
  EXPECT_GT(scrape->Value("es_train_step_seconds_count", {{"rank", "0"}}).value_or(0), 0);
  EXPECT_GT(scrape->Value("es_train_allreduce_seconds_count", {{"rank", "0"}}).value_or(0), 0);

  const std::map<int, pid_t> ranks = RankPids(launcher.Log());
  ASSERT_EQ(ranks.size(), 2u) << launcher.Log();
  const auto killed_at = Clock::now();
  ASSERT_EQ(kill(ranks.at(1), SIGKILL), 0);
  std::optional<int> status = launcher.Wait(milliseconds(kCollectiveTimeoutMs + 10000));
  const double seconds_to_exit = std::chrono::duration<double>(Clock::now() - killed_at).count();
  ASSERT_TRUE(status.has_value()) << "the launcher still runs " << seconds_to_exit << " s after the kill\n"
                                  << launcher.Log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << launcher.Log();
  const std::string log = launcher.Log();
  EXPECT_NE(log.find("rank 1 (pid " + std::to_string(ranks.at(1)) + ") killed by signal SIGKILL"),
            std::string::npos) << log;
  // Rank 0 noticed on its own (a failed collective), it was not killed.
  EXPECT_NE(log.find("rank 0 (pid " + std::to_string(ranks.at(0)) + ") exited with code 1"),
            std::string::npos) << log;
  EXPECT_LE(seconds_to_exit, kCollectiveTimeoutMs / 1000.0 + 2.0) << log;
  std::cout << "launcher exited " << seconds_to_exit << " s after rank 1 was killed\n";
}

TEST(TrainCommandTest, UnderTorchrunVariablesAKilledPeerFailsTheOtherRank) {
  it::WatchdogScope watchdog(seconds(120), "rank kill (torchrun mode)");
  it::TempDir dir;
  const std::string config = dir.Write("train.yaml", SyntheticConfig(100000, 0));
  const int port = metrics_test::FreePort();
  auto env = [&](int rank) {
    return std::vector<std::pair<std::string, std::string>>{
        {"RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", std::to_string(rank)},
        {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}};
  };
  const std::vector<std::string> argv{
      es::test_paths::kTrainBin, "--config", config, "--devices", "cpu:2", "--out", dir.Path("out")};
  Background rank0(argv, env(0), dir.path() / "rank0.log");  // hosts the store
  Background rank1(argv, env(1), dir.path() / "rank1.log");
  ASSERT_TRUE(rank0.WaitForLog("epoch 1/", milliseconds(60000))) << rank0.Log() << rank1.Log();
  EXPECT_NE(rank0.Log().find("rank 0 of 2"), std::string::npos);
  const auto killed_at = Clock::now();
  ASSERT_EQ(kill(rank1.pid(), SIGKILL), 0);
  std::optional<int> status = rank0.Wait(milliseconds(kCollectiveTimeoutMs + 10000));
  const double seconds_to_exit = std::chrono::duration<double>(Clock::now() - killed_at).count();
  ASSERT_TRUE(status.has_value()) << rank0.Log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << rank0.Log();
  EXPECT_NE(rank0.Log().find("a peer rank died"), std::string::npos) << rank0.Log();
  EXPECT_LE(seconds_to_exit, kCollectiveTimeoutMs / 1000.0 + 2.0) << rank0.Log();
}

// ---- usage errors ----------------------------------------------------------------

TEST(TrainCommandTest, UsageErrorsAreClearAndExitTwo) {
  it::WatchdogScope watchdog(seconds(120), "usage errors");
  it::TempDir dir;
  const std::string config = dir.Write("train.yaml", SyntheticConfig(1, 0));
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string needle;
  };
  const std::string bad_yaml = dir.Write("bad.yaml", "members:\n  - {name: a, architecture: vgg}\n");
  const std::string no_data = dir.Write(
      "nodata.yaml", "data: {path: " + dir.Path("nowhere") + "}\nmembers:\n  - {name: a, architecture: mlp}\n");
  const Case cases[] = {
      {{}, 2, "--config is required"},
      {{"--config", config, "--devices", "tpu:1"}, 2, "--devices 'tpu:1'"},
      {{"--config", config, "--bogus"}, 2, "--bogus"},
      {{"--config", bad_yaml}, 2, "bad.yaml:2: members[0].architecture: unknown zoo architecture 'vgg'"},
      {{"--config", config, "--out", dir.Path("fresh"), "--resume"}, 2, "no checkpoint at"},
      {{"--config", no_data, "--out", dir.Path("o2")}, 1, dir.Path("nowhere") + "/train-images-idx3-ubyte.gz"},
  };
  for (const Case& c : cases) {
    std::string output;
    EXPECT_EQ(Train(c.args, &output), c.code) << output;
    EXPECT_NE(output.find(c.needle), std::string::npos) << "wanted '" << c.needle << "' in:\n" << output;
  }
  std::string help;
  EXPECT_EQ(Train({"--help"}, &help), 0);
  EXPECT_NE(help.find("--devices"), std::string::npos);
}

}  // namespace
}  // namespace es
