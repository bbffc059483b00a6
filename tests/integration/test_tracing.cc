// Acceptance of Triton's trace extension in "triton" mode (docs/tracing.md)
// through the real server and hosts: started with --trace-file,
// --trace-level TIMESTAMPS and --trace-rate 1, it is sent an ensemble
// request over gRPC and an mlp request over HTTP (curl); then mlp's own
// trace_level is set OFF (gRPC TraceSetting, then read back over HTTP) and
// mlp is called again. After the server stops, the file is a JSON array in
// Triton's format (and /metrics counted the traces written):
//  - the ensemble's trace (GRPC_* and REQUEST_* timestamps) and one trace
//    per member, whose parent_id is the ensemble's, whose timestamps lie
//    within the ensemble's REQUEST_START..REQUEST_END and run in Triton's
//    order (QUEUE_START <= COMPUTE_START <= ... <= COMPUTE_END);
//  - the HTTP request's trace (HTTP_RECV_START ... HTTP_SEND_END);
//  - no trace of the call made after mlp's level went OFF.
#include <gtest/gtest.h>

#include <csignal>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/kserve_helpers.h"
#include "tests/integration/metrics/metrics_support.h"
#include "tests/integration/server_process.h"

namespace es::it {
namespace {

using json = nlohmann::json;
using metrics_test::Scrape;
using std::chrono::seconds;

struct Trace {
  uint64_t id = 0, parent_id = 0;
  std::string model;
  int64_t version = 0;
  std::map<std::string, uint64_t> ns;  // by timestamp name
  std::vector<std::string> order;
};

std::map<uint64_t, Trace> ReadTraces(const std::string& path) {
  std::map<uint64_t, Trace> traces;
  const json file = json::parse(ReadTextFile(path), nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(file.is_array()) << ReadTextFile(path);
  if (!file.is_array()) return traces;
  for (const json& entry : file) {
    Trace& t = traces[entry.at("id").get<uint64_t>()];
    t.id = entry.at("id").get<uint64_t>();
    if (entry.contains("model_name")) {
      t.model = entry["model_name"].get<std::string>();
      t.version = entry.value("model_version", int64_t{0});
      t.parent_id = entry.value("parent_id", uint64_t{0});
    }
    if (!entry.contains("timestamps")) continue;
    for (const json& mark : entry["timestamps"]) {
      t.ns[mark["name"].get<std::string>()] = mark["ns"].get<uint64_t>();
      t.order.push_back(mark["name"].get<std::string>());
    }
  }
  return traces;
}

std::string Curl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/curl", "-sS"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  EXPECT_EQ(RunCommand(argv, seconds(30), &out), 0) << out;
  return out;
}

std::string MlpJsonRequest() {
  std::string data;
  for (int i = 0; i < 784; ++i) data += (i ? ",0.5" : "0.5");
  return R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,1,28,28],"data":[)" + data + "]}]}";
}

