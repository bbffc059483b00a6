// ensemble-cli --http and ensemble-loadgen --http against the real
// server's KServe v2 HTTP/REST front end. ensemble-cli: every subcommand
// prints exactly what it prints over gRPC (the --json answers carry every
// output value at full precision, so equal text means byte-equal tensors),
// errors have the same codes and exit codes, and TLS with a client
// certificate and a bearer token work over HTTP as over gRPC.
// ensemble-loadgen: a short closed-loop run completes without errors and
// the server's own statistics (read over gRPC) count every request it made;
// options HTTP cannot honour are refused (exit 2). --shm works over HTTP
// for both (the region registered through the HTTP routes).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "clients/cli/input_source.h"
#include "clients/client.h"
#include "clients/http_client.h"
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
const char* const kLoadgen = es::test_paths::kLoadgenBin;
constexpr char kInferToken[] = "infer-7c1d2e3f4a5b6c7d8e";

struct CliRun {
  int rc = -1;
  std::string output;  // stdout and stderr together
};

CliRun RunCli(const std::vector<std::string>& prefix, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kCli};
  argv.insert(argv.end(), prefix.begin(), prefix.end());
  argv.insert(argv.end(), args.begin(), args.end());
  CliRun r;
  r.rc = RunCommand(argv, seconds(60), &r.output);
  return r;
}

// "ensemble-cli: [context: ]CODE: message" -> CODE ("" if the line is not an error).
std::string ErrorCode(const std::string& output) {
  static const char* const kCodes[] = {
      "NOT_FOUND",       "INVALID_ARGUMENT",  "UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED",
      "UNAUTHENTICATED", "PERMISSION_DENIED", "INTERNAL",    "UNIMPLEMENTED",     "FAILED_PRECONDITION"};
  size_t best = std::string::npos;
  std::string code;
  for (const char* c : kCodes) {
    const size_t at = output.find(std::string(c) + ":");
    if (at < best) {
      best = at;
      code = c;
    }
  }
  return code;
}

class CliHttpTest : public es::it::SharedServerSuite<CliHttpTest> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SharedServerSuite::SetUp());
    ASSERT_FALSE(server_->http_address().empty());
  }
  static CliRun Grpc(const std::vector<std::string>& args) { return RunCli({"--server", server_->address()}, args); }
  static CliRun Http(const std::vector<std::string>& args) {
    return RunCli({"--http", "--server", server_->http_address()}, args);
  }
  // The same command over both transports: the same exit code and text.
  static void ExpectSame(const std::vector<std::string>& args) {
    std::string what;
    for (const auto& a : args) what.append(a).append(" ");
    const CliRun g = Grpc(args);
    const CliRun h = Http(args);
    EXPECT_EQ(h.rc, g.rc) << what << "\ngRPC: " << g.output << "\nHTTP: " << h.output;
    EXPECT_EQ(h.output, g.output) << what;
  }

  es::it::TempDir dir_{"es_cli_http_test_"};
};

