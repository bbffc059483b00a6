#include "server/kserve/model_upload_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace es {
namespace {

using json = nlohmann::json;

ServerConfig TwoCpuOneGpuServer() {
  ServerConfig server;
  server.hosts.resize(3);
  server.hosts[0].name = "cpu0";
  server.hosts[0].device = "cpu";
  server.hosts[1].name = "cpu1";
  server.hosts[1].device = "cpu";
  server.hosts[2].name = "gpu0";
  server.hosts[2].device = "cuda:0";
  return server;
}

json Translate(const json& triton, const std::string& model = "m") {
  StatusOr<std::string> yaml = TritonConfigToYaml(triton.dump(), model, TwoCpuOneGpuServer());
  EXPECT_TRUE(yaml.ok()) << yaml.status().ToString();
  return yaml.ok() ? json::parse(*yaml) : json();
}

// What our ModelConfig RPC answers for a batched model, as
// get_model_config(as_json=True) gives it (int64 dims as strings).
TEST(TritonConfigToYamlTest, TritonsFieldsBecomeOurs) {
  const json triton = json::parse(R"({
    "name": "m", "platform": "pytorch_libtorch", "backend": "pytorch", "max_batch_size": 64,
    "input": [{"name": "input", "data_type": "TYPE_FP32", "dims": ["1", "28", "28"]}],
    "output": [{"name": "probabilities", "data_type": "TYPE_FP32", "dims": [10], "label_filename": ""}],
    "version_policy": {"latest": {"num_versions": 1}},
    "dynamic_batching": {"preferred_batch_size": [8, 16], "max_queue_delay_microseconds": "500",
                         "priority_levels": "3", "default_priority_level": "2",
                         "default_queue_policy": {"max_queue_size": 100, "timeout_action": ""}},
    "instance_group": [{"name": "m_0", "kind": "KIND_CPU", "count": 4}],
    "response_cache": {"enable": true},
    "optimization": {}, "model_warmup": [], "parameters": {}
  })");
  const json ours = Translate(triton);
  EXPECT_EQ(ours["platform"], "torchscript");
  EXPECT_EQ(ours["max_batch_size"], 64);
  EXPECT_EQ(ours["inputs"], json::parse(R"([{"name": "input", "datatype": "FP32", "dims": [1, 28, 28]}])"));
  EXPECT_EQ(ours["outputs"], json::parse(R"([{"name": "probabilities", "datatype": "FP32", "dims": [10]}])"));
  EXPECT_EQ(ours["version_policy"], triton["version_policy"]);
  EXPECT_EQ(ours["dynamic_batching"], json::parse(R"({"preferred_batch_sizes": [8, 16], "max_queue_delay_us": 500,
                                                       "priority_levels": 3, "default_priority": 2,
                                                       "max_queue_size": 100})"));
  // KIND_CPU: the server's two CPU hosts, 4 instances spread over them.
  EXPECT_EQ(ours["hosts"], json::parse(R"(["cpu0", "cpu1"])"));
  EXPECT_EQ(ours["instances_per_host"], 2);
  EXPECT_EQ(ours["response_cache"], triton["response_cache"]);
  EXPECT_FALSE(ours.contains("optimization"));
  EXPECT_FALSE(ours.contains("name"));
}

TEST(TritonConfigToYamlTest, OurOwnFieldNamesPassAsTheyAre) {
  const json ours = Translate(json::parse(R"({"backend": "pytorch", "hosts": ["gpu0"], "max_compute_ms": 50,
      "inputs": [{"name": "x", "datatype": "INT64", "dims": [-1]}],
      "instance_group": [{"kind": "KIND_GPU", "count": 3}]})"));
  EXPECT_EQ(ours["platform"], "torchscript");
  EXPECT_EQ(ours["hosts"], json::parse(R"(["gpu0"])"));  // named hosts win over the group's kind
  EXPECT_EQ(ours["instances_per_host"], 3);
  EXPECT_EQ(ours["max_compute_ms"], 50);
  EXPECT_EQ(ours["inputs"][0]["datatype"], "INT64");
}

