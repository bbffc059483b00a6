// HttpRoutes::Handle (server/http/http_routes.h) without a network: HttpRequest
// values in, the Reply captured, over a test repository with no hosts
// running. Covers routing (404 for an unknown path, 405 with Allow for a
// wrong method, 400 for a bad percent-escape, percent-decoded model names),
// the health routes, server and model metadata, model ready/config/stats,
// the repository index and its `ready` filter, load/unload outside explicit
// mode (503 with the error JSON), the shared-memory routes without a
// registry, /v2/logging and the trace settings routes (Triton's logging and
// trace extensions: JSON types, errors
// naming the setting, admin to change), and the token checks (401/403, open
// health).
#include "server/http/http_routes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/common/temp_dir.h"
#include "tests/server/kserve/hostless_parts.h"

namespace es {
namespace {

using json = nlohmann::json;

class HttpRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto config = WriteHostlessRepository(dir_);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    config_ = std::move(config).value();
  }

  // Builds the collaborators as the router does, with no host supervisors
  // (versions are READY, no model is ready to run). `tokens`: an AuthPolicy
  // with an infer and an admin token.
  void Start(bool tokens = false, bool open_health = true) {
    if (tokens) {
      AuthConfig auth;
      auth.tokens_file = WriteTestTokens(dir_);
      auth.open_health = open_health;
      auto policy = AuthPolicy::Load(auth);
      ASSERT_TRUE(policy.ok()) << policy.status().ToString();
      auth_ = std::move(policy).value();
    }
    parts_ = std::make_unique<HostlessParts>(&config_);
    ASSERT_TRUE(parts_->started.ok()) << parts_->started.ToString();
    trace_settings_ = std::make_unique<TraceSettingsReply>(&tracer_, parts_->repository.get());
    routes_ = std::make_unique<HttpRoutes>(parts_->answers.get(), parts_->calls.get(), auth_.get(), nullptr,
                                           &log_settings_, trace_settings_.get());
  }

  static TraceSettings TraceFileIn(const testing::TempDir& dir) {
    TraceSettings settings;
    settings.file = (dir.path() / "trace.json").string();
    return settings;
  }

  void TearDown() override {
    routes_.reset();
    parts_.reset();
    ApplyLogSettings(LogSettings{});  // what a test changed does not reach the next
  }

  // Handles one request; every route used here answers before Handle
  // returns. A response with `render` set is rendered, as the transport does.
  HttpResponse Call(const std::string& method, const std::string& target, const std::string& body = "",
                    const char* token = nullptr) {
    auto request = std::make_shared<HttpRequest>();
    request->method = method;
    request->target = target;
    request->body = body;
    if (token != nullptr) request->authorization = std::string("Bearer ") + token;
    std::optional<HttpResponse> answer;
    int replies = 0;
    routes_->Handle(std::move(request), [&](HttpResponse r) {
      ++replies;
      answer = std::move(r);
    });
    EXPECT_EQ(replies, 1) << method << " " << target << ": exactly one reply, before Handle returned";
    if (!answer) {
      HttpResponse none;
      none.status = -1;
      return none;
    }
    if (answer->render) answer->render(*answer);
    return std::move(*answer);
  }

  static json Body(const HttpResponse& r) {
    json body = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(body.is_discarded()) << "not JSON: " << r.body;
    return body;
  }

  // The {"error": ...} of an error response; "" if there is none.
  static std::string Error(const HttpResponse& r) {
    const json body = Body(r);
    if (!body.is_object() || !body.contains("error") || !body["error"].is_string()) return "";
    return body["error"].get<std::string>();
  }

  testing::TempDir dir_;
  ServerConfig config_;
  std::unique_ptr<HostlessParts> parts_;
  std::unique_ptr<AuthPolicy> auth_;
  std::vector<LogSettings> applied_;  // by /v2/logging updates
  LogSettingsReply log_settings_{[this](const LogSettings& settings) {
    applied_.push_back(settings);
    ApplyLogSettings(settings);
  }};
  // Traces to a file in dir_: a trace level can be set (without somewhere to
  // write them it is refused).
  Tracer tracer_{TraceFileIn(dir_)};
  std::unique_ptr<TraceSettingsReply> trace_settings_;
  std::unique_ptr<HttpRoutes> routes_;
};