TEST_F(CliHttpTest, EverySubcommandAnswersAsOverGrpc) {
  WatchdogScope watchdog(seconds(120), "EverySubcommandAnswersAsOverGrpc");
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"live"},
           {"live", "--json"},
           {"ready"},
           {"ready", "demo_ensemble"},
           {"ready", "no_such_model"},  // exit 3 with the reason
           {"index"},
           {"--json", "index"},
           {"metadata", "mlp"},
           {"--json", "metadata", "demo_ensemble"},
           {"metadata", "mlp", "--model-version", "1"},
           {"infer", "mlp"},
           {"infer", "mlp", "--json", "--batch", "3", "--seed", "4"},
           {"infer", "cnn", "--json", "--batch", "2", "--id", "req-9"},
           {"infer", "demo_ensemble", "--batch", "2"},
           {"infer", "demo_ensemble", "--json", "--seed", "3"},  // members and uncertainty
           {"infer", "demo_ensemble", "--json", "--plain", "--output", "probabilities"},
       }) {
    ExpectSame(args);
  }
  // Statistics last, both read with nothing run in between. In JSON the
  // server's HTTP answer spells out the zero durations gRPC leaves unset
  // (batch_stats' compute_input / compute_output): equal once those are dropped.
  ExpectSame({"stats", "mlp"});
  const std::function<void(nlohmann::json&)> drop_zero = [&](nlohmann::json& j) {
    if (j.is_array()) {
      for (auto& e : j) drop_zero(e);
    } else if (j.is_object()) {
      for (auto it = j.begin(); it != j.end();) {
        if (*it == nlohmann::json{{"count", "0"}, {"ns", "0"}}) {
          it = j.erase(it);
        } else {
          drop_zero(*it);
          ++it;
        }
      }
    }
  };
  const CliRun g = Grpc({"--json", "stats"});
  const CliRun h = Http({"--json", "stats"});
  ASSERT_EQ(g.rc, 0) << g.output;
  ASSERT_EQ(h.rc, 0) << h.output;
  nlohmann::json gj = nlohmann::json::parse(g.output), hj = nlohmann::json::parse(h.output);
  drop_zero(gj);
  drop_zero(hj);
  EXPECT_EQ(hj, gj);
  EXPECT_GE(gj["model_stats"].size(), 4u);
  // They count the HTTP inferences: one more success after an HTTP infer.
  const auto count = [&] {
    const auto j = nlohmann::json::parse(Http({"--json", "stats", "wide_mlp"}).output);
    return j["model_stats"][0]["inference_stats"]["success"].value("count", std::string("0"));
  };
  const std::string before = count();
  ASSERT_EQ(Http({"infer", "wide_mlp"}).rc, 0);
  EXPECT_EQ(std::stoll(count()), std::stoll(before) + 1);
}

TEST_F(CliHttpTest, EveryInputSourceGivesTheGrpcAnswer) {
  WatchdogScope watchdog(seconds(120), "EveryInputSourceGivesTheGrpcAnswer");
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  std::vector<float> images(2 * 784);
  for (auto& v : images) v = unit(rng);
  const std::string npy = dir_.Path("images.npy");
  const es::Status written = WriteNpyFloat32(npy, {2, 1, 28, 28}, images);
  ASSERT_TRUE(written.ok()) << written.ToString();
  const std::string json_file =
      dir_.Write("images.json", nlohmann::json(std::vector<double>(images.begin(), images.end())).dump());
  const std::string raw = dir_.Write(
      "images.raw", std::string(reinterpret_cast<const char*>(images.data()), images.size() * sizeof(float)));
  const std::string inline_json =
      "json:" + nlohmann::json(std::vector<double>(images.begin(), images.begin() + 784)).dump();
  for (const std::string& source : {"input=" + npy, npy, json_file, "raw:" + raw, inline_json, std::string("random")}) {
    ExpectSame({"infer", "mlp", "--input", source, "--json"});
    ExpectSame({"infer", "demo_ensemble", "--input", source});
  }
}

