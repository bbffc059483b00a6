// ensemble-cli against the real server serving the demo repository: every
// subcommand (table and JSON), inputs from .npy, JSON and raw files giving
// the same answers as the C++ client library, and every error path with its
// exit code (1 call failed, 2 usage, 3 answered no) and one-line message.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "clients/cli/input_source.h"
#include "clients/client.h"
#include "tests/common/test_paths.h"
#include "tests/integration/server_process.h"
#include "tests/integration/shared_server.h"

namespace es::cli {
namespace {

using es::it::RunCommand;
using es::it::ServerProcess;
using es::it::WatchdogScope;
using std::chrono::seconds;

const char* const kCli = es::test_paths::kCliBin;

struct CliRun {
  int rc = -1;
  std::string output;  // stdout and stderr together
};

class CliTest : public es::it::SharedServerSuite<CliTest> {
 public:  // PrepareServer: called by SharedServerSuite
  // The demo repository and demo_cascade: demo_ensemble's members as a cascade.
  static std::string PrepareServer(const std::filesystem::path& dir, ServerProcess::Options* options) {
    const std::filesystem::path repo = dir / "repo";
    std::string error;
    if (!es::it::CopyDemoRepository(repo, &error)) return error;
    std::ifstream in(repo / "demo_ensemble" / "config.yaml");
    std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string mean = "  combine: mean\n";
    const size_t at = yaml.find(mean);
    if (at == std::string::npos) return "demo_ensemble's config.yaml has no '" + mean + "'";
    yaml.replace(at, mean.size(), "  combine: cascade\n  exit_threshold: 0.9\n");
    std::filesystem::create_directories(repo / "demo_cascade");
    std::ofstream(repo / "demo_cascade" / "config.yaml") << yaml;
    options->repository = repo.string();
    return "";
  }

 protected:

  // ensemble-cli --server ADDRESS ARGS...
  static CliRun Cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {kCli, "--server", server_->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    CliRun r;
    r.rc = RunCommand(argv, seconds(60), &r.output);
    return r;
  }
  static nlohmann::json Json(const CliRun& r) {
    try {
      return nlohmann::json::parse(r.output);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not JSON (" << e.what() << "): " << r.output;
      return {};
    }
  }
  // The probabilities of `model` for FP32 `images` [batch,1,28,28], from the library.
  static std::vector<double> LibraryAnswer(const std::string& model, const std::vector<float>& images) {
    auto client = es::client::Client::Create(server_->address());
    inference::ModelInferRequest request;
    request.set_model_name(model);
    const int64_t batch = static_cast<int64_t>(images.size()) / 784;
    EXPECT_TRUE(es::client::AddInput<float>(&request, "input", {batch, 1, 28, 28}, images).ok());
    auto response = client->Infer(request);
    EXPECT_TRUE(response.ok()) << response.status().ToString();
    if (!response.ok()) return {};
    auto view = es::client::GetOutput<float>(*response, "probabilities");
    EXPECT_TRUE(view.ok());
    return {view->values.begin(), view->values.end()};
  }
  static std::vector<double> JsonProbabilities(const nlohmann::json& j) {
    for (const auto& o : j["outputs"]) {
      if (o["name"] == "probabilities") return o["data"].get<std::vector<double>>();
    }
    ADD_FAILURE() << "no probabilities in " << j.dump();
    return {};
  }

