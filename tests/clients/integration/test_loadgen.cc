// ensemble-loadgen against the real server: a short closed-loop sweep whose
// JSON has one step per concurrency with positive throughput and ordered
// percentiles, whose request count matches the server's own statistics, and
// whose CSV and SVG are written; the tool's ceiling on the echo model
// (clients/make_echo_model.py); an open-loop Poisson run near its rate; and
// the exit codes: 2 for usage errors, 1 for an unreachable server or a model
// the server does not know, 0 for --help. Faults (those of the chaos soak,
// benchmarks/run_chaos.sh): a server that goes away mid-run ends the run
// after a bounded run of connection failures, backing off in between, and
// the report keeps what succeeded; a stalled server's calls are counted as
// hung (answered late) or unanswered (cancelled at the end). --server-pid:
// the /proc reading it rests on (process_cpu.h), the server's CPU per
// request in the JSON, table and CSV over gRPC and HTTP, and a PID with no
// process refused (exit 2). Labelled data (--inputs, --labels): every answer
// checked, right and wrong labels told apart.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "clients/cli/input_source.h"
#include "clients/client.h"
#include "clients/loadgen/process_cpu.h"
#include "tests/common/test_paths.h"
#include "tests/integration/server_process.h"
#include "tests/integration/shared_server.h"

namespace es::loadgen {
namespace {

using es::it::RunCommand;
using es::it::ServerProcess;
using es::it::WatchdogScope;
using std::chrono::seconds;

const char* const kLoadgen = es::test_paths::kLoadgenBin;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

uint64_t SuccessCount(const es::client::Client& client, const std::string& model) {
  auto stats = client.ModelStatistics(model);
  EXPECT_TRUE(stats.ok()) << stats.status().ToString();
  if (!stats.ok() || stats->model_stats_size() != 1) return 0;
  return stats->model_stats(0).inference_stats().success().count();
}

// One server for the suite, on the demo repository plus the echo model.
class LoadgenTest : public es::it::SharedServerSuite<LoadgenTest> {
 public:  // PrepareServer: called by SharedServerSuite
  // The demo repository plus the echo model (make_echo_model.py).
  static std::string PrepareServer(const std::filesystem::path& dir, ServerProcess::Options* options) {
    std::string error;
    const auto repo = dir / "repo";
    if (!es::it::CopyDemoRepository(repo, &error)) return "copying the demo repository: " + error;
    std::string output;
    const int rc =
        RunCommand({"/usr/bin/python3", es::test_paths::kMakeEchoPy, "--out", repo.string()}, seconds(120), &output);
    if (rc != 0) return "make_echo_model.py failed (rc " + std::to_string(rc) + "): " + output;
    options->repository = repo.string();
    return "";
  }

 protected:
  // `rows` echo-model inputs whose largest pixel is pixel 0, and labels of
  // which only row 0's is right (0; the rest say 1): the count of right
  // answers is how often row 0 was checked. Writes out_/rows.npy and
  // out_/first_right.npy; false (with a test failure) if it could not.
  bool WriteOnlyTheFirstRowRight(size_t rows, std::string* x, std::string* y) {
    constexpr size_t kPixels = size_t{28} * 28;
    std::vector<float> images(rows * kPixels, 0.0F), labels(rows, 1.0F);
    labels[0] = 0.0F;
    for (size_t r = 0; r < rows; ++r) images[r * kPixels] = 1.0F;
    *x = out_.Path("rows.npy");
    *y = out_.Path("first_right.npy");
    const bool written = es::cli::WriteNpyFloat32(*x, {static_cast<int64_t>(rows), 1, 28, 28}, images).ok() &&
                         es::cli::WriteNpyFloat32(*y, {static_cast<int64_t>(rows)}, labels).ok();
    EXPECT_TRUE(written) << "writing " << *x << " and " << *y;
    return written;
  }