TEST_F(CliHttpTest, ErrorsHaveTheGrpcCodesAndExitCodes) {
  WatchdogScope watchdog(seconds(120), "ErrorsHaveTheGrpcCodesAndExitCodes");
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"infer", "no_such_model"},
           {"metadata", "no_such_model"},
           {"stats", "no_such_model"},
           {"infer", "mlp", "--model-version", "9"},
           {"infer", "mlp", "--batch", "100"},   // over max_batch_size: the server's INVALID_ARGUMENT
           {"infer", "mlp", "--batch", "1100"},  // 3.4 MB, over both transports' size limits: RESOURCE_EXHAUSTED
           {"infer", "mlp", "--input", "pixels=random"},  // usage (2)
           {"infer", "mlp", "--input", dir_.Path("missing.npy")},
       }) {
    std::string what;
    for (const auto& a : args) what.append(a).append(" ");
    const CliRun g = Grpc(args);
    const CliRun h = Http(args);
    EXPECT_NE(g.rc, 0) << what << g.output;
    EXPECT_EQ(h.rc, g.rc) << what << "\ngRPC: " << g.output << "\nHTTP: " << h.output;
    EXPECT_EQ(ErrorCode(h.output), ErrorCode(g.output)) << what << "\ngRPC: " << g.output << "\nHTTP: " << h.output;
    EXPECT_EQ(std::count(h.output.begin(), h.output.end(), '\n'), 1) << h.output;
    EXPECT_EQ(h.output.rfind("ensemble-cli: ", 0), 0u) << h.output;
  }
  // The server's own message passes unchanged.
  const CliRun h = Http({"infer", "mlp", "--batch", "100"});
  EXPECT_EQ(h.output, Grpc({"infer", "mlp", "--batch", "100"}).output);
  // A deadline too short: the CLI's first call (the model's metadata, which
  // infer reads first) is cut off at it; the router is stopped meanwhile, so
  // that no answer can come first. (The library tests below cut off an
  // inference call itself.)
  const CliRun late = [&] {
    es::it::RouterPause pause(*server_);
    return Http({"--timeout-ms", "1", "infer", "demo_ensemble", "--batch", "64"});
  }();
  EXPECT_EQ(late.rc, 1) << late.output;
  EXPECT_EQ(ErrorCode(late.output), "DEADLINE_EXCEEDED") << late.output;
  EXPECT_NE(late.output.find("deadline of 1 ms exceeded"), std::string::npos) << late.output;
  // What HTTP cannot carry is refused before any call: usage (2), one line.
  const CliRun r = Http({"infer", "mlp", "--streaming"});
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find("--streaming"), std::string::npos) << r.output;
  // --server is the gRPC address: over HTTP it is not understood (a clear error, exit 1).
  const CliRun wrong = RunCli({"--http", "--server", server_->address()}, {"live"});
  EXPECT_EQ(wrong.rc, 1) << wrong.output;
}

// The library itself: many calls on one keep-alive connection, each answer
// byte-equal to gRPC's; a call cut off at its deadline closes the
// connection and the next call opens a new one.
TEST_F(CliHttpTest, HttpClientKeepsOneConnectionAndRecoversFromADeadline) {
  WatchdogScope watchdog(seconds(120), "HttpClientKeepAlive");
  auto made = es::client::HttpClient::Create(server_->http_address());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const auto http = std::move(made).value();
  auto grpc_client = es::client::Client::Create(server_->address());
  EXPECT_FALSE(http->connected());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> images(2 * 784);
    for (auto& v : images) v = unit(rng);
    inference::ModelInferRequest request;
    request.set_model_name("demo_ensemble");
    request.set_id("r" + std::to_string(i));
    ASSERT_TRUE(es::client::AddInput<float>(&request, "input", {2, 1, 28, 28}, images).ok());
    es::client::SetParameter(&request, "return_uncertainty", true);
    auto over_http = http->Infer(request);
    ASSERT_TRUE(over_http.ok()) << over_http.status().ToString();
    EXPECT_TRUE(http->connected()) << "the server's keep-alive connection was not kept, call " << i;
    auto over_grpc = grpc_client->Infer(request);
    ASSERT_TRUE(over_grpc.ok()) << over_grpc.status().ToString();
    EXPECT_EQ(over_http->id(), request.id());
    ASSERT_EQ(over_http->outputs_size(), over_grpc->outputs_size());
    for (int k = 0; k < over_grpc->outputs_size(); ++k) {
      EXPECT_EQ(over_http->outputs(k).name(), over_grpc->outputs(k).name());
      EXPECT_EQ(over_http->raw_output_contents(k), over_grpc->raw_output_contents(k))
          << "output " << over_grpc->outputs(k).name() << " differs, call " << i;
    }
  }
  inference::ModelInferRequest big;
  big.set_model_name("demo_ensemble");
  ASSERT_TRUE(es::client::AddInput<float>(&big, "input", {64, 1, 28, 28}, std::vector<float>(64 * 784, 0.5f)).ok());
  // 1 ms for the batch while the router is stopped: no answer can come first.
  auto late = [&] {
    es::it::RouterPause pause(*server_);
    return http->Infer(big, es::client::CallOptions{std::chrono::milliseconds(1)});
  }();
  EXPECT_EQ(late.status().code(), grpc::StatusCode::DEADLINE_EXCEEDED) << late.status().ToString();
  EXPECT_FALSE(http->connected());
  auto live = http->ServerLive();
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_TRUE(*live);
  EXPECT_TRUE(http->connected());
}