TEST(TritonConfigToYamlTest, RefusalsNameTheField) {
  const struct {
    const char* config;
    StatusCode code;
    const char* needle;
  } cases[] = {
      {R"([1, 2])", StatusCode::kInvalidArgument, "not a JSON object"},
      {R"({"platform": "ensemble"})", StatusCode::kInvalidArgument, "ensemble cannot be uploaded"},
      {R"({"platform": "onnxruntime_onnx"})", StatusCode::kInvalidArgument, "'onnxruntime_onnx' is not served"},
      {R"({"backend": "python"})", StatusCode::kInvalidArgument, "backend: 'python'"},
      {R"({"max_batch_size": 4})", StatusCode::kInvalidArgument, "platform: missing"},
      {R"({"name": "other", "platform": "pytorch_libtorch"})", StatusCode::kInvalidArgument, "'other' is not"},
      {R"({"platform": "pytorch_libtorch", "optimization": {"priority": "PRIORITY_MAX"}})",
       StatusCode::kInvalidArgument, "optimization: not supported"},
      {R"({"platform": "pytorch_libtorch", "input": [{"name": "x", "reshape": {"shape": [2]}}]})",
       StatusCode::kInvalidArgument, "input[0].reshape"},
      {R"({"platform": "pytorch_libtorch", "input": [{"name": "x", "dims": ["1x"]}]})",
       StatusCode::kInvalidArgument, "input[0].dims[0]: expected an integer"},
      {R"({"platform": "pytorch_libtorch", "max_batch_size": 1.5})", StatusCode::kInvalidArgument,
       "max_batch_size: expected an integer"},
      {R"({"platform": "pytorch_libtorch", "instance_group": [{"kind": "KIND_TPU"}]})",
       StatusCode::kInvalidArgument, "KIND_TPU"},
      {R"({"platform": "pytorch_libtorch", "instance_group": [{"count": 0}]})", StatusCode::kInvalidArgument,
       "instance_group[0].count"},
      {R"({"platform": "pytorch_libtorch", "dynamic_batching": {"priority_queue_policy": {"1": {"max_queue_size": 3}}}})",
       StatusCode::kInvalidArgument, "dynamic_batching.priority_queue_policy"},
  };
  for (const auto& c : cases) {
    const Status s = TritonConfigToYaml(c.config, "m", TwoCpuOneGpuServer()).status();
    EXPECT_EQ(s.code(), c.code) << c.config << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << c.config << ": " << s.message();
  }
  // Nested past the bound, in a field that would be walked by recursion
  // (a field Triton has and we do not must hold its default): refused, not
  // a stack overflow.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const Status nested =
      TritonConfigToYaml(R"({"platform": "pytorch_libtorch", "model_warmup": )" + deep + "}", "m", TwoCpuOneGpuServer())
          .status();
  EXPECT_EQ(nested.message(), "load parameter 'config' nests arrays and objects deeper than 64 levels")
      << nested.ToString();
  // No GPU host: a KIND_GPU group has nowhere to run.
  ServerConfig cpu_only = TwoCpuOneGpuServer();
  cpu_only.hosts.pop_back();
  const Status s = TritonConfigToYaml(R"({"platform": "pytorch_libtorch", "instance_group": [{"kind": "KIND_GPU"}]})",
                                      "m", cpu_only)
                       .status();
  EXPECT_NE(s.message().find("no host of kind KIND_GPU"), std::string::npos) << s.message();
}

LoadParameters Parameters(std::initializer_list<std::pair<std::string, std::string>> strings,
                          std::initializer_list<std::pair<std::string, std::string>> bytes) {
  LoadParameters p;
  for (const auto& [k, v] : strings) p[k].set_string_param(v);
  for (const auto& [k, v] : bytes) p[k].set_bytes_param(v);
  return p;
}

TEST(UploadFromLoadParametersTest, ConfigAndFilesAsTritonclientSendsThem) {
  const std::string config = R"({"platform": "pytorch_libtorch", "max_batch_size": 2})";
  StatusOr<ModelRepository::Upload> upload = UploadFromLoadParameters(
      "m", Parameters({{"config", config}}, {{"file:2/model.pt", "two"}, {"file:1/model.pt", "one"}}),
      TwoCpuOneGpuServer());
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  EXPECT_EQ(json::parse(upload->config_yaml)["max_batch_size"], 2);
  ASSERT_EQ(upload->files.size(), 2u);
  EXPECT_EQ(upload->files[0].path, "1/model.pt");  // in path order
  EXPECT_EQ(upload->files[0].bytes, "one");
  EXPECT_EQ(upload->files[1].path, "2/model.pt");
}

TEST(UploadFromLoadParametersTest, Refusals) {
  const std::string config = R"({"platform": "pytorch_libtorch"})";
  const ServerConfig server = TwoCpuOneGpuServer();
  const struct {
    LoadParameters params;
    const char* needle;
  } cases[] = {
      {Parameters({}, {{"file:1/model.pt", "x"}}), "need a 'config'"},
      {Parameters({{"config", config}, {"colour", "red"}}, {}), "unknown load parameter 'colour'"},
      {Parameters({{"config", config}}, {{"file:../x", "x"}}), "'../x'"},
      {Parameters({{"config", config}}, {{"file:", "x"}}), "empty path"},
      {Parameters({{"config", config}}, {{"file:config.yaml", "x"}}), "comes from the 'config' parameter"},
  };
  for (const auto& c : cases) {
    const Status s = UploadFromLoadParameters("m", c.params, server).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.message();
  }
  // Files past the count or the bytes bound: refused before any is copied.
  LoadParameters many;
  many["config"].set_string_param(config);
  for (size_t i = 0; i <= kMaxUploadFiles; ++i) many["file:f" + std::to_string(i)].set_bytes_param("x");
  Status s = UploadFromLoadParameters("m", many, server).status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(s.message(), "model 'm': more than 1024 file: load parameters");
  ServerConfig small = server;
  small.limits.max_request_bytes = 10;
  s = UploadFromLoadParameters("m", Parameters({{"config", config}}, {{"file:1/model.pt", std::string(11, 'x')}}),
                               small)
          .status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("hold 11 bytes, more than 10 (limits.max_request_bytes)"), std::string::npos)
      << s.message();
  LoadParameters int_config;
  int_config["config"].set_int64_param(3);
  EXPECT_NE(UploadFromLoadParameters("m", int_config, server).status().message().find("must be a string"),
            std::string::npos);
}

}  // namespace
}  // namespace es