  es::it::TempDir out_{"es_loadgen_out_"};
};

TEST_F(LoadgenTest, ClosedLoopSweepReportsEveryStepAndMatchesServerCounts) {
  WatchdogScope watchdog(seconds(120), "ClosedLoopSweep");
  auto client = es::client::Client::Create(server_->address());
  const uint64_t before = SuccessCount(*client, "demo_ensemble");
  const std::string json = out_.Path("out.json"), csv = out_.Path("out.csv"), svg = out_.Path("out.svg");
  std::string output;
  const int rc = RunCommand({kLoadgen, "--server", server_->address(), "--model", "demo_ensemble", "--duration-s", "1",
                             "--warmup-s", "0.5", "--concurrency", "1:4:x2", "--max-windows", "4", "--json", json,
                             "--csv", csv, "--svg", svg},  // --ceiling-model auto: finds 'echo'
                            seconds(100), &output);
  ASSERT_EQ(rc, 0) << output;
  const uint64_t after = SuccessCount(*client, "demo_ensemble");

  // The table on stdout.
  EXPECT_NE(output.find("p99.9_us"), std::string::npos) << output;
  EXPECT_NE(output.find("tool ceiling:"), std::string::npos) << output;

  const auto j = nlohmann::json::parse(Slurp(json));
  EXPECT_EQ(j["model"]["name"], "demo_ensemble");
  ASSERT_EQ(j["steps"].size(), 3u) << j.dump(2);
  const int expected_concurrency[] = {1, 2, 4};
  for (size_t i = 0; i < 3; ++i) {
    const auto& s = j["steps"][i];
    SCOPED_TRACE("step " + std::to_string(i));
    EXPECT_EQ(s["mode"], "closed");
    EXPECT_EQ(s["concurrency"], expected_concurrency[i]);
    EXPECT_GT(s["throughput_rps"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(s["rows_per_s"].get<double>(), s["throughput_rps"].get<double>()) << "batch 1";
    EXPECT_GE(s["windows"].get<int>(), 3);
    EXPECT_LE(s["windows"].get<int>(), 4);
    EXPECT_EQ(s["failed"], 0u);
    EXPECT_TRUE(s["errors"].empty());
    const auto& l = s["latency_us"];
    EXPECT_GT(l["p50"].get<double>(), 0);
    EXPECT_LE(l["min"].get<double>(), l["p50"].get<double>());
    EXPECT_LE(l["p50"].get<double>(), l["p90"].get<double>());
    EXPECT_LE(l["p90"].get<double>(), l["p95"].get<double>());
    EXPECT_LE(l["p95"].get<double>(), l["p99"].get<double>());
    EXPECT_LE(l["p99"].get<double>(), l["p99_9"].get<double>());
    EXPECT_LE(l["p99_9"].get<double>(), l["max"].get<double>());
    // The server's figures over the same windows.
    ASSERT_TRUE(s["server"].is_object()) << s.dump(2);
    EXPECT_GT(s["server"]["success"].get<uint64_t>(), 0u);
    EXPECT_GT(s["server"]["success_us"].get<double>(), 0);
    EXPECT_LE(s["server"]["success_us"].get<double>(), l["mean"].get<double>() * 1.05)
        << "the server's own time is within the client's latency";
  }
  // Higher concurrency keeps more calls waiting: p50 does not fall.
  EXPECT_GE(j["steps"][2]["latency_us"]["p50"].get<double>(), j["steps"][0]["latency_us"]["p50"].get<double>());

  // Every successful call of the run (warm-ups included) is one the server
  // counted: the JSON's totals, and our own reading of ModelStatistics (plus
  // the one check call the tool makes before the sweep).
  const auto& totals = j["totals"];
  EXPECT_EQ(totals["client_failed"], 0u);
  EXPECT_EQ(totals["client_ok"].get<uint64_t>(), totals["server_success"].get<uint64_t>());
  EXPECT_EQ(after - before, totals["client_ok"].get<uint64_t>() + 1);
  uint64_t measured = 0;
  for (const auto& s : j["steps"]) measured += s["ok"].get<uint64_t>();
  EXPECT_LT(measured, totals["client_ok"].get<uint64_t>()) << "warm-ups and drains are counted in the totals only";

  // The ceiling: the echo model, faster than the ensemble.
  ASSERT_TRUE(j["ceiling"].is_object());
  EXPECT_EQ(j["ceiling"]["model"], "echo");
  EXPECT_EQ(j["ceiling"]["concurrency"], 4);
  EXPECT_GT(j["ceiling"]["throughput_rps"].get<double>(), j["peak_throughput_rps"].get<double>());

  // CSV: a header and one row per step.
  const std::string csv_text = Slurp(csv);
  EXPECT_EQ(std::count(csv_text.begin(), csv_text.end(), '\n'), 4) << csv_text;
  EXPECT_EQ(csv_text.rfind("model,mode,concurrency,rate,batch", 0), 0u);
  // SVG: a document with the two curves.
  const std::string svg_text = Slurp(svg);
  EXPECT_EQ(svg_text.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg_text.find("</svg>"), std::string::npos);
  EXPECT_NE(svg_text.find("p50 latency"), std::string::npos);
  EXPECT_NE(svg_text.find("p99 latency"), std::string::npos);
}

TEST_F(LoadgenTest, OpenLoopPoissonRunsNearItsRate) {
  WatchdogScope watchdog(seconds(60), "OpenLoopPoisson");
  const std::string json = out_.Path("open.json");
  std::string output;
  const int rc = RunCommand({kLoadgen, "--server", server_->address(), "--model", "mlp", "--batch", "4", "--rate",
                             "200", "--poisson", "--duration-s", "1", "--warmup-s", "0.3", "--max-windows", "3",
                             "--json", json, "--ceiling-model", "none"},
                            seconds(40), &output);
  ASSERT_EQ(rc, 0) << output;
  const auto j = nlohmann::json::parse(Slurp(json));
  EXPECT_EQ(j["config"]["arrivals"], "poisson");
  ASSERT_EQ(j["steps"].size(), 1u);
  const auto& s = j["steps"][0];
  EXPECT_EQ(s["mode"], "open");
  EXPECT_DOUBLE_EQ(s["rate"].get<double>(), 200);
  EXPECT_NEAR(s["send_rate_rps"].get<double>(), 200, 60) << "Poisson arrivals average the rate";
  EXPECT_GT(s["throughput_rps"].get<double>(), 100);
  EXPECT_NEAR(s["rows_per_s"].get<double>(), 4 * s["throughput_rps"].get<double>(), 1e-6);
  EXPECT_EQ(s["skipped"], 0u);
  EXPECT_EQ(j["model"]["inputs"][0]["shape"], nlohmann::json({4, 1, 28, 28}));
  EXPECT_TRUE(j["ceiling"].is_null());
  EXPECT_NE(output.find("tool ceiling: not measured (--ceiling-model none)"), std::string::npos) << output;
}

TEST_F(LoadgenTest, RunOnTheEchoModelIsTheCeiling) {
  WatchdogScope watchdog(seconds(60), "RunOnTheEchoModel");
  const std::string json = out_.Path("echo.json");
  std::string output;
  const int rc = RunCommand({kLoadgen, "--server", server_->address(), "--model", "echo", "--concurrency", "2",
                             "--duration-s", "0.3", "--warmup-s", "0.2", "--max-windows", "3", "--json", json},
                            seconds(40), &output);
  ASSERT_EQ(rc, 0) << output;
  EXPECT_NE(output.find("tool ceiling: this run is on the ceiling model 'echo'"), std::string::npos) << output;
  const auto j = nlohmann::json::parse(Slurp(json));
  EXPECT_TRUE(j["ceiling_is_this_run"].get<bool>());
  EXPECT_TRUE(j["ceiling"].is_null()) << "no extra step";
  EXPECT_GT(j["peak_throughput_rps"].get<double>(), 0);
}

// --inputs/--labels on the echo model: its answer is its input, so a row's
// class is the index of its largest pixel. Labels that say so: every row
// correct; labels shifted by one: none. Every answer is checked (rows =
// answers x batch, all of the turn's successful answers), the table shows
// the accuracy, and a model with another input shape refuses the file.
TEST_F(LoadgenTest, LabelledDataIsSentInTurnAndEveryAnswerChecked) {
  WatchdogScope watchdog(seconds(90), "LabelledData");
  constexpr size_t kRows = 20, kPixels = size_t{28} * 28;
  std::vector<float> images(kRows * kPixels);
  std::vector<float> labels(kRows), shifted(kRows);
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t p = 0; p < kPixels; ++p) images[r * kPixels + p] = static_cast<float>((p * 7 + r * 13) % 97) / 97.0F;
    const size_t brightest = (r * 31 + 5) % kPixels;
    images[r * kPixels + brightest] = 2.0F;
    labels[r] = static_cast<float>(brightest);
    shifted[r] = static_cast<float>((brightest + 1) % kPixels);
  }
  const std::string x = out_.Path("x.npy"), y = out_.Path("y.npy"), wrong = out_.Path("wrong.npy");
  ASSERT_TRUE(es::cli::WriteNpyFloat32(x, {static_cast<int64_t>(kRows), 1, 28, 28}, images).ok());
  ASSERT_TRUE(es::cli::WriteNpyFloat32(y, {static_cast<int64_t>(kRows)}, labels).ok());
  ASSERT_TRUE(es::cli::WriteNpyFloat32(wrong, {static_cast<int64_t>(kRows)}, shifted).ok());
  for (const auto& [file, accuracy] : {std::pair{y, 1.0}, {wrong, 0.0}}) {
    const std::string json = out_.Path("labelled.json");
    std::string output;
    const int rc = RunCommand({kLoadgen, "--server", server_->address(), "--model", "echo", "--batch", "2",
                               "--inputs", x, "--labels", file, "--concurrency", "2", "--duration-s", "0.3",
                               "--warmup-s", "0.2", "--max-windows", "3", "--json", json},
                              seconds(40), &output);
    ASSERT_EQ(rc, 0) << output;
    EXPECT_NE(output.find("10 requests of 2 row(s), sent in turn"), std::string::npos) << output;
    EXPECT_NE(output.find("acc%"), std::string::npos) << output;
    const auto j = nlohmann::json::parse(Slurp(json));
    const auto& step = j["steps"][0];
    const auto& l = step["labels"];
    ASSERT_TRUE(l.is_object()) << step.dump();
    // Every successful answer of the measured turn is checked; the step's
    // ok also counts the warm-up's calls: the 2 in flight when its sample
    // was taken, and the 2 its slots may have sent before the turn began.
    EXPECT_LE(l["answers"].get<uint64_t>(), step["ok"].get<uint64_t>());
    EXPECT_GE(l["answers"].get<uint64_t>() + 4, step["ok"].get<uint64_t>()) << "every successful answer is checked";
    EXPECT_EQ(l["rows"].get<uint64_t>(), 2 * l["answers"].get<uint64_t>());
    EXPECT_GT(l["rows"].get<uint64_t>(), 0u);
    EXPECT_EQ(l["unreadable"].get<uint64_t>(), 0u);
    EXPECT_DOUBLE_EQ(l["accuracy"].get<double>(), accuracy) << file;
    EXPECT_EQ(l["by_served_by"][""]["rows"], l["rows"]) << "echo names no rung";
  }
  std::string output;
  EXPECT_EQ(RunCommand({kLoadgen, "--server", server_->address(), "--model", "echo", "--inputs", y, "--concurrency",
                        "1"},
                       seconds(40), &output),
            2)
      << output;
  EXPECT_NE(output.find("does not fit the model"), std::string::npos) << output;
}

TEST(LoadgenExitCodes, UsageErrorsExitTwo) {
  WatchdogScope watchdog(seconds(60), "UsageErrorsExitTwo");
  const std::vector<std::vector<std::string>> cases = {
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--bogus"},
      {kLoadgen, "--server", "127.0.0.1:1"},  // no --model
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--concurrency", "0:4:x2"},
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--concurrency", "4", "--rate", "10"},
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--batch", "0"},
      {kLoadgen, "--server", "no-port", "--model", "m"},
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--concurrency", "4", "--poisson"},
      // ModelStreamInfer is closed loop only; --streams needs --streaming.
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--rate", "10", "--streaming"},
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--streams", "2"},
      // Output paths are checked before the run (the port is closed: a run would exit 1).
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--csv", "/nonexistent/dir/x.csv"},
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--json", "/nonexistent/dir/x.json"},
      // Labelled data: labels need rows; the engines that send one request cannot send them.
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--labels", "y.npy"},
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--inputs", "x.npy", "--label-output", "p"},
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--inputs", "x.npy", "--http"},
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--inputs", "x.npy", "--streaming"},
      // A counted step is neither a timed soak nor a stream's (which has no turn to count).
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--requests", "10", "--soak-s", "5"},
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--requests", "10", "--streaming"},
      {kLoadgen, "--server", "127.0.0.1:1", "--model", "m", "--requests", "0"},
  };
  for (const auto& argv : cases) {
    std::string output;
    const int rc = RunCommand(argv, seconds(20), &output);
    std::string line;
    for (size_t i = 1; i < argv.size(); ++i) line += argv[i] + " ";
    EXPECT_EQ(rc, 2) << line << "\n" << output;
    EXPECT_EQ(output.rfind("ensemble-loadgen: ", 0), 0u) << line << "\n" << output;
    EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << "one line: " << output;
  }
  std::string help;
  EXPECT_EQ(RunCommand({kLoadgen, "--help"}, seconds(20), &help), 0);
  EXPECT_NE(help.find("--concurrency"), std::string::npos) << help;
}

TEST(LoadgenExitCodes, UnreachableServerExitsOneWithOneLine) {
  WatchdogScope watchdog(seconds(60), "UnreachableServerExitsOne");
  std::string output;
  const auto start = std::chrono::steady_clock::now();
  const int rc = RunCommand({kLoadgen, "--server", "127.0.0.1:" + std::to_string(es::it::ClosedLoopbackPort()), "--model", "mlp"},
                            seconds(30), &output);
  EXPECT_EQ(rc, 1) << output;
  EXPECT_EQ(output.rfind("ensemble-loadgen: cannot reach server 127.0.0.1:", 0), 0u) << output;
  EXPECT_NE(output.find("UNAVAILABLE"), std::string::npos) << output;
  EXPECT_NE(output.find("(no connection: is the server up at that address?"), std::string::npos) << output;
  EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
}

TEST_F(LoadgenTest, UnknownModelOrBadShapeExitsWithTheServersError) {
  WatchdogScope watchdog(seconds(60), "UnknownModel");
  std::string output;
  int rc = RunCommand({kLoadgen, "--server", server_->address(), "--model", "no_such_model"}, seconds(30), &output);
  EXPECT_EQ(rc, 1) << output;
  EXPECT_NE(output.find("NOT_FOUND"), std::string::npos) << output;
  EXPECT_NE(output.find("no_such_model"), std::string::npos) << output;
  // A --shape for a dim the model fixes is the user's mistake: exit 2.
  output.clear();
  rc = RunCommand({kLoadgen, "--server", server_->address(), "--model", "mlp", "--shape", "input:1,27,28"},
                  seconds(30), &output);
  EXPECT_EQ(rc, 2) << output;
  EXPECT_NE(output.find("--shape input"), std::string::npos) << output;
  // Even one that agrees with the fixed dims: --shape is for variable dims only.
  output.clear();
  rc = RunCommand({kLoadgen, "--server", server_->address(), "--model", "mlp", "--shape", "input:1,28,28"},
                  seconds(30), &output);
  EXPECT_EQ(rc, 2) << output;
  EXPECT_NE(output.find("--shape input: the model's input has fixed dims"), std::string::npos) << output;
  // A batch over the model's max_batch_size: the server rejects the check call.
  output.clear();
  rc = RunCommand({kLoadgen, "--server", server_->address(), "--model", "mlp", "--batch", "1000"}, seconds(30),
                  &output);
  EXPECT_EQ(rc, 1) << output;
  EXPECT_NE(output.find("rejects the request"), std::string::npos) << output;
}

// The measured window sends the rows from the first, whatever the warm-up
// sent: of 4,000 rows only row 0's label is right, and a window shorter
// than a pass (a few hundred answers at most, at concurrency 1) must count
// exactly that one right answer. Sent on from where the warm-up stopped it
// would count none (the warm-up and the window together stay under a pass).
TEST_F(LoadgenTest, TheMeasuredWindowStartsAtTheFirstRow) {
  WatchdogScope watchdog(seconds(90), "FirstRow");
  constexpr size_t kRows = 4000;
  std::string x, y;
  ASSERT_TRUE(WriteOnlyTheFirstRowRight(kRows, &x, &y));
  const std::string json = out_.Path("first.json");
  std::string output;
  const int rc = RunCommand(
      {kLoadgen, "--server", server_->address(), "--model", "echo", "--inputs", x, "--labels", y, "--concurrency", "1",
       "--warmup-s", "0.2", "--duration-s", "0.2", "--max-windows", "1", "--json", json},
      seconds(40), &output);
  ASSERT_EQ(rc, 0) << output;
  const auto j = nlohmann::json::parse(Slurp(json));
  const auto& l = j["steps"][0]["labels"];
  ASSERT_TRUE(l.is_object()) << j.dump();
  ASSERT_GT(l["answers"].get<uint64_t>(), 0u) << output;
  // The warm-up and the window together less than a pass: the check needs it.
  ASSERT_LT(j["totals"]["client_ok"].get<uint64_t>(), kRows) << output;
  EXPECT_EQ(l["correct"].get<uint64_t>(), 1u) << "the window's answers did not start at row 0\n" << output;
}

// --requests: a counted step checks exactly its own calls, from the first
// row, closed loop and open loop alike. Of 300 rows only row 0 is labelled
// right: 600 calls (two passes) must count 600 answers and 2 right, and so
// must 301 (the first row twice: only a turn that starts at row 0 gives 2).
// Without the limit the step would count what a time window holds; with
// the warm-up's answers checked (calls in flight when it ended) more than
// the calls, and rows other than the turn's. By request the JSON says which
// rows the answers drew: each of the 300 twice (the first 301: row 0
// twice, the rest once), right only at row 0.
TEST_F(LoadgenTest, ACountedStepChecksItsOwnCallsFromTheFirstRow) {
  WatchdogScope watchdog(seconds(150), "CountedStep");
  constexpr size_t kRows = 300;
  std::string x, y;
  ASSERT_TRUE(WriteOnlyTheFirstRowRight(kRows, &x, &y));
  const std::vector<std::vector<std::string>> loads = {{"--requests", "600", "--concurrency", "4"},
                                                       {"--requests", "600", "--rate", "3000", "--poisson"},
                                                       {"--requests", "301", "--concurrency", "4"}};
  for (const auto& load : loads) {
    const uint64_t calls = std::stoull(load[1]);
    const std::string json = out_.Path("counted.json");
    std::vector<std::string> argv = {kLoadgen,
                                     "--server",
                                     server_->address(),
                                     "--model",
                                     "echo",
                                     "--inputs",
                                     x,
                                     "--labels",
                                     y,
                                     "--warmup-s",
                                     "0.3",
                                     "--duration-s",
                                     "0.1",
                                     "--ceiling-model",
                                     "none",
                                     "--json",
                                     json};
    argv.insert(argv.end(), load.begin(), load.end());
    const std::string what = load[1] + " calls, " + load[2] + "\n";
    std::string output;
    ASSERT_EQ(RunCommand(argv, seconds(60), &output), 0) << what << output;
    const auto j = nlohmann::json::parse(Slurp(json));
    const auto& step = j["steps"][0];
    // The step's sends are counted by time: a call or two of the warm-up may
    // have left between its end and the turn's start.
    EXPECT_GE(step["sent"].get<uint64_t>(), calls) << what << output;
    EXPECT_LE(step["sent"].get<uint64_t>(), calls + 10) << what << output;
    EXPECT_EQ(step["labels"]["answers"].get<uint64_t>(), calls) << what << output;
    EXPECT_EQ(step["labels"]["correct"].get<uint64_t>(), 2u) << what << output;
    const auto& by_request = step["labels"]["by_request"];
    ASSERT_EQ(by_request["answers"].size(), kRows) << what << by_request.dump();
    ASSERT_EQ(by_request["correct"].size(), kRows) << what << by_request.dump();
    for (size_t r = 0; r < kRows; ++r) {
      const uint64_t times = calls / kRows + (r < calls % kRows ? 1 : 0);
      EXPECT_EQ(by_request["answers"][r].get<uint64_t>(), times) << what << "row " << r;
      EXPECT_EQ(by_request["correct"][r].get<uint64_t>(), r == 0 ? 2u : 0u) << what << "row " << r;
    }
    EXPECT_EQ(j["config"]["requests"].get<uint64_t>(), calls) << j.dump();
    // The warm-up was long enough to send a pass: the turn did restart.
    EXPECT_GT(j["totals"]["client_sent"].get<uint64_t>(), calls + kRows) << what << output;
  }
}

// A run whose server is SIGTERMed 3 s in (a regression test: it used to fire
// half a million failed calls and end with "no request succeeded"). With
// --max-connection-failures 400 and 8 slots backing off from 1 to 100 ms,
// the run needs seconds of failures to end: without the backoff it would end
// within milliseconds of the server's exit.
TEST(LoadgenFaults, ServerGoneEndsTheRunAfterBackingOffAndReportsWhatSucceeded) {
  WatchdogScope watchdog(seconds(120), "ServerGone");
  auto server = ServerProcess::Start(ServerProcess::Options{});
  ASSERT_NE(server, nullptr) << ServerProcess::last_start_error();
  es::it::TempDir out("es_loadgen_gone_");
  const std::string json = out.Path("gone.json");
  std::string output;
  int rc = -100;
  using Clock = std::chrono::steady_clock;
  Clock::time_point loadgen_end;
  std::thread run([&] {
    rc = RunCommand({kLoadgen, "--server", server->address(), "--model", "mlp", "--concurrency", "8", "--duration-s",
                     "5", "--warmup-s", "0.5", "--max-connection-failures", "400", "--ceiling-model", "none", "--json",
                     json},
                    seconds(90), &output);
    loadgen_end = Clock::now();
  });
  std::this_thread::sleep_for(seconds(3));
  server->Signal(SIGTERM);
  int status = 0;
  const bool exited = server->WaitExit(std::chrono::milliseconds(20000), &status);
  const auto server_end = Clock::now();
  run.join();
  ASSERT_TRUE(exited) << "the server did not exit after SIGTERM";

  EXPECT_EQ(rc, 1) << output;
  EXPECT_NE(output.find("ensemble-loadgen: lost the server"), std::string::npos) << output;
  EXPECT_NE(output.find("400 connection failures in a row"), std::string::npos) << output;
  EXPECT_EQ(output.find("no request succeeded"), std::string::npos) << output;
  const double after_exit_s = std::chrono::duration<double>(loadgen_end - server_end).count();
  EXPECT_GT(after_exit_s, 1.5) << "400 failures in a row came too fast: no backoff?\n" << output;
  EXPECT_LT(after_exit_s, 20) << output;

  const auto j = nlohmann::json::parse(Slurp(json));
  ASSERT_EQ(j["steps"].size(), 1u) << j.dump(2);
  const auto& step = j["steps"][0];
  EXPECT_GT(step["ok"].get<uint64_t>(), 0u) << "what succeeded before the server left is reported";
  EXPECT_TRUE(step["lost_server"].is_string());
  EXPECT_TRUE(j["lost_server"].is_string());
  const auto& totals = j["totals"];
  EXPECT_GT(totals["client_ok"].get<uint64_t>(), 100u);
  EXPECT_GE(totals["client_failed"].get<uint64_t>(), 400u);
  EXPECT_LT(totals["client_failed"].get<uint64_t>(), 2000u) << "a bounded run of failures, not a flood";
  EXPECT_GE(totals["client_errors"]["UNAVAILABLE"].get<uint64_t>(), 400u) << totals.dump();
  EXPECT_EQ(totals["client_unanswered"], 0u);
}

// The router stopped (SIGSTOP) with calls in flight: calls answered after
// it resumes took longer than --hung-ms (hung); calls still out when the
// soak ends are cancelled after --hung-ms and counted as unanswered.
TEST(LoadgenFaults, StalledServerCallsAreCountedHungOrUnanswered) {
  WatchdogScope watchdog(seconds(150), "StalledServer");
  auto server = ServerProcess::Start(ServerProcess::Options{});
  ASSERT_NE(server, nullptr) << ServerProcess::last_start_error();
  es::it::TempDir out("es_loadgen_stall_");
  auto soak = [&](const std::string& json, double stall_s, double stall_for_s, std::string* output) {
    int rc = -100;
    std::thread run([&] {
      rc = RunCommand({kLoadgen, "--server", server->address(), "--model", "mlp", "--concurrency", "2", "--soak-s",
                       "4", "--duration-s", "1", "--warmup-s", "0", "--timeout-ms", "60000", "--hung-ms", "1500",
                       "--ceiling-model", "none", "--json", json},
                      seconds(60), output);
    });
    std::this_thread::sleep_for(std::chrono::duration<double>(stall_s));
    {
      es::it::RouterPause pause(*server);
      if (stall_for_s > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double>(stall_for_s));
      } else {
        run.join();  // stopped to the end: the tool gives up on the calls
      }
    }
    if (run.joinable()) run.join();
    return rc;
  };