// The success count of `model` in the server's statistics, over gRPC.
uint64_t GrpcSuccessCount(const std::string& grpc_address, const std::string& model) {
  auto client = es::client::Client::Create(grpc_address);
  auto stats = client->ModelStatistics(model);
  EXPECT_TRUE(stats.ok()) << stats.status().ToString();
  if (!stats.ok() || stats->model_stats_size() == 0) return 0;
  return stats->model_stats(0).inference_stats().success().count();
}

// The success count of `model` once it has stopped moving: the fixture's
// server is shared, and a request an earlier test gave up on (its deadline
// passed) may still finish its member calls, `mlp`'s among them, after the
// next test started. Stable over 500 ms, or after 20 s whatever it is.
uint64_t SettledSuccessCount(const std::string& grpc_address, const std::string& model) {
  uint64_t count = GrpcSuccessCount(grpc_address, model);
  const auto give_up = std::chrono::steady_clock::now() + seconds(20);
  while (std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const uint64_t again = GrpcSuccessCount(grpc_address, model);
    if (again == count) break;
    count = again;
  }
  return count;
}

TEST_F(CliHttpTest, LoadgenRunsOverHttpAndTheServerCountsIt) {
  WatchdogScope watchdog(seconds(120), "LoadgenRunsOverHttp");
  const uint64_t before = SettledSuccessCount(server_->address(), "mlp");
  const std::string report = dir_.Path("report.json");
  std::string output;
  const int rc = RunCommand({kLoadgen,          "--http", "--server",      server_->http_address(),
                             "--model",         "mlp",    "--batch",       "2",
                             "--concurrency",   "1,4",    "--duration-s",  "0.3",
                             "--warmup-s",      "0.2",    "--max-windows", "2",
                             "--ceiling-model", "none",   "--json",        report},
                            seconds(90), &output);
  ASSERT_EQ(rc, 0) << output;
  EXPECT_NE(output.find("HTTP/1.1, one keep-alive connection and thread per slot"), std::string::npos) << output;
  const auto j = nlohmann::json::parse(es::it::ReadTextFile(report));
  ASSERT_EQ(j["steps"].size(), 2u) << j.dump();
  for (const auto& step : j["steps"]) {
    EXPECT_GT(step["ok"].get<uint64_t>(), 0u) << step.dump();
    EXPECT_EQ(step["failed"].get<uint64_t>(), 0u) << step.dump();
    EXPECT_GT(step["client_cpu_cores"].get<double>(), 0.0) << step.dump();
  }
  const auto& totals = j["totals"];
  EXPECT_EQ(totals["client_failed"].get<uint64_t>(), 0u) << totals.dump();
  EXPECT_EQ(totals["client_unanswered"].get<uint64_t>(), 0u) << totals.dump();
  const uint64_t ok = totals["client_ok"].get<uint64_t>();
  EXPECT_GT(ok, 0u);
  // Every request the tool made (the one check call before the sweep included)
  // is a success in the server's own statistics, read over gRPC.
  const uint64_t after = GrpcSuccessCount(server_->address(), "mlp");
  EXPECT_EQ(after - before, ok + 1) << "before " << before << " after " << after;
  EXPECT_EQ(totals["server_success"].get<uint64_t>(), ok) << totals.dump();

  // Open loop (Poisson arrivals): every arrival sent (far below what the
  // server takes), none failed, the server counts them all.
  const uint64_t before_open = GrpcSuccessCount(server_->address(), "mlp");
  output.clear();
  ASSERT_EQ(RunCommand({kLoadgen, "--http", "--server", server_->http_address(), "--model", "mlp", "--rate", "100",
                        "--poisson", "--duration-s", "0.3", "--warmup-s", "0.2", "--max-windows", "2",
                        "--ceiling-model", "none", "--json", report},
                       seconds(90), &output),
            0)
      << output;
  EXPECT_NE(output.find("keep-alive connections, each with its thread"), std::string::npos) << output;
  const auto open = nlohmann::json::parse(es::it::ReadTextFile(report));
  ASSERT_EQ(open["steps"].size(), 1u) << open.dump();
  EXPECT_EQ(open["steps"][0]["mode"], "open") << open["steps"][0].dump();
  EXPECT_GT(open["steps"][0]["ok"].get<uint64_t>(), 0u);
  EXPECT_EQ(open["totals"]["client_failed"].get<uint64_t>(), 0u) << open["totals"].dump();
  EXPECT_EQ(GrpcSuccessCount(server_->address(), "mlp") - before_open, open["totals"]["client_ok"].get<uint64_t>() + 1);
}