TEST(HttpStatusForTest, MapsTheProtocolCodesOntoHttp) {
  EXPECT_EQ(HttpStatusFor(StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusFor(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFor(StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusFor(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(StatusCode::kInternal), 500);
}

TEST_F(HttpRoutesTest, UnknownPathsAre404WithTheErrorJson) {
  Start();
  for (const char* target : {"/", "/v1/models/mlp", "/v2/nothing", "/v2/models/mlp/bogus",
                             "/v2/models/mlp/versions/1/config/more", "/v2/repository/models/mlp/reload"}) {
    const HttpResponse r = Call("GET", target);
    EXPECT_EQ(r.status, 404) << target;
    EXPECT_NE(Error(r).find("no route"), std::string::npos) << target << ": " << r.body;
  }
}

TEST_F(HttpRoutesTest, AWrongMethodIs405NamingTheAllowedOne) {
  Start();
  HttpResponse r = Call("POST", "/v2/health/live");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.allow, "GET");
  r = Call("GET", "/v2/repository/index");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.allow, "POST");
  r = Call("GET", "/v2/models/mlp/infer");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.allow, "POST");
  r = Call("DELETE", "/v2/models/mlp");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.allow, "GET");
  EXPECT_FALSE(Error(r).empty()) << r.body;
}

TEST_F(HttpRoutesTest, ABadPercentEscapeIs400) {
  Start();
  for (const char* target : {"/v2/models/ml%zz", "/v2/models/mlp%2", "/v2/models/%"}) {
    const HttpResponse r = Call("GET", target);
    EXPECT_EQ(r.status, 400) << target;
    EXPECT_NE(Error(r).find("percent-escape"), std::string::npos) << r.body;
  }
}

TEST_F(HttpRoutesTest, PathSegmentsArePercentDecodedAndTheQueryIgnored) {
  Start();
  const HttpResponse r = Call("GET", "/v2/models/ml%70?x=1");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r)["name"], "mlp");
}

TEST_F(HttpRoutesTest, HealthLiveIs200AndReadyFollowsTheServer) {
  Start();
  HttpResponse live = Call("GET", "/v2/health/live");
  EXPECT_EQ(live.status, 200);
  EXPECT_TRUE(live.body.empty());
  EXPECT_EQ(Call("GET", "/v2/health/ready").status, 400) << "mlp has no host up";
}

TEST_F(HttpRoutesTest, HealthReadyIs200WhenTheServerIsReadyAnd400WhileDraining) {
  config_.models.clear();
  Start();
  EXPECT_EQ(Call("GET", "/v2/health/ready").status, 200);
  parts_->calls->SetAccepting(false);
  EXPECT_EQ(Call("GET", "/v2/health/ready").status, 400);
  EXPECT_EQ(Call("GET", "/v2/health/live").status, 200) << "draining is still live";
}

TEST_F(HttpRoutesTest, ServerMetadataAddsTheBinaryTensorExtension) {
  Start();
  const HttpResponse r = Call("GET", "/v2");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  const json body = Body(r);
  EXPECT_EQ(body["name"], "ensemble-serve");
  ASSERT_TRUE(body["extensions"].is_array()) << r.body;
  bool binary = false, shm = false;
  for (const auto& e : body["extensions"]) {
    binary = binary || e == "binary_tensor_data";
    shm = shm || e == "system_shared_memory";
  }
  EXPECT_TRUE(binary) << r.body;
  EXPECT_FALSE(shm) << r.body;
}

