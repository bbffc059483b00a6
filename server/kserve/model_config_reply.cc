#include "server/kserve/model_config_reply.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace es {
namespace {

template <typename Message>
void FillTensor(const TensorSpec& spec, Message* out) {
  out->set_name(spec.name);
  out->set_data_type(ToTritonDataType(spec.datatype));
  for (int64_t dim : spec.dims) out->add_dims(dim);
}

void FillVersionPolicy(const VersionPolicy& policy, inference::ModelVersionPolicy* out) {
  switch (policy.kind) {
    case VersionPolicy::Kind::kLatest:
      // The parser bounds num_versions far below 2^32; clamp anyway rather
      // than wrap if that bound ever grows.
      out->mutable_latest()->set_num_versions(
          static_cast<uint32_t>(std::min<int64_t>(policy.num_versions, std::numeric_limits<uint32_t>::max())));
      return;
    case VersionPolicy::Kind::kAll:
      out->mutable_all();
      return;
    case VersionPolicy::Kind::kSpecific:
      for (int64_t version : policy.versions) out->mutable_specific()->add_versions(version);
      return;
  }
}

void FillDynamicBatching(const DynamicBatching& batching, inference::ModelDynamicBatching* out) {
  for (int64_t size : batching.preferred_batch_sizes) out->add_preferred_batch_size(static_cast<int32_t>(size));
  out->set_max_queue_delay_microseconds(static_cast<uint64_t>(batching.max_queue_delay_us));
  out->set_priority_levels(static_cast<uint64_t>(batching.priority_levels));
  out->set_default_priority_level(static_cast<uint64_t>(batching.default_priority));
  out->mutable_default_queue_policy()->set_max_queue_size(
      static_cast<uint32_t>(std::min<int64_t>(batching.max_queue_size, std::numeric_limits<uint32_t>::max())));
}

// One group per device kind, in the order the kinds first appear among the
// model's hosts, so the answer is stable across calls.
void FillInstanceGroups(const ModelConfig& model, const ServerConfig& server, inference::ModelConfig* out) {
  std::vector<std::pair<inference::ModelInstanceGroup::Kind, int>> hosts_per_kind;
  for (const std::string& host_name : model.hosts) {
    const HostConfig* host = server.FindHost(host_name);
    if (host == nullptr) continue;  // LoadServerConfig rejects unknown hosts
    const auto kind = host->device.rfind("cuda", 0) == 0 ? inference::ModelInstanceGroup::KIND_GPU
                                                         : inference::ModelInstanceGroup::KIND_CPU;
    auto it = std::find_if(hosts_per_kind.begin(), hosts_per_kind.end(),
                           [kind](const auto& entry) { return entry.first == kind; });
    if (it == hosts_per_kind.end()) {
      hosts_per_kind.emplace_back(kind, 1);
    } else {
      ++it->second;
    }
  }
  for (size_t i = 0; i < hosts_per_kind.size(); ++i) {
    auto* group = out->add_instance_group();
    group->set_name(model.name + "_" + std::to_string(i));
    group->set_kind(hosts_per_kind[i].first);
    group->set_count(model.instances_per_host * hosts_per_kind[i].second);
  }
}

void FillEnsembleScheduling(const ModelConfig& model, inference::ModelEnsembling* out) {
  for (const EnsembleMember& member : model.ensemble.members) {
    auto* step = out->add_step();
    step->set_model_name(member.model);
    step->set_model_version(member.version > 0 ? member.version : -1);  // -1: the highest ready version
    for (const TensorSpec& in : model.inputs) (*step->mutable_input_map())[in.name] = in.name;
    for (const TensorSpec& output : model.outputs) (*step->mutable_output_map())[output.name] = output.name;
  }
}

}  // namespace

inference::DataType ToTritonDataType(DataType type) {
  switch (type) {
    case DataType::kInvalid:
      return inference::TYPE_INVALID;
    case DataType::kBool:
      return inference::TYPE_BOOL;
    case DataType::kUint8:
      return inference::TYPE_UINT8;
    case DataType::kInt8:
      return inference::TYPE_INT8;
    case DataType::kInt16:
      return inference::TYPE_INT16;
    case DataType::kInt32:
      return inference::TYPE_INT32;
    case DataType::kInt64:
      return inference::TYPE_INT64;
    case DataType::kFp16:
      return inference::TYPE_FP16;
    case DataType::kFp32:
      return inference::TYPE_FP32;
    case DataType::kFp64:
      return inference::TYPE_FP64;
  }
  return inference::TYPE_INVALID;
}

void FillModelConfig(const ModelConfig& model, const ServerConfig& server, inference::ModelConfig* out) {
  out->Clear();
  out->set_name(model.name);
  out->set_max_batch_size(static_cast<int32_t>(model.max_batch_size));
  for (const TensorSpec& in : model.inputs) FillTensor(in, out->add_input());
  for (const TensorSpec& output : model.outputs) FillTensor(output, out->add_output());
  FillVersionPolicy(model.version_policy, out->mutable_version_policy());
  if (model.response_cache) out->mutable_response_cache()->set_enable(true);
  if (model.is_ensemble()) {
    out->set_platform("ensemble");
    FillEnsembleScheduling(model, out->mutable_ensemble_scheduling());
    return;
  }
  out->set_platform("pytorch_libtorch");
  out->set_backend("pytorch");
  if (model.dynamic_batching.enabled) FillDynamicBatching(model.dynamic_batching, out->mutable_dynamic_batching());
  FillInstanceGroups(model, server, out);
}

}  // namespace es