TEST_F(CliHttpTest, LoadgenRefusesWhatHttpCannotHonour) {
  WatchdogScope watchdog(seconds(60), "LoadgenRefuses");
  for (const std::vector<std::string>& extra :
       std::vector<std::vector<std::string>>{{"--streaming"}, {"--threads", "2"}, {"--channels", "2"}}) {
    std::vector<std::string> argv = {kLoadgen, "--http", "--server", server_->http_address(), "--model", "mlp"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::string output;
    EXPECT_EQ(RunCommand(argv, seconds(30), &output), 2) << extra[0] << ": " << output;
    EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
    EXPECT_NE(output.find(extra[0]), std::string::npos) << output;
  }
  // A model the server does not have: the HTTP 404 as NOT_FOUND, exit 1.
  std::string output;
  EXPECT_EQ(RunCommand({kLoadgen, "--http", "--server", server_->http_address(), "--model", "no_such_model"},
                       seconds(30), &output),
            1)
      << output;
  EXPECT_NE(output.find("NOT_FOUND"), std::string::npos) << output;
}

std::set<std::string> ClientShmObjects() { return es::it::ShmObjectsOfStartedCommands("es_client"); }

int RegisteredRegions(const std::string& grpc_address) {
  auto client = es::client::Client::Create(grpc_address);
  grpc::ClientContext ctx;
  client->SetDeadline(&ctx, {});
  inference::SystemSharedMemoryStatusResponse regions;
  EXPECT_TRUE(client->stub().SystemSharedMemoryStatus(&ctx, {}, &regions).ok());
  return regions.regions_size();
}

// --shm over HTTP: the region is registered and unregistered through the
// HTTP routes; the answer is the one the tensors in the message give, the
// load generator's requests carry only the region's parameters, and nothing
// is left registered or in /dev/shm.
TEST_F(CliHttpTest, SharedMemoryInputsOverHttp) {
  WatchdogScope watchdog(seconds(120), "SharedMemoryInputsOverHttp");
  const std::set<std::string> before = ClientShmObjects();
  const std::vector<std::string> args = {"infer", "demo_ensemble", "--plain", "--json", "--seed", "9", "--batch", "3"};
  std::vector<std::string> with_shm = args;
  with_shm.push_back("--shm");
  const CliRun plain = Grpc(args);
  const CliRun shm = Http(with_shm);
  ASSERT_EQ(plain.rc, 0) << plain.output;
  ASSERT_EQ(shm.rc, 0) << shm.output;
  EXPECT_EQ(shm.output, plain.output);
  EXPECT_EQ(ClientShmObjects(), before);
  EXPECT_EQ(RegisteredRegions(server_->address()), 0);
  // A server-side error still unregisters and unlinks.
  const CliRun refused = Http({"infer", "mlp", "--batch", "100", "--shm"});
  EXPECT_EQ(refused.rc, 1) << refused.output;
  EXPECT_EQ(ErrorCode(refused.output), "INVALID_ARGUMENT") << refused.output;
  EXPECT_EQ(ClientShmObjects(), before);
  EXPECT_EQ(RegisteredRegions(server_->address()), 0);

  const uint64_t served_before = SettledSuccessCount(server_->address(), "mlp");
  const std::string report = dir_.Path("shm.json");
  std::string output;
  ASSERT_EQ(RunCommand({kLoadgen, "--http", "--server", server_->http_address(), "--model", "mlp", "--batch", "8",
                        "--concurrency", "2", "--duration-s", "0.3", "--warmup-s", "0.2", "--max-windows", "2",
                        "--ceiling-model", "none", "--shm", "--json", report},
                       seconds(90), &output),
            0)
      << output;
  const auto j = nlohmann::json::parse(es::it::ReadTextFile(report));
  const uint64_t ok = j["totals"]["client_ok"].get<uint64_t>();
  EXPECT_GT(ok, 0u);
  EXPECT_EQ(j["totals"]["client_failed"].get<uint64_t>(), 0u) << j["totals"].dump();
  EXPECT_EQ(GrpcSuccessCount(server_->address(), "mlp") - served_before, ok + 1) << "plus the tool's check call";
  // 8 images are 25088 bytes in the message; through shared memory only the parameters travel.
  EXPECT_LT(j["config"]["request_bytes"].get<uint64_t>(), 1000u) << j["config"].dump();
  EXPECT_EQ(ClientShmObjects(), before);
  EXPECT_EQ(RegisteredRegions(server_->address()), 0);
}

TEST(CliHttpNoServer, UnreachableIsUnavailable) {
  WatchdogScope watchdog(seconds(60), "UnreachableIsUnavailable");
  const std::string address = "127.0.0.1:" + std::to_string(es::it::ClosedLoopbackPort());
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"live"}, {"ready"}, {"index"}, {"metadata", "mlp"}, {"stats"}, {"infer", "mlp"}}) {
    const CliRun r = RunCli({"--http", "--server", address}, args);
    EXPECT_EQ(r.rc, 1) << r.output;
    EXPECT_EQ(ErrorCode(r.output), "UNAVAILABLE") << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  const CliRun r = RunCli({"--http", "--server", "no-port"}, {"live"});
  EXPECT_EQ(r.rc, 2) << r.output;
}