TEST_F(HttpRoutesTest, ModelMetadataIsJsonForAKnownModelAnd404ForAnUnknownOne) {
  Start();
  HttpResponse r = Call("GET", "/v2/models/mlp");
  ASSERT_EQ(r.status, 200) << r.body;
  json body = Body(r);
  EXPECT_EQ(body["name"], "mlp");
  EXPECT_EQ(body["versions"], json::array({"1"})) << r.body;
  ASSERT_TRUE(body["inputs"].is_array()) << r.body;
  EXPECT_EQ(body["inputs"][0]["name"], "input");
  EXPECT_EQ(body["inputs"][0]["datatype"], "FP32");

  EXPECT_EQ(Call("GET", "/v2/models/mlp/versions/1").status, 200);
  r = Call("GET", "/v2/models/mlp/versions/4");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(Error(r).find("'4'"), std::string::npos) << r.body;
  r = Call("GET", "/v2/models/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(Error(r).find("'nope'"), std::string::npos) << r.body;
}

TEST_F(HttpRoutesTest, ModelReadyIs400WithoutAHostAnd404ForAnUnknownModel) {
  Start();
  HttpResponse r = Call("GET", "/v2/models/mlp/ready");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(r.body.empty());
  EXPECT_EQ(Call("GET", "/v2/models/mlp/versions/1/ready").status, 400);
  r = Call("GET", "/v2/models/nope/ready");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(Error(r).find("'nope'"), std::string::npos) << r.body;
}

TEST_F(HttpRoutesTest, ModelConfigIsTheConfigItself) {
  Start();
  HttpResponse r = Call("GET", "/v2/models/mlp/config");
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = Body(r);
  EXPECT_EQ(body["name"], "mlp") << r.body;
  EXPECT_FALSE(body.contains("config")) << "Triton answers the config, not a wrapper: " << r.body;
  EXPECT_EQ(Call("GET", "/v2/models/nope/config").status, 404);
}

TEST_F(HttpRoutesTest, StatisticsOfOneModelOfEveryModelAndOfAnUnknownOne) {
  Start();
  HttpResponse r = Call("GET", "/v2/models/mlp/stats");
  ASSERT_EQ(r.status, 200) << r.body;
  json body = Body(r);
  ASSERT_TRUE(body["model_stats"].is_array()) << r.body;
  ASSERT_EQ(body["model_stats"].size(), 1u) << r.body;
  EXPECT_EQ(body["model_stats"][0]["name"], "mlp");
  // Every duration is there, zero or not (perf_analyzer reads them).
  EXPECT_TRUE(body["model_stats"][0].contains("inference_stats")) << r.body;

  r = Call("GET", "/v2/models/stats");
  ASSERT_EQ(r.status, 200) << r.body;
  body = Body(r);
  ASSERT_TRUE(body["model_stats"].is_array()) << r.body;
  EXPECT_EQ(body["model_stats"][0]["name"], "mlp");

  r = Call("GET", "/v2/models/nope/stats");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(Error(r).find("'nope'"), std::string::npos) << r.body;
}

TEST_F(HttpRoutesTest, RepositoryIndexListsVersionsAndFiltersOnReady) {
  Start();
  HttpResponse r = Call("POST", "/v2/repository/index");
  ASSERT_EQ(r.status, 200) << r.body;
  json body = Body(r);
  ASSERT_TRUE(body.is_array()) << r.body;
  bool found = false;
  for (const auto& m : body) {
    if (m["name"] == "mlp" && m["version"] == "1") {
      found = true;
      EXPECT_EQ(m["state"], "UNAVAILABLE") << "no host serving it is up: " << r.body;
    }
  }
  EXPECT_TRUE(found) << r.body;

  r = Call("POST", "/v2/repository/index", R"({"ready": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r), json::array()) << r.body;

  EXPECT_EQ(Call("POST", "/v2/repository/index", R"({"ready": 1})").status, 400);
  EXPECT_EQ(Call("POST", "/v2/repository/index", "not json").status, 400);
  EXPECT_EQ(Call("POST", "/v2/repository/index", "[1]").status, 400);
}

TEST_F(HttpRoutesTest, LoadAndUnloadOutsideExplicitModeAre503WithTheErrorJson) {
  Start();
  for (const char* target : {"/v2/repository/models/mlp/load", "/v2/repository/models/mlp/unload"}) {
    const HttpResponse r = Call("POST", target);
    EXPECT_EQ(r.status, 503) << target;
    EXPECT_NE(Error(r).find("--model-control-mode explicit"), std::string::npos) << target << ": " << r.body;
  }
}

TEST_F(HttpRoutesTest, UnloadParametersAreCheckedInExplicitMode) {
  config_.model_control_mode = ModelControlMode::kExplicit;
  Start();
  HttpResponse r = Call("POST", "/v2/repository/models/mlp/unload", R"({"parameters": {"force": true}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("'force'"), std::string::npos) << r.body;
  r = Call("POST", "/v2/repository/models/mlp/unload", R"({"parameters": {"unload_dependents": 1.5}})");
  EXPECT_EQ(r.status, 400) << r.body;
  r = Call("POST", "/v2/repository/models/mlp/load", R"({"parameters": "x"})");
  EXPECT_EQ(r.status, 400) << r.body;
}

TEST_F(HttpRoutesTest, SharedMemoryRoutesAre503WithoutARegistry) {
  Start();
  EXPECT_EQ(Call("GET", "/v2/systemsharedmemory/status").status, 503);
  EXPECT_EQ(Call("POST", "/v2/systemsharedmemory/unregister").status, 503);
  EXPECT_EQ(Call("POST", "/v2/systemsharedmemory/region/r/register", R"({"key": "/k", "byte_size": 8})").status,
            503);
  EXPECT_EQ(Call("POST", "/v2/systemsharedmemory/register").status, 404) << "register needs a region";
}

TEST_F(HttpRoutesTest, InferWithABodyThatIsNotJsonIs400AndEndsTheCall) {
  Start();
  const HttpResponse r = Call("POST", "/v2/models/mlp/infer", "{not json");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_FALSE(Error(r).empty()) << r.body;
  EXPECT_TRUE(parts_->calls->WaitForInFlight(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  EXPECT_EQ(parts_->calls->held(), 0) << "the place goes with the answer";
}

TEST_F(HttpRoutesTest, InferOfAnUnknownModelIs404) {
  Start();
  const HttpResponse r = Call("POST", "/v2/models/nope/infer",
                              R"({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                                  "data": [1, 2, 3, 4]}]})");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_NE(Error(r).find("'nope'"), std::string::npos) << r.body;
}

TEST_F(HttpRoutesTest, ATokenPolicyAnswers401WithoutAValidTokenAnd403ForAWrongRole) {
  Start(/*tokens=*/true);
  HttpResponse r = Call("GET", "/v2/models/mlp");
  EXPECT_EQ(r.status, 401);
  EXPECT_FALSE(Error(r).empty()) << r.body;
  EXPECT_EQ(Call("GET", "/v2/models/mlp", "", "not-a-token").status, 401);
  EXPECT_EQ(Call("GET", "/v2/models/mlp", "", kTestInferToken).status, 200);
  EXPECT_EQ(Call("GET", "/v2", "", kTestAdminToken).status, 200);

  r = Call("POST", "/v2/repository/models/mlp/load", "", kTestInferToken);
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(Error(r).find("admin"), std::string::npos) << r.body;
  EXPECT_EQ(Call("GET", "/v2/systemsharedmemory/status", "", kTestInferToken).status, 403);
  EXPECT_EQ(Call("POST", "/v2/repository/models/mlp/load", "", kTestAdminToken).status, 503)
      << "an admin token passes and gets the call's own answer";
  // The method is checked before the token.
  EXPECT_EQ(Call("GET", "/v2/repository/index").status, 405);
  // Health is open by default (probes).
  EXPECT_EQ(Call("GET", "/v2/health/live").status, 200);
  EXPECT_EQ(Call("GET", "/v2/models/mlp/ready").status, 400);
}

TEST_F(HttpRoutesTest, LoggingReadsAndChangesTheSettingsWithTritonsJsonTypes) {
  Start(/*tokens=*/true);
  HttpResponse r = Call("GET", "/v2/logging", "", kTestInferToken);
  ASSERT_EQ(r.status, 200) << r.body;
  const json read = Body(r);
  EXPECT_EQ(read, json::parse(R"({"log_file":"","log_info":true,"log_warning":true,"log_error":true,)"
                              R"("log_verbose_level":0,"log_format":"default"})"));
  EXPECT_EQ(Call("POST", "/v2/logging", R"({"log_verbose_level":1})", kTestInferToken).status, 403);
  EXPECT_TRUE(applied_.empty());

  r = Call("POST", "/v2/logging", R"({"log_verbose_level":1,"log_format":"json","log_info":false})", kTestAdminToken);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r)["log_verbose_level"], 1);
  EXPECT_EQ(Body(r)["log_format"], "json");
  EXPECT_EQ(Body(r)["log_info"], false);
  ASSERT_EQ(applied_.size(), 1u);
  EXPECT_EQ(applied_[0].format, LogFormat::kJson);

  for (const auto& [body, expected] : std::vector<std::pair<std::string, std::string>>{
           {R"({"log_verbose_level":-1})", "log setting 'log_verbose_level': expected a bool, a string or a whole"},
           {R"({"log_verbose_level":1.5})", "log setting 'log_verbose_level'"},
           {R"({"log_info":"yes"})", "'log_info' takes a bool"},
           {R"({"log_file":"/tmp/elsewhere.log"})", "'log_file' is set when the server starts"},
           {R"({"log_colour":true})", "unknown log setting 'log_colour'"},
           {R"([1, 2])", "must be a JSON object"},
           // A value nested 100,000 deep, which an error message would
           // have printed by recursion (a stack overflow: the router gone).
           {R"({"log_verbose_level":)" + std::string(100000, '[') + std::string(100000, ']') + "}",
            "the request body nests arrays and objects deeper than 64 levels"},
           {R"({"log_info":)", ""}}) {
    r = Call("POST", "/v2/logging", body, kTestAdminToken);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_NE(Error(r).find(expected), std::string::npos) << body << ": " << r.body;
  }
  EXPECT_EQ(applied_.size(), 1u) << "a refused update applies nothing";
  EXPECT_EQ(Call("PUT", "/v2/logging", "{}", kTestAdminToken).status, 405);
  r = Call("GET", "/v2", "", kTestInferToken);
  const json extensions = Body(r)["extensions"];
  EXPECT_NE(std::find(extensions.begin(), extensions.end(), "logging"), extensions.end()) << r.body;
}

TEST_F(HttpRoutesTest, TraceSettingsAreReadAndSetServerWideAndPerModelWithTritonsShapes) {
  Start(/*tokens=*/true);
  HttpResponse r = Call("GET", "/v2/trace/setting", "", kTestInferToken);
  ASSERT_EQ(r.status, 200) << r.body;
  json defaults = json::parse(R"({"trace_level":["OFF"],"trace_rate":"1000","trace_count":"-1",)"
                              R"("log_frequency":"0","trace_mode":"triton"})");
  defaults["trace_file"] = (dir_.path() / "trace.json").string();
  EXPECT_EQ(Body(r), defaults);
  EXPECT_EQ(Call("POST", "/v2/trace/setting", R"({"trace_rate":"5"})", kTestInferToken).status, 403);
  r = Call("POST", "/v2/models/mlp/trace/setting", R"({"trace_level":["TIMESTAMPS"],"trace_rate":"2"})",
           kTestAdminToken);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r)["trace_level"], json::array({"TIMESTAMPS"}));
  EXPECT_EQ(Body(r)["trace_rate"], "2");
  EXPECT_EQ(Body(Call("GET", "/v2/trace/setting", "", kTestInferToken))["trace_rate"], "1000")
      << "the server's settings are not the model's";
  r = Call("POST", "/v2/models/mlp/trace/setting", R"({"trace_rate":null})", kTestAdminToken);
  EXPECT_EQ(Body(r)["trace_rate"], "1000") << "null clears the model's value: the server's applies";
  EXPECT_EQ(Call("GET", "/v2/models/nope/trace/setting", "", kTestInferToken).status, 404);
  for (const auto& [body, expected] : std::vector<std::pair<std::string, std::string>>{
           {R"({"trace_rate":"0"})", "'trace_rate': '0' is not a whole number of 1 or more"},
           {R"({"trace_level":"TENSORS"})", "'trace_level': 'TENSORS'"},
           {R"({"trace_rate":5})", "expected a string, a list of strings or null"},
           {R"({"trace_file":"/tmp/x.json"})", "'trace_file' is set when the server starts"}}) {
    r = Call("POST", "/v2/trace/setting", body, kTestAdminToken);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_NE(Error(r).find(expected), std::string::npos) << body << ": " << r.body;
  }
  EXPECT_EQ(Call("DELETE", "/v2/trace/setting", "", kTestAdminToken).status, 405);
}

TEST_F(HttpRoutesTest, ClosedHealthNeedsAToken) {
  Start(/*tokens=*/true, /*open_health=*/false);
  EXPECT_EQ(Call("GET", "/v2/health/live").status, 401);
  EXPECT_EQ(Call("GET", "/v2/health/live", "", kTestInferToken).status, 200);
}

}  // namespace
}  // namespace es