  std::string output;
  ASSERT_EQ(soak(out.Path("hung.json"), 1.5, 2.5, &output), 0) << output;
  auto j = nlohmann::json::parse(Slurp(out.Path("hung.json")));
  EXPECT_GE(j["totals"]["client_hung"].get<uint64_t>(), 1u) << output;
  EXPECT_LE(j["totals"]["client_hung"].get<uint64_t>(), 2u) << output;
  EXPECT_EQ(j["totals"]["client_unanswered"], 0u) << output;
  ASSERT_EQ(j["steps"].size(), 1u);
  EXPECT_TRUE(j["steps"][0]["soak"].get<bool>());
  // A soak keeps every window: the output says so, and says nothing of
  // stability (no header about windows agreeing, no "not stable" footnote).
  EXPECT_NE(output.find("then a soak of 4 s in windows of 1 s"), std::string::npos) << output;
  EXPECT_EQ(output.find("agree within"), std::string::npos) << output;
  EXPECT_EQ(output.find("not stable"), std::string::npos) << output;
  // The timeline: one window a second, wall-clock stamped, some with no
  // success while the server was stopped.
  const auto& timeline = j["steps"][0]["timeline"];
  ASSERT_GE(timeline.size(), 4u) << j.dump(2);
  uint64_t hung = 0, ok = 0;
  bool empty_window = false;
  for (const auto& w : timeline) {
    hung += w["hung"].get<uint64_t>();
    ok += w["ok"].get<uint64_t>();
    empty_window = empty_window || w["ok"].get<uint64_t>() == 0;
    EXPECT_GT(w["start_unix_s"].get<double>(), 1.7e9);
  }
  EXPECT_EQ(hung, j["totals"]["client_hung"].get<uint64_t>());
  EXPECT_EQ(ok, j["steps"][0]["ok"].get<uint64_t>());
  EXPECT_TRUE(empty_window) << "a window while the server was stopped";
  EXPECT_NE(output.find("hung (over 1500 ms)"), std::string::npos) << output;