// TLS with a client certificate (mTLS) and a bearer token: the same answers
// and refusals over HTTPS as over gRPC with TLS.
TEST(CliHttpTls, ClientCertificateAndToken) {
  WatchdogScope watchdog(seconds(200), "CliHttpTls");
  es::it::TempDir certs("es_cli_http_certs_");
  std::string output;
  ASSERT_EQ(RunCommand({"/bin/bash", es::test_paths::kMakeTestCertsSh, certs.root()}, seconds(60), &output), 0)
      << output;
  ASSERT_TRUE(es::it::WriteTextFile(certs.path() / "tokens.txt", std::string("infer ") + kInferToken + "\n"));
  ServerProcess::Options options;
  options.extra_config = "tls:\n  cert: " + certs.Path("server.pem") + "\n  key: " + certs.Path("server.key") +
                         "\n  client_ca: " + certs.Path("ca.pem") +
                         "\nauth:\n  tokens_file: " + certs.Path("tokens.txt") + "\n  open_health: false\n";
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = es::it::ReadTextFile(certs.Path("ca.pem"));
  ssl.pem_cert_chain = es::it::ReadTextFile(certs.Path("client.pem"));
  ssl.pem_private_key = es::it::ReadTextFile(certs.Path("client.key"));
  options.channel_credentials = grpc::SslCredentials(ssl);
  auto server = ServerProcess::Start(options);
  ASSERT_NE(server, nullptr) << ServerProcess::last_start_error();
  const std::vector<std::string> tls = {"--ssl-ca",  certs.Path("ca.pem"),    "--ssl-cert", certs.Path("client.pem"),
                                        "--ssl-key", certs.Path("client.key")};
  auto both = [&](std::vector<std::string> flags, const std::vector<std::string>& args) {
    std::vector<std::string> g = {"--server", server->address()};
    std::vector<std::string> h = {"--http", "--server", server->http_address()};
    g.insert(g.end(), flags.begin(), flags.end());
    h.insert(h.end(), flags.begin(), flags.end());
    return std::make_pair(RunCli(g, args), RunCli(h, args));
  };
  std::vector<std::string> with_token = tls;
  with_token.insert(with_token.end(), {"--token", kInferToken});
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"live"}, {"ready", "mlp"}, {"infer", "mlp", "--json", "--seed", "2"}}) {
    auto [g, h] = both(with_token, args);
    EXPECT_EQ(g.rc, 0) << g.output;
    EXPECT_EQ(h.rc, 0) << h.output;
    EXPECT_EQ(h.output, g.output);
  }
  // No token: UNAUTHENTICATED (exit 1); a wrong token too.
  for (const auto& flags : {tls, [&] {
                              auto f = tls;
                              f.insert(f.end(), {"--token", "not-a-token"});
                              return f;
                            }()}) {
    auto [g, h] = both(flags, {"infer", "mlp"});
    EXPECT_EQ(g.rc, 1) << g.output;
    EXPECT_EQ(h.rc, 1) << h.output;
    EXPECT_EQ(ErrorCode(g.output), "UNAUTHENTICATED") << g.output;
    EXPECT_EQ(ErrorCode(h.output), "UNAUTHENTICATED") << h.output;
    EXPECT_EQ(h.output.find("not-a-token"), std::string::npos) << "the token must not be printed: " << h.output;
  }
  // A server certificate from a CA the client does not trust, and no client
  // certificate where the server requires one: no connection (UNAVAILABLE).
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--ssl-ca", certs.Path("other_ca.pem"), "--ssl-cert", certs.Path("client.pem"),
                                 "--ssl-key", certs.Path("client.key"), "--token", kInferToken},
        std::vector<std::string>{"--ssl-ca", certs.Path("ca.pem"), "--token", kInferToken}}) {
    auto [g, h] = both(flags, {"infer", "mlp"});
    EXPECT_EQ(g.rc, 1) << g.output;
    EXPECT_EQ(h.rc, 1) << h.output;
    EXPECT_EQ(ErrorCode(h.output), ErrorCode(g.output)) << "gRPC: " << g.output << "\nHTTP: " << h.output;
  }
  // Registering a region is an admin call: with an infer token, --shm is
  // refused PERMISSION_DENIED, on either transport, and the object is gone.
  const std::set<std::string> objects = ClientShmObjects();
  auto [g, h] = both(with_token, {"infer", "mlp", "--shm"});
  EXPECT_EQ(g.rc, 1) << g.output;
  EXPECT_EQ(h.rc, 1) << h.output;
  EXPECT_EQ(ErrorCode(g.output), "PERMISSION_DENIED") << g.output;
  EXPECT_EQ(ErrorCode(h.output), "PERMISSION_DENIED") << h.output;
  EXPECT_NE(h.output.find("registering shared-memory region"), std::string::npos) << h.output;
  EXPECT_NE(h.output.find("over HTTP"), std::string::npos) << h.output;
  EXPECT_EQ(ClientShmObjects(), objects);
  // Plaintext HTTP to the TLS port: refused, not hung.
  const CliRun plain = RunCli({"--http", "--server", server->http_address(), "--token", kInferToken}, {"live"});
  EXPECT_EQ(plain.rc, 1) << plain.output;
}

}  // namespace
}  // namespace es::cli