  es::it::TempDir dir_{"es_cli_test_"};
};

// The message of a failed command: one line on stderr.
void ExpectOneLineError(const CliRun& r, int rc, const std::string& needle) {
  EXPECT_EQ(r.rc, rc) << r.output;
  EXPECT_EQ(r.output.rfind("ensemble-cli: ", 0), 0u) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.output;
}

TEST_F(CliTest, LiveReadyAndIndex) {
  WatchdogScope watchdog(seconds(60), "LiveReadyAndIndex");
  CliRun r = Cli({"live"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(r.output, "live\n");
  r = Cli({"live", "--json"});
  EXPECT_EQ(Json(r)["live"], true);
  r = Cli({"ready"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(r.output, "server ready\n");
  r = Cli({"ready", "demo_ensemble"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(r.output, "model demo_ensemble ready\n");
  // A model the server does not serve is "not ready": exit 3, with the reason.
  r = Cli({"ready", "no_such_model"});
  EXPECT_EQ(r.rc, 3) << r.output;
  EXPECT_NE(r.output.find("model no_such_model not ready (NOT_FOUND: "), std::string::npos) << r.output;

  r = Cli({"index"});
  EXPECT_EQ(r.rc, 0) << r.output;
  for (const char* model : {"mlp", "wide_mlp", "cnn", "demo_ensemble"}) {
    EXPECT_NE(r.output.find(model), std::string::npos) << model << " in " << r.output;
  }
  EXPECT_NE(r.output.find("READY"), std::string::npos);
  const auto j = Json(Cli({"--json", "index"}));
  ASSERT_TRUE(j.contains("models")) << j.dump();
  EXPECT_GE(j["models"].size(), 4u);
}

TEST_F(CliTest, MetadataAndStats) {
  WatchdogScope watchdog(seconds(60), "MetadataAndStats");
  CliRun r = Cli({"metadata", "demo_ensemble"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("platform ensemble"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("input"), std::string::npos);
  EXPECT_NE(r.output.find("FP32"), std::string::npos);
  EXPECT_NE(r.output.find("[-1,1,28,28]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("probabilities"), std::string::npos);
  auto j = Json(Cli({"metadata", "mlp", "--json"}));
  EXPECT_EQ(j["name"], "mlp");
  EXPECT_EQ(j["inputs"][0]["datatype"], "FP32");
  EXPECT_EQ(j["inputs"][0]["shape"], nlohmann::json({-1, 1, 28, 28}));  // numbers, not protobuf's int64 strings
  ExpectOneLineError(Cli({"metadata", "no_such_model"}), 1, "NOT_FOUND: ");

  ASSERT_EQ(Cli({"infer", "cnn", "--batch", "3"}).rc, 0);
  r = Cli({"stats"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("SUCCESS_US"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wide_mlp"), std::string::npos) << r.output;
  j = Json(Cli({"stats", "cnn", "--json"}));
  ASSERT_EQ(j["model_stats"].size(), 1u) << j.dump();
  EXPECT_EQ(j["model_stats"][0]["name"], "cnn");
  EXPECT_GE(std::stoll(j["model_stats"][0]["inference_stats"]["success"]["count"].get<std::string>()), 1);
  ExpectOneLineError(Cli({"stats", "no_such_model"}), 1, "NOT_FOUND");
}

TEST_F(CliTest, InferPrintsTopKAndAsksEnsemblesForMembersAndUncertainty) {
  WatchdogScope watchdog(seconds(60), "InferTable");
  CliRun r = Cli({"infer", "demo_ensemble", "--batch", "2", "--top-k", "2"});
  EXPECT_EQ(r.rc, 0) << r.output;
  for (const char* needle : {"probabilities  FP32 [2,10]", "row 1:", "entropy", "disagreement", "mlp.probabilities",
                             "wide_mlp.probabilities", "cnn.probabilities"}) {
    EXPECT_NE(r.output.find(needle), std::string::npos) << needle << " in:\n" << r.output;
  }
  r = Cli({"infer", "demo_ensemble", "--plain", "--json"});
  EXPECT_EQ(r.rc, 0) << r.output;
  auto j = Json(r);
  ASSERT_EQ(j["outputs"].size(), 1u) << j.dump();
  EXPECT_EQ(j["outputs"][0]["name"], "probabilities");
  EXPECT_EQ(j["outputs"][0]["shape"], nlohmann::json({1, 10}));
  r = Cli({"infer", "demo_ensemble", "--output", "entropy", "--output", "entropy", "--json", "--id", "req-7"});
  j = Json(r);
  EXPECT_EQ(j["id"], "req-7");
  ASSERT_EQ(j["outputs"].size(), 1u) << j.dump();
  EXPECT_EQ(j["outputs"][0]["name"], "entropy");
}

// A cascade has no one set of members per row: the CLI shows its answer and
// the stage each row left at, where it shows an ensemble's members and
// uncertainty; and every answer's parameters (how the server answered).
TEST_F(CliTest, InferOnACascadeShowsExitStagesAndEveryAnswerItsParameters) {
  WatchdogScope watchdog(seconds(60), "InferCascade");
  CliRun r = Cli({"infer", "demo_cascade", "--batch", "3"});
  EXPECT_EQ(r.rc, 0) << r.output;
  for (const char* needle : {"probabilities  FP32 [3,10]", "exit_stage  INT32 [3]", "parameters: ", "stages_used="}) {
    EXPECT_NE(r.output.find(needle), std::string::npos) << needle << " in:\n" << r.output;
  }
  EXPECT_EQ(r.output.find("entropy"), std::string::npos) << r.output;
  r = Cli({"infer", "demo_cascade", "--output", "exit_stage", "--json"});
  EXPECT_EQ(r.rc, 0) << r.output;
  nlohmann::json j = Json(r);
  ASSERT_EQ(j["outputs"].size(), 1u) << j.dump();
  EXPECT_EQ(j["outputs"][0]["name"], "exit_stage");
  EXPECT_TRUE(j["parameters"].contains("stages_used")) << j.dump();

  // An ensemble's answer says which members answered.
  j = Json(Cli({"infer", "demo_ensemble", "--json"}));
  ASSERT_TRUE(j["parameters"].is_object()) << j.dump();
  EXPECT_EQ(j["parameters"]["members_used"], 3) << j.dump();
  r = Cli({"infer", "demo_ensemble"});
  EXPECT_NE(r.output.find("members_used=3"), std::string::npos) << r.output;
}

TEST_F(CliTest, InputsFromFilesGiveTheLibrarysAnswers) {
  WatchdogScope watchdog(seconds(60), "InputsFromFiles");
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  std::vector<float> images(2 * 784);
  for (auto& v : images) v = unit(rng);
  const auto expected = LibraryAnswer("mlp", images);
  ASSERT_EQ(expected.size(), 20u);

  // .npy
  const std::string npy = dir_.Path("images.npy");
  const es::Status written = WriteNpyFloat32(npy, {2, 1, 28, 28}, images);
  ASSERT_TRUE(written.ok()) << written.ToString();
  CliRun r = Cli({"infer", "mlp", "--input", "input=" + npy, "--json"});
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(JsonProbabilities(Json(r)), expected);
  // A single-input model takes the source without NAME=.
  r = Cli({"infer", "mlp", "--input", npy, "--json"});
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(JsonProbabilities(Json(r)), expected);

  // JSON file, flat: the batch dim from the count.
  nlohmann::json flat = std::vector<double>(images.begin(), images.end());
  const std::string json_file = dir_.Write("images.json", flat.dump());
  r = Cli({"infer", "mlp", "--input", json_file, "--json"});
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(JsonProbabilities(Json(r)), expected);

  // Raw FP32 bytes.
  const std::string raw = dir_.Write("images.raw", std::string(reinterpret_cast<const char*>(images.data()),
                                                               images.size() * sizeof(float)));
  r = Cli({"infer", "mlp", "--input", "raw:" + raw, "--json"});
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(JsonProbabilities(Json(r)), expected);

  // Inline JSON, nested, one image.
  nlohmann::json nested = nlohmann::json::array();
  for (int y = 0; y < 28; ++y) {
    nested.push_back(std::vector<double>(images.begin() + y * 28, images.begin() + y * 28 + 28));
  }
  r = Cli({"infer", "mlp", "--input", "json:" + nlohmann::json::array({nested}).dump(), "--json"});
  ASSERT_EQ(r.rc, 0) << r.output;
  // (Compared with a batch of one from the library: a batch of two may round differently.)
  EXPECT_EQ(JsonProbabilities(Json(r)), LibraryAnswer("mlp", std::vector<float>(images.begin(), images.begin() + 784)));
}

TEST_F(CliTest, InferErrorPaths) {
  WatchdogScope watchdog(seconds(60), "InferErrorPaths");
  ExpectOneLineError(Cli({"infer", "no_such_model"}), 1, "NOT_FOUND");
  // The server rejects a batch over max_batch_size: its code and message.
  ExpectOneLineError(Cli({"infer", "mlp", "--batch", "100"}), 1, "INVALID_ARGUMENT: ");
  // A deadline too short: the CLI's first call (the model's metadata, which
  // infer reads first) is cut off at it. The router is stopped meanwhile, so
  // that no answer can come first however fast the machine.
  {
    es::it::RouterPause pause(*server_);
    ExpectOneLineError(Cli({"--timeout-ms", "1", "infer", "demo_ensemble", "--batch", "64"}), 1, "DEADLINE_EXCEEDED");
  }
  // Input files: missing, not fitting the model.
  ExpectOneLineError(Cli({"infer", "mlp", "--input", dir_.Path("missing.npy")}), 1, "missing.npy");
  const std::string wrong = dir_.Path("wrong.npy");
  ASSERT_TRUE(WriteNpyFloat32(wrong, {1, 27, 28}, std::vector<float>(27 * 28, 0.5f)).ok());
  ExpectOneLineError(Cli({"infer", "mlp", "--input", wrong}), 1, "does not fit");
  // Usage: an input the model does not have, a bad flag, no subcommand.
  ExpectOneLineError(Cli({"infer", "mlp", "--input", "pixels=random"}), 2, "no input 'pixels'");
  ExpectOneLineError(Cli({"infer", "mlp", "--bogus"}), 2, "--bogus");
  ExpectOneLineError(Cli({}), 2, "subcommand");
  ExpectOneLineError(Cli({"bogus"}), 2, "unknown subcommand 'bogus'");
  ExpectOneLineError(Cli({"--bogus", "live"}), 2, "unknown option '--bogus'");
  ExpectOneLineError(Cli({"metadata"}), 2, "model");
}

// --streaming: the request N times over one ModelStreamInfer
// stream; every answer carries its id and the unary call's values; an
// answer that is an error is the server's code and message (exit 1).
TEST_F(CliTest, InferStreamingAnswersByIdAsUnary) {
  WatchdogScope watchdog(seconds(60), "InferStreaming");
  const CliRun unary = Cli({"infer", "demo_ensemble", "--plain", "--json", "--seed", "5"});
  ASSERT_EQ(unary.rc, 0) << unary.output;
  const std::vector<double> expected = JsonProbabilities(Json(unary));
  CliRun r = Cli({"infer", "demo_ensemble", "--plain", "--json", "--seed", "5", "--streaming", "--repeat", "3", "--id",
                  "s"});
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto answers = Json(r);
  ASSERT_TRUE(answers.is_array()) << r.output;
  ASSERT_EQ(answers.size(), 3u) << r.output;
  std::set<std::string> ids;
  for (const auto& a : answers) {
    ids.insert(a["id"].get<std::string>());
    const std::vector<double> got = JsonProbabilities(a);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-6) << i;
  }
  EXPECT_EQ(ids, (std::set<std::string>{"s-0", "s-1", "s-2"}));
  // The table, one answer.
  r = Cli({"infer", "mlp", "--streaming"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("probabilities  FP32 [1,10]"), std::string::npos) << r.output;
  // The server rejects a batch over max_batch_size: an error answer, not a failed stream.
  ExpectOneLineError(Cli({"infer", "mlp", "--batch", "100", "--streaming"}), 1, "INVALID_ARGUMENT: ");
  r = Cli({"infer", "mlp", "--batch", "100", "--streaming", "--repeat", "2", "--id", "e"});
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("request 'e-0': INVALID_ARGUMENT: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("request 'e-1': INVALID_ARGUMENT: "), std::string::npos) << r.output;
  // --repeat is for --streaming only.
  ExpectOneLineError(Cli({"infer", "mlp", "--repeat", "2"}), 2, "--repeat");
}

// --shm: the inputs through a shared-memory region the call
// creates and registers: the same answer as in the message, and nothing left
// behind (no region registered, no object in /dev/shm).
TEST_F(CliTest, InferThroughSharedMemoryGivesTheSameAnswerAndCleansUp) {
  WatchdogScope watchdog(seconds(60), "InferShm");
  const auto shm_objects = [] { return es::it::ShmObjectsOfStartedCommands("es_client"); };
  const std::set<std::string> before = shm_objects();
  const CliRun plain = Cli({"infer", "demo_ensemble", "--plain", "--json", "--seed", "9", "--batch", "3"});
  ASSERT_EQ(plain.rc, 0) << plain.output;
  const CliRun shm = Cli({"infer", "demo_ensemble", "--plain", "--json", "--seed", "9", "--batch", "3", "--shm"});
  ASSERT_EQ(shm.rc, 0) << shm.output;
  EXPECT_EQ(JsonProbabilities(Json(shm)), JsonProbabilities(Json(plain)));
  EXPECT_EQ(shm_objects(), before);
  auto client = es::client::Client::Create(server_->address());
  grpc::ClientContext ctx;
  client->SetDeadline(&ctx, {});
  inference::SystemSharedMemoryStatusResponse regions;
  ASSERT_TRUE(client->stub().SystemSharedMemoryStatus(&ctx, {}, &regions).ok());
  EXPECT_EQ(regions.regions_size(), 0);
  // A server-side error still unregisters and unlinks.
  ExpectOneLineError(Cli({"infer", "mlp", "--batch", "100", "--shm"}), 1, "INVALID_ARGUMENT: ");
  EXPECT_EQ(shm_objects(), before);
}

TEST(CliNoServer, UnreachableServerAndHelp) {
  WatchdogScope watchdog(seconds(60), "UnreachableServerAndHelp");
  const std::string address = "127.0.0.1:" + std::to_string(es::it::ClosedLoopbackPort());
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"live"}, {"ready"}, {"index"}, {"metadata", "mlp"}, {"stats"}, {"infer", "mlp"}}) {
    std::vector<std::string> argv = {kCli, "--server", address};
    argv.insert(argv.end(), args.begin(), args.end());
    CliRun r;
    r.rc = RunCommand(argv, seconds(30), &r.output);
    ExpectOneLineError(r, 1, "UNAVAILABLE");
    EXPECT_NE(r.output.find("(no connection: is the server up at that address? If it serves TLS, add --ssl"),
              std::string::npos)
        << r.output;
  }
  CliRun help;
  help.rc = RunCommand({kCli, "--help"}, seconds(30), &help.output);
  EXPECT_EQ(help.rc, 0);
  for (const char* sub : {"live", "ready", "index", "metadata", "stats", "infer"}) {
    EXPECT_NE(help.output.find(sub), std::string::npos) << sub;
  }
}

}  // namespace
}  // namespace es::cli