  output.clear();
  ASSERT_EQ(soak(out.Path("unanswered.json"), 1.5, 0, &output), 0) << output;
  j = nlohmann::json::parse(Slurp(out.Path("unanswered.json")));
  EXPECT_EQ(j["totals"]["client_unanswered"], 2u) << "both slots' calls were out when the soak ended\n" << output;
  EXPECT_EQ(j["totals"]["client_hung"], 0u) << output;
  EXPECT_EQ(j["steps"][0]["unanswered"], 2u);
  EXPECT_GT(j["steps"][0]["ok"].get<uint64_t>(), 0u);

  // The server serves again once resumed.
  auto client = es::client::Client::Create(server->address());
  auto live = client->ServerLive();
  ASSERT_TRUE(live.ok()) << live.status().ToString();
}

}  // namespace
}  // namespace es::loadgen

namespace es::loadgen {
namespace {

// --streaming: requests over ModelStreamInfer streams, several
// slots per stream (--streams 3 for 8 slots), answers matched by id: every
// request the tool counts ok is one the server counted, none failed or was
// left unanswered, and Stop() ends every stream (the run exits).
TEST_F(LoadgenTest, StreamingMatchesServerCounts) {
  WatchdogScope watchdog(seconds(120), "StreamingMatchesServerCounts");
  auto client = es::client::Client::Create(server_->address());
  const uint64_t before = SuccessCount(*client, "demo_ensemble");
  const std::string json = out_.Path("stream.json");
  std::string output;
  const int rc = RunCommand({kLoadgen, "--server", server_->address(), "--model", "demo_ensemble", "--duration-s",
                             "0.5", "--warmup-s", "0.3", "--concurrency", "1,8", "--max-windows", "3", "--streaming",
                             "--streams", "3", "--ceiling-model", "none", "--json", json},
                            seconds(100), &output);
  ASSERT_EQ(rc, 0) << output;
  const uint64_t after = SuccessCount(*client, "demo_ensemble");
  EXPECT_NE(output.find("ModelStreamInfer, the slots on 3 stream(s)"), std::string::npos) << output;
  const auto j = nlohmann::json::parse(Slurp(json));
  ASSERT_EQ(j["steps"].size(), 2u) << j.dump(2);
  for (const auto& s : j["steps"]) {
    EXPECT_GT(s["throughput_rps"].get<double>(), 0);
    EXPECT_EQ(s["failed"], 0u);
    EXPECT_TRUE(s["errors"].empty()) << s["errors"].dump();
  }
  const auto& totals = j["totals"];
  EXPECT_EQ(totals["client_failed"], 0u) << totals.dump();
  EXPECT_EQ(totals["client_unanswered"], 0u);
  EXPECT_GT(totals["client_ok"].get<uint64_t>(), 0u);
  EXPECT_EQ(after - before, totals["client_ok"].get<uint64_t>() + 1) << "plus the tool's one check call";
}

// --shm: the inputs through a region registered once: every
// request the tool counts ok is one the server counted, the request message
// no longer carries the tensor, and at exit the region is unregistered and
// the object unlinked.
TEST_F(LoadgenTest, SharedMemoryInputsMatchServerCountsAndCleanUp) {
  WatchdogScope watchdog(seconds(120), "SharedMemoryInputs");
  auto client = es::client::Client::Create(server_->address());
  const uint64_t before = SuccessCount(*client, "mlp");
  const std::string json = out_.Path("shm.json");
  std::string output;
  const int rc = RunCommand({kLoadgen, "--server", server_->address(), "--model", "mlp", "--batch", "8",
                             "--duration-s", "0.5", "--warmup-s", "0.3", "--concurrency", "4", "--max-windows", "2",
                             "--ceiling-model", "none", "--shm", "--json", json},
                            seconds(100), &output);
  ASSERT_EQ(rc, 0) << output;
  const uint64_t after = SuccessCount(*client, "mlp");
  const auto j = nlohmann::json::parse(Slurp(json));
  const auto& totals = j["totals"];
  EXPECT_EQ(totals["client_failed"], 0u) << totals.dump();
  EXPECT_GT(totals["client_ok"].get<uint64_t>(), 0u);
  EXPECT_EQ(after - before, totals["client_ok"].get<uint64_t>() + 1) << "plus the tool's one check call";
  // 8 images are 25088 bytes in the message; through shared memory only the parameters travel.
  EXPECT_LT(j["config"]["request_bytes"].get<uint64_t>(), 1000u) << j["config"].dump();
  grpc::ClientContext ctx;
  client->SetDeadline(&ctx, {});
  inference::SystemSharedMemoryStatusResponse regions;
  ASSERT_TRUE(client->stub().SystemSharedMemoryStatus(&ctx, {}, &regions).ok());
  EXPECT_EQ(regions.regions_size(), 0);
  EXPECT_EQ(es::it::ShmObjectsOfStartedCommands("es_client"), std::set<std::string>()) << "left behind";
}

// Answers that are errors (error_message "CODE: ...") count under their
// code while the streams go on: a server that admits 2 calls at a time
// refuses some of 8 slots' requests RESOURCE_EXHAUSTED, and the rest
// succeed; the first refusal's message is kept.
TEST(LoadgenStreaming, ErrorAnswersCountByTheirCode) {
  WatchdogScope watchdog(seconds(150), "ErrorAnswersCountByTheirCode");
  ServerProcess::Options options;
  options.extra_limits = "max_inflight_calls: 2";
  auto server = ServerProcess::Start(options);
  ASSERT_NE(server, nullptr) << ServerProcess::last_start_error();
  es::it::TempDir out("es_loadgen_stream_err_");
  const std::string json = out.Path("err.json");
  std::string output;
  const int rc = RunCommand({kLoadgen, "--server", server->address(), "--model", "demo_ensemble", "--duration-s",
                             "0.5", "--warmup-s", "0.2", "--concurrency", "8", "--max-windows", "2", "--streaming",
                             "--ceiling-model", "none", "--json", json},
                            seconds(100), &output);
  ASSERT_EQ(rc, 0) << output;
  const auto totals = nlohmann::json::parse(Slurp(json))["totals"];
  EXPECT_GT(totals["client_ok"].get<uint64_t>(), 0u) << totals.dump();
  ASSERT_TRUE(totals["client_errors"].contains("RESOURCE_EXHAUSTED")) << totals.dump();
  EXPECT_GT(totals["client_errors"]["RESOURCE_EXHAUSTED"].get<uint64_t>(), 0u);
  EXPECT_EQ(totals["client_errors"].size(), 1u) << "no other code (an unmatched answer would be UNKNOWN): "
                                                << totals.dump();
  EXPECT_EQ(totals["client_unanswered"], 0u);
  // Which limit refused is said: the first refusal's message, in the JSON
  // and in the summary.
  const std::string first = totals["client_error_messages"].value("RESOURCE_EXHAUSTED", "");
  EXPECT_NE(first.find("server busy"), std::string::npos) << totals.dump();
  EXPECT_NE(first.rfind("RESOURCE_EXHAUSTED", 0), 0u) << "the code is not repeated in its message: " << first;
  EXPECT_NE(output.find("first RESOURCE_EXHAUSTED: "), std::string::npos) << output;
}

// A stalled server (SIGSTOP to the end of the run) under --streaming: the
// requests still out when the run ends are cancelled with their streams
// after --hung-ms and counted as unanswered; the run still ends (exit 0),
// and the server serves again once resumed.
TEST(LoadgenStreaming, StalledServerRequestsAreUnanswered) {
  WatchdogScope watchdog(seconds(120), "StreamingStalledServer");
  auto server = ServerProcess::Start(ServerProcess::Options{});
  ASSERT_NE(server, nullptr) << ServerProcess::last_start_error();
  es::it::TempDir out("es_loadgen_stream_stall_");
  const std::string json = out.Path("stall.json");
  std::string output;
  int rc = -100;
  std::thread run([&] {
    rc = RunCommand({kLoadgen, "--server", server->address(), "--model", "mlp", "--concurrency", "3", "--streaming",
                     "--streams", "2", "--soak-s", "3", "--duration-s", "1", "--warmup-s", "0", "--hung-ms", "1500",
                     "--ceiling-model", "none", "--json", json},
                    seconds(60), &output);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  {
    es::it::RouterPause pause(*server);
    run.join();
  }
  ASSERT_EQ(rc, 0) << output;
  const auto j = nlohmann::json::parse(Slurp(json));
  EXPECT_EQ(j["totals"]["client_unanswered"], 3u) << "the three slots' requests were out when the soak ended\n"
                                                   << output;
  EXPECT_GT(j["steps"][0]["ok"].get<uint64_t>(), 0u);
  auto client = es::client::Client::Create(server->address());
  inference::ModelInferRequest request;
  request.set_model_name("mlp");
  ASSERT_TRUE(es::client::AddInput<float>(&request, "input", {1, 1, 28, 28}, std::vector<float>(784, 0.5f)).ok());
  auto answer = client->Infer(request);
  EXPECT_TRUE(answer.ok()) << answer.status().ToString();
}

// The server goes away under a streaming run: the streams fail, are
// reopened after a backoff, and the run ends after the bounded run of
// connection failures, reporting what succeeded.
TEST(LoadgenStreaming, ServerGoneEndsTheRun) {
  WatchdogScope watchdog(seconds(120), "StreamingServerGone");
  auto server = ServerProcess::Start(ServerProcess::Options{});
  ASSERT_NE(server, nullptr) << ServerProcess::last_start_error();
  es::it::TempDir out("es_loadgen_stream_gone_");
  const std::string json = out.Path("gone.json");
  std::string output;
  int rc = -100;
  std::thread run([&] {
    rc = RunCommand({kLoadgen, "--server", server->address(), "--model", "mlp", "--concurrency", "8", "--duration-s",
                     "5", "--warmup-s", "0.5", "--streaming", "--max-connection-failures", "100", "--ceiling-model",
                     "none", "--json", json},
                    seconds(90), &output);
  });
  std::this_thread::sleep_for(seconds(3));
  server->Signal(SIGTERM);
  int status = 0;
  const bool exited = server->WaitExit(std::chrono::milliseconds(20000), &status);
  run.join();
  ASSERT_TRUE(exited) << "the server did not exit after SIGTERM";
  EXPECT_EQ(rc, 1) << output;
  EXPECT_NE(output.find("ensemble-loadgen: lost the server"), std::string::npos) << output;
  const auto totals = nlohmann::json::parse(Slurp(json))["totals"];
  EXPECT_GT(totals["client_ok"].get<uint64_t>(), 100u) << totals.dump();
  EXPECT_GE(totals["client_failed"].get<uint64_t>(), 100u) << totals.dump();
  EXPECT_EQ(totals["client_unanswered"], 0u);
}

}  // namespace
}  // namespace es::loadgen

namespace es::loadgen {
namespace {

// ---- --server-pid ---------------------------------------------------------

// This process's CPU time (every thread), from the kernel's own clock.
double OwnCpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// Spins until this process has used `seconds` more CPU.
void BurnCpu(double seconds) {
  const double until = OwnCpuSeconds() + seconds;
  volatile uint64_t x = 0;
  while (OwnCpuSeconds() < until) {
    for (int i = 0; i < 10000; ++i) x = x + static_cast<uint64_t>(i);
  }
}

// A pid no process has: a child's, once it has exited and been reaped.
pid_t PidOfNoProcess() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(::kill(pid, 0), -1) << "pid " << pid << " was reused already";
  return pid;
}

// The comm field (2) is "(NAME)" with NAME as the process set it: spaces
// and ')' included. Fields 14 and 15 (utime, stime) are then the 12th and
// 13th after the last ')'; counted from the first ')' they would be other
// fields (here 11 and 12 ticks instead of 250 and 50).
TEST(ProcessCpu, ParsesStatAfterTheLastParenthesis) {
  const std::string stat =
      "4242 (a) b (c)) S 1 4242 4242 0 -1 4194304 7 8 9 10 250 50 11 12 20 0 1 0 123 456 789\n";
  auto seconds = ParseStatCpuSeconds(stat, 100);
  ASSERT_TRUE(seconds.has_value());
  EXPECT_DOUBLE_EQ(*seconds, 3.0) << "(250 + 50) ticks at 100 per second";
  EXPECT_DOUBLE_EQ(*ParseStatCpuSeconds("1 (init) S 0 1 1 0 -1 0 0 0 0 0 40 60 0 0", 100), 1.0);
  EXPECT_DOUBLE_EQ(*ParseStatCpuSeconds("7 () R 1 7 7 0 -1 0 0 0 0 0 5 5 0 0", 10), 1.0) << "empty comm";

  EXPECT_FALSE(ParseStatCpuSeconds("", 100).has_value());
  EXPECT_FALSE(ParseStatCpuSeconds("4242 noparens S 1 4242 4242 0 -1 0 7 8 9 10 250 50", 100).has_value());
  EXPECT_FALSE(ParseStatCpuSeconds("4242 (short) S 1 2 3", 100).has_value()) << "too few fields";
  EXPECT_FALSE(ParseStatCpuSeconds("4242 (x) S 1 4242 4242 0 -1 0 7 8 9 10 2x0 50", 100).has_value());
  EXPECT_FALSE(ParseStatCpuSeconds(stat, 0).has_value());
}

TEST(ProcessCpu, OwnCpuRisesAfterBurningCpu) {
  const auto before = ReadCpuSeconds(::getpid());
  ASSERT_TRUE(before.has_value());
  BurnCpu(0.3);
  const auto after = ReadCpuSeconds(::getpid());
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(*after - *before, 0.2) << "0.3 s burnt, read in clock ticks";
  EXPECT_LE(*after, OwnCpuSeconds() + 0.05) << "never more than the kernel's own clock";
  const auto whole = ReadProcessCpu(::getpid());
  ASSERT_TRUE(whole.has_value());
  EXPECT_GE(whole->own_s, *after);
}

// A child that burns CPU, then waits: listed among the children and its
// CPU counted in their sum; once reaped, gone from both, and its pid
// unreadable.
TEST(ProcessCpu, ChildrenSumCountsAForkedChild) {
  WatchdogScope watchdog(seconds(60), "ChildrenSumCountsAForkedChild");
  const auto before = ReadProcessCpu(::getpid());
  ASSERT_TRUE(before.has_value());
  int ready[2], done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    ::close(done[1]);  // else its read below never sees the parent's close
    BurnCpu(0.4);
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    (void)!::read(done[0], &c, 1);  // until the parent has read us
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(done[0]);
  pollfd p{ready[0], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 30000), 1) << "the child never finished burning";

