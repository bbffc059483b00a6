// FillModelConfig: our models as Triton's inference.ModelConfig. The field
// numbers and enum values are wire facts (tritonclient and perf_analyzer
// decode the answer with Triton's own model_config.proto), so they are
// checked as numbers here, not only through the generated names.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "proto/grpc_service.pb.h"
#include "server/kserve/model_config_reply.h"

namespace es {
namespace {

HostConfig Host(const std::string& name, const std::string& device) {
  HostConfig host;
  host.name = name;
  host.device = device;
  return host;
}

ServerConfig TwoCpuHosts() {
  ServerConfig server;
  server.hosts = {Host("cpu0", "cpu"), Host("cpu1", "cpu")};
  return server;
}

// A batched classifier as the demo writes it, plus batching and a policy.
ModelConfig Mlp() {
  ModelConfig m;
  m.name = "mlp";
  m.platform = "torchscript";
  m.max_batch_size = 64;
  m.inputs = {TensorSpec{"input", DataType::kFp32, {1, 28, 28}}};
  m.outputs = {TensorSpec{"probabilities", DataType::kFp32, {10}}, TensorSpec{"ids", DataType::kInt64, {-1}}};
  m.versions = {1, 2, 3};
  m.version_policy.kind = VersionPolicy::Kind::kSpecific;
  m.version_policy.versions = {1, 3};
  m.hosts = {"cpu0", "cpu1"};
  m.instances_per_host = 3;
  m.dynamic_batching.enabled = true;
  m.dynamic_batching.max_queue_delay_us = 1500;
  m.dynamic_batching.preferred_batch_sizes = {8, 32};
  m.dynamic_batching.max_queue_size = 77;
  m.dynamic_batching.priority_levels = 3;
  m.dynamic_batching.default_priority = 2;
  return m;
}

ModelConfig Ensemble() {
  ModelConfig e;
  e.name = "demo_ensemble";
  e.platform = "ensemble";
  e.max_batch_size = 64;
  e.inputs = {TensorSpec{"input", DataType::kFp32, {1, 28, 28}}};
  e.outputs = {TensorSpec{"probabilities", DataType::kFp32, {10}}};
  e.ensemble.members.resize(2);
  e.ensemble.members[0].model = "mlp";
  e.ensemble.members[1].model = "cnn";
  e.ensemble.members[1].weight = 2.0;
  e.ensemble.combine = CombineRule::kWeightedMean;
  return e;
}

TEST(ModelConfigReplyTest, DataTypesHaveTritonsNumbers) {
  EXPECT_EQ(ToTritonDataType(DataType::kInvalid), 0);
  EXPECT_EQ(ToTritonDataType(DataType::kBool), 1);
  EXPECT_EQ(ToTritonDataType(DataType::kUint8), 2);
  EXPECT_EQ(ToTritonDataType(DataType::kInt8), 6);
  EXPECT_EQ(ToTritonDataType(DataType::kInt16), 7);
  EXPECT_EQ(ToTritonDataType(DataType::kInt32), 8);
  EXPECT_EQ(ToTritonDataType(DataType::kInt64), 9);
  EXPECT_EQ(ToTritonDataType(DataType::kFp16), 10);
  EXPECT_EQ(ToTritonDataType(DataType::kFp32), 11);
  EXPECT_EQ(ToTritonDataType(DataType::kFp64), 12);
  EXPECT_EQ(inference::DataType_Name(ToTritonDataType(DataType::kFp32)), "TYPE_FP32");
}

TEST(ModelConfigReplyTest, FieldNumbersAreTritons) {
  using inference::ModelConfig;
  EXPECT_EQ(ModelConfig::kNameFieldNumber, 1);
  EXPECT_EQ(ModelConfig::kPlatformFieldNumber, 2);
  EXPECT_EQ(ModelConfig::kVersionPolicyFieldNumber, 3);
  EXPECT_EQ(ModelConfig::kMaxBatchSizeFieldNumber, 4);
  EXPECT_EQ(ModelConfig::kInputFieldNumber, 5);
  EXPECT_EQ(ModelConfig::kOutputFieldNumber, 6);
  EXPECT_EQ(ModelConfig::kInstanceGroupFieldNumber, 7);
  EXPECT_EQ(ModelConfig::kDynamicBatchingFieldNumber, 11);
  EXPECT_EQ(ModelConfig::kEnsembleSchedulingFieldNumber, 15);
  EXPECT_EQ(ModelConfig::kBackendFieldNumber, 17);
  EXPECT_EQ(ModelConfig::kResponseCacheFieldNumber, 24);
  EXPECT_EQ(inference::ModelResponseCache::kEnableFieldNumber, 1);
  EXPECT_EQ(inference::ModelInput::kDimsFieldNumber, 4);  // 3 is Triton's `format`
  EXPECT_EQ(inference::ModelOutput::kDimsFieldNumber, 3);
  EXPECT_EQ(inference::ModelInstanceGroup::kCountFieldNumber, 2);
  EXPECT_EQ(inference::ModelInstanceGroup::kKindFieldNumber, 4);
  EXPECT_EQ(inference::ModelInstanceGroup::KIND_GPU, 1);
  EXPECT_EQ(inference::ModelInstanceGroup::KIND_CPU, 2);
  EXPECT_EQ(inference::ModelDynamicBatching::kPriorityLevelsFieldNumber, 4);
  EXPECT_EQ(inference::ModelDynamicBatching::kDefaultQueuePolicyFieldNumber, 6);
  EXPECT_EQ(inference::ModelQueuePolicy::kMaxQueueSizeFieldNumber, 4);
  EXPECT_EQ(inference::ModelConfigResponse::kConfigFieldNumber, 1);
}

TEST(ModelConfigReplyTest, TorchScriptModelWithBatchingAndPolicy) {
  const ServerConfig server = TwoCpuHosts();
  inference::ModelConfig c;
  FillModelConfig(Mlp(), server, &c);

  EXPECT_EQ(c.name(), "mlp");
  EXPECT_EQ(c.platform(), "pytorch_libtorch");
  EXPECT_EQ(c.backend(), "pytorch");
  EXPECT_EQ(c.max_batch_size(), 64);

  ASSERT_EQ(c.input_size(), 1);
  EXPECT_EQ(c.input(0).name(), "input");
  EXPECT_EQ(c.input(0).data_type(), inference::TYPE_FP32);
  EXPECT_EQ(std::vector<int64_t>(c.input(0).dims().begin(), c.input(0).dims().end()),
            (std::vector<int64_t>{1, 28, 28}));  // as declared: no batch dim
  ASSERT_EQ(c.output_size(), 2);
  EXPECT_EQ(c.output(0).name(), "probabilities");
  EXPECT_EQ(std::vector<int64_t>(c.output(0).dims().begin(), c.output(0).dims().end()), (std::vector<int64_t>{10}));
  EXPECT_EQ(c.output(1).name(), "ids");
  EXPECT_EQ(c.output(1).data_type(), inference::TYPE_INT64);
  EXPECT_EQ(std::vector<int64_t>(c.output(1).dims().begin(), c.output(1).dims().end()), (std::vector<int64_t>{-1}));

  ASSERT_TRUE(c.version_policy().has_specific());
  EXPECT_EQ(std::vector<int64_t>(c.version_policy().specific().versions().begin(),
                                 c.version_policy().specific().versions().end()),
            (std::vector<int64_t>{1, 3}));

  ASSERT_EQ(c.scheduling_choice_case(), inference::ModelConfig::kDynamicBatching);
  const auto& b = c.dynamic_batching();
  EXPECT_EQ(std::vector<int32_t>(b.preferred_batch_size().begin(), b.preferred_batch_size().end()),
            (std::vector<int32_t>{8, 32}));
  EXPECT_EQ(b.max_queue_delay_microseconds(), 1500u);
  EXPECT_EQ(b.priority_levels(), 3u);
  EXPECT_EQ(b.default_priority_level(), 2u);
  EXPECT_EQ(b.default_queue_policy().max_queue_size(), 77u);

  ASSERT_EQ(c.instance_group_size(), 1);
  EXPECT_EQ(c.instance_group(0).name(), "mlp_0");
  EXPECT_EQ(c.instance_group(0).kind(), inference::ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(c.instance_group(0).count(), 6);  // 3 per host, 2 hosts
}

TEST(ModelConfigReplyTest, LatestAndAllPolicies) {
  const ServerConfig server = TwoCpuHosts();
  ModelConfig m = Mlp();
  m.version_policy = VersionPolicy{};
  m.version_policy.num_versions = 2;
  inference::ModelConfig c;
  FillModelConfig(m, server, &c);
  ASSERT_TRUE(c.version_policy().has_latest());
  EXPECT_EQ(c.version_policy().latest().num_versions(), 2u);

  m.version_policy.kind = VersionPolicy::Kind::kAll;
  FillModelConfig(m, server, &c);  // also checks that `c` is cleared first
  EXPECT_TRUE(c.version_policy().has_all());
  EXPECT_EQ(c.input_size(), 1);
}

TEST(ModelConfigReplyTest, ResponseCacheIsSaidAsTritonSaysIt) {
  ModelConfig m = Mlp();
  inference::ModelConfig c;
  FillModelConfig(m, TwoCpuHosts(), &c);
  EXPECT_FALSE(c.has_response_cache()) << "off: no section, as Triton's";
  m.response_cache = true;
  FillModelConfig(m, TwoCpuHosts(), &c);
  ASSERT_TRUE(c.has_response_cache());
  EXPECT_TRUE(c.response_cache().enable());
}

TEST(ModelConfigReplyTest, NoDynamicBatchingSectionMeansNoDynamicBatching) {
  ModelConfig m = Mlp();
  m.dynamic_batching.enabled = false;
  inference::ModelConfig c;
  FillModelConfig(m, TwoCpuHosts(), &c);
  EXPECT_EQ(c.scheduling_choice_case(), inference::ModelConfig::SCHEDULING_CHOICE_NOT_SET);
}

TEST(ModelConfigReplyTest, CudaHostsMakeAGpuGroup) {
  ServerConfig server = TwoCpuHosts();
  server.hosts.push_back(Host("gpu0", "cuda:0"));
  server.hosts.push_back(Host("gpu1", "cuda:1"));
  ModelConfig m = Mlp();
  m.instances_per_host = 2;

  m.hosts = {"gpu0", "gpu1"};
  inference::ModelConfig c;
  FillModelConfig(m, server, &c);
  ASSERT_EQ(c.instance_group_size(), 1);
  EXPECT_EQ(c.instance_group(0).kind(), inference::ModelInstanceGroup::KIND_GPU);
  EXPECT_EQ(c.instance_group(0).count(), 4);

  // Mixed placement: one group per kind, in the order the hosts are listed.
  m.hosts = {"gpu1", "cpu0", "gpu0"};
  FillModelConfig(m, server, &c);
  ASSERT_EQ(c.instance_group_size(), 2);
  EXPECT_EQ(c.instance_group(0).name(), "mlp_0");
  EXPECT_EQ(c.instance_group(0).kind(), inference::ModelInstanceGroup::KIND_GPU);
  EXPECT_EQ(c.instance_group(0).count(), 4);
  EXPECT_EQ(c.instance_group(1).name(), "mlp_1");
  EXPECT_EQ(c.instance_group(1).kind(), inference::ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(c.instance_group(1).count(), 2);
}

TEST(ModelConfigReplyTest, EnsembleHasOneStepPerMember) {
  inference::ModelConfig c;
  FillModelConfig(Ensemble(), TwoCpuHosts(), &c);
  EXPECT_EQ(c.name(), "demo_ensemble");
  EXPECT_EQ(c.platform(), "ensemble");
  EXPECT_EQ(c.backend(), "");
  EXPECT_EQ(c.max_batch_size(), 64);
  EXPECT_EQ(c.instance_group_size(), 0);
  ASSERT_EQ(c.input_size(), 1);
  EXPECT_EQ(c.input(0).data_type(), inference::TYPE_FP32);
  ASSERT_TRUE(c.version_policy().has_latest());
  EXPECT_EQ(c.version_policy().latest().num_versions(), 1u);

  ASSERT_EQ(c.scheduling_choice_case(), inference::ModelConfig::kEnsembleScheduling);
  const auto& steps = c.ensemble_scheduling().step();
  ASSERT_EQ(steps.size(), 2);
  const char* members[] = {"mlp", "cnn"};
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(members[i]);
    EXPECT_EQ(steps[i].model_name(), members[i]);
    EXPECT_EQ(steps[i].model_version(), -1);
    ASSERT_EQ(steps[i].input_map_size(), 1);
    EXPECT_EQ(steps[i].input_map().at("input"), "input");
    ASSERT_EQ(steps[i].output_map_size(), 1);
    EXPECT_EQ(steps[i].output_map().at("probabilities"), "probabilities");
  }
}

}  // namespace
}  // namespace es