TEST(TracingTest, AnEnsembleRequestIsTracedWithItsMembersAndModelsCanBeTurnedOff) {
  WatchdogScope watchdog(seconds(240), "TracingTest");
  TempDir traces;
  const std::string file = traces.Path("trace.json");
  ServerProcess::Options options;
  options.extra_args = {"--trace-file", file, "--trace-level", "TIMESTAMPS", "--trace-rate", "1"};
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();

  ASSERT_TRUE(Infer(*stub, ImageRequest("demo_ensemble", RandomImages(1, 3))).status.ok());
  const std::string http = "http://" + server->http_address();
  const json answer = json::parse(Curl({"-X", "POST", http + "/v2/models/mlp/infer", "-d", MlpJsonRequest()}),
                                  nullptr, false);
  ASSERT_TRUE(answer.contains("outputs")) << answer.dump();

  inference::TraceSettingRequest off;
  off.set_model_name("mlp");
  (*off.mutable_settings())["trace_level"].add_value("OFF");
  inference::TraceSettingResponse now;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    const grpc::Status s = stub->TraceSetting(&ctx, off, &now);
    ASSERT_TRUE(s.ok()) << Describe(s);
  }
  EXPECT_EQ(now.settings().at("trace_level").value(0), "OFF");
  EXPECT_EQ(now.settings().at("trace_file").value(0), file);
  const json model_settings = json::parse(Curl({http + "/v2/models/mlp/trace/setting"}), nullptr, false);
  EXPECT_EQ(model_settings["trace_level"], json::array({"OFF"})) << model_settings.dump();
  const json server_settings = json::parse(Curl({http + "/v2/trace/setting"}), nullptr, false);
  EXPECT_EQ(server_settings["trace_level"], json::array({"TIMESTAMPS"})) << server_settings.dump();
  EXPECT_EQ(server_settings["trace_rate"], "1");
  const json refused =
      json::parse(Curl({"-X", "POST", http + "/v2/trace/setting", "-d", R"({"trace_rate": "0"})"}), nullptr, false);
  EXPECT_NE(refused.value("error", "").find("trace_rate"), std::string::npos) << refused.dump();
  ASSERT_TRUE(Infer(*stub, ImageRequest("mlp", RandomImages(1, 4))).status.ok());
  // /metrics counts what the writer wrote: the ensemble's 4 and the HTTP call's 1.
  std::optional<double> written;
  for (int i = 0; i < 100 && written.value_or(0) < 5; ++i) {
    std::optional<Scrape> scrape = Scrape::From(server->metrics_address());
    ASSERT_TRUE(scrape.has_value());
    written = scrape->Value("ensemble_traces_written_total");
    EXPECT_EQ(scrape->Value("ensemble_traces_dropped_total"), 0.0);
    if (written.value_or(0) < 5) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(written, 5.0);

  server->Signal(SIGTERM);
  int status = 0;
  ASSERT_TRUE(server->WaitExit(std::chrono::milliseconds(30000), &status));
  const std::map<uint64_t, Trace> all = ReadTraces(file);

  const Trace* ensemble = nullptr;
  std::vector<const Trace*> members, direct;
  for (const auto& [id, t] : all) {
    if (t.model == "demo_ensemble") ensemble = &t;
  }
  ASSERT_NE(ensemble, nullptr) << ReadTextFile(file);
  for (const auto& [id, t] : all) {
    if (t.parent_id == ensemble->id) {
      members.push_back(&t);
    } else if (&t != ensemble) {
      direct.push_back(&t);
    }
  }
  EXPECT_EQ(ensemble->order.front(), "GRPC_WAITREAD_START");
  EXPECT_EQ(ensemble->order.back(), "GRPC_SEND_END");
  ASSERT_EQ(members.size(), 3u) << ReadTextFile(file);
  const std::vector<std::string> compute = {"REQUEST_START",        "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
                                            "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"};
  for (const Trace* m : members) {
    const std::string& name = m->model;
    EXPECT_EQ(m->version, 1) << name;
    for (size_t i = 0; i < compute.size(); ++i) {
      ASSERT_EQ(m->ns.count(compute[i]), 1u) << name << " has no " << compute[i];
      if (i > 0) {
        EXPECT_LE(m->ns.at(compute[i - 1]), m->ns.at(compute[i])) << name << ": " << compute[i];
      }
    }
    EXPECT_GE(m->ns.at("REQUEST_START"), ensemble->ns.at("REQUEST_START")) << name;
    EXPECT_LE(m->ns.at("REQUEST_END"), ensemble->ns.at("REQUEST_END")) << name;
  }
  // The HTTP call of mlp; not the one made after its level went OFF.
  ASSERT_EQ(direct.size(), 1u) << ReadTextFile(file);
  EXPECT_EQ(direct[0]->model, "mlp");
  EXPECT_EQ(direct[0]->order.front(), "HTTP_RECV_START");
  EXPECT_EQ(direct[0]->order.back(), "HTTP_SEND_END");
}

}  // namespace
}  // namespace es::it