  const std::vector<pid_t> children = ChildProcesses(::getpid());
  EXPECT_NE(std::find(children.begin(), children.end(), child), children.end());
  const auto during = ReadProcessCpu(::getpid());
  ASSERT_TRUE(during.has_value());
  ASSERT_EQ(during->children_s.count(child), 1u);
  EXPECT_GE(during->children_s.at(child), 0.3);
  EXPECT_GE(during->ChildrenSeconds(), 0.3);
  EXPECT_LT(during->own_s - before->own_s, 0.3) << "the child's CPU is not the parent's";
  EXPECT_GE(ChildrenCpuBetween(*before, *during), 0.3) << "a child born between two readings counts whole";
  EXPECT_GE(*ReadCpuSeconds(child), 0.3);

  ::close(done[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::close(ready[0]);
  const auto after = ReadProcessCpu(::getpid());
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->children_s.count(child), 0u);
  EXPECT_FALSE(ReadCpuSeconds(child).has_value());
  EXPECT_FALSE(ReadProcessCpu(child).has_value());
}

// A host restarted between two readings is a new pid, counted from zero;
// one whose time went backwards is a reused pid, a new child too.
TEST(ProcessCpu, ChildrenCpuBetweenCountsRestartedChildrenFromZero) {
  ProcessCpu a, b;
  a.children_s = {{10, 5.0}, {11, 2.0}, {12, 9.0}};
  b.children_s = {{10, 5.5}, {11, 0.25}, {13, 0.5}};  // 11 reused, 12 gone, 13 new
  EXPECT_DOUBLE_EQ(ChildrenCpuBetween(a, b), 0.5 + 0.25 + 0.5);
  EXPECT_DOUBLE_EQ(b.ChildrenSeconds(), 6.25);
}

// A PID with no process is refused before the run (exit 2, one line naming
// it); a live one is taken (the run then fails on the closed port, exit 1).
TEST(LoadgenExitCodes, ServerPidOfNoProcessIsRefused) {
  WatchdogScope watchdog(seconds(60), "ServerPidOfNoProcessIsRefused");
  const std::string closed = "127.0.0.1:" + std::to_string(es::it::ClosedLoopbackPort());
  const std::string gone = std::to_string(PidOfNoProcess());
  std::string output;
  int rc = RunCommand({kLoadgen, "--server", closed, "--model", "mlp", "--server-pid", gone}, seconds(20), &output);
  EXPECT_EQ(rc, 2) << output;
  EXPECT_EQ(output.rfind("ensemble-loadgen: --server-pid " + gone + ": no such process", 0), 0u) << output;
  EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << "one line: " << output;

  output.clear();
  rc = RunCommand({kLoadgen, "--server", closed, "--model", "mlp", "--server-pid", std::to_string(::getpid())},
                  seconds(20), &output);
  EXPECT_EQ(rc, 1) << output;
  EXPECT_EQ(output.rfind("ensemble-loadgen: cannot reach server", 0), 0u) << output;

  std::string help;
  EXPECT_EQ(RunCommand({kLoadgen, "--help"}, seconds(20), &help), 0);
  EXPECT_NE(help.find("--server-pid"), std::string::npos) << help;
}

// The server the suite started, its PID given: every step's JSON has the
// router's and the hosts' CPU per request (the mlp model runs in a host),
// over gRPC and over HTTP; the table has the columns and the CSV ends with
// them. Without --server-pid the figures are null and the columns absent.
TEST_F(LoadgenTest, ServerPidReportsTheServersCpuPerRequest) {
  WatchdogScope watchdog(seconds(120), "ServerPidReportsTheServersCpu");
  const std::string pid = std::to_string(server_->pid());
  for (const bool http : {false, true}) {
    SCOPED_TRACE(http ? "HTTP" : "gRPC");
    const std::string json = out_.Path(http ? "cpu_http.json" : "cpu.json");
    const std::string csv = out_.Path(http ? "cpu_http.csv" : "cpu.csv");
    std::vector<std::string> argv = {kLoadgen, "--server", http ? server_->http_address() : server_->address(),
                                     "--model", "mlp", "--concurrency", "1,4", "--duration-s", "0.5", "--warmup-s",
                                     "0.3", "--max-windows", "3", "--ceiling-model", "none", "--server-pid", pid,
                                     "--json", json, "--csv", csv};
    if (http) argv.push_back("--http");
    std::string output;
    ASSERT_EQ(RunCommand(argv, seconds(60), &output), 0) << output;
    EXPECT_NE(output.find("srv_cpu_us"), std::string::npos) << output;
    EXPECT_NE(output.find("hosts_cpu_us"), std::string::npos) << output;
    EXPECT_NE(output.find("core-us per request, its hosts"), std::string::npos) << output;

    const auto j = nlohmann::json::parse(Slurp(json));
    ASSERT_EQ(j["steps"].size(), 2u) << j.dump(2);
    for (const auto& s : j["steps"]) {
      ASSERT_TRUE(s["server_cpu_us_per_request"].is_number()) << s.dump(2);
      ASSERT_TRUE(s["hosts_cpu_us_per_request"].is_number()) << s.dump(2);
      EXPECT_GT(s["server_cpu_us_per_request"].get<double>(), 0);
      EXPECT_GT(s["hosts_cpu_us_per_request"].get<double>(), 0) << "the model runs in a host";
      // Not seconds, nor a total: a request takes the router well under 100 ms of CPU.
      EXPECT_LT(s["server_cpu_us_per_request"].get<double>(), 1e5);
    }
    // The CSV: the two columns after hung and unanswered, filled (then
    // --labels' accuracy, empty without it).
    const std::string csv_text = Slurp(csv);
    const std::string header = csv_text.substr(0, csv_text.find('\n'));
    const std::string tail = ",hung,unanswered,server_cpu_us_per_request,hosts_cpu_us_per_request,accuracy";
    ASSERT_GE(header.size(), tail.size());
    EXPECT_EQ(header.substr(header.size() - tail.size()), tail) << header;
    const size_t row_start = header.size() + 1;
    const std::string row = csv_text.substr(row_start, csv_text.find('\n', row_start) - row_start);
    EXPECT_EQ(std::count(row.begin(), row.end(), ','), std::count(header.begin(), header.end(), ',')) << row;
    ASSERT_GE(row.size(), 2u);
    EXPECT_EQ(row.back(), ',') << "no accuracy without --labels: " << row;
    EXPECT_NE(row[row.size() - 2], ',') << "hosts_cpu_us_per_request is filled: " << row;
  }

  const std::string json = out_.Path("no_pid.json");
  std::string output;
  ASSERT_EQ(RunCommand({kLoadgen, "--server", server_->address(), "--model", "mlp", "--concurrency", "2",
                        "--duration-s", "0.3", "--warmup-s", "0.2", "--max-windows", "3", "--ceiling-model", "none",
                        "--json", json},
                       seconds(60), &output),
            0)
      << output;
  EXPECT_EQ(output.find("srv_cpu_us"), std::string::npos) << output;
  const auto j = nlohmann::json::parse(Slurp(json));
  ASSERT_EQ(j["steps"].size(), 1u);
  ASSERT_TRUE(j["steps"][0].contains("server_cpu_us_per_request")) << j["steps"][0].dump(2);
  EXPECT_TRUE(j["steps"][0]["server_cpu_us_per_request"].is_null());
  EXPECT_TRUE(j["steps"][0]["hosts_cpu_us_per_request"].is_null());
}

}  // namespace
}  // namespace es::loadgen
