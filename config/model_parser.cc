// Parsing of `<repo>/<model>/config.yaml` into a ModelConfig (one model,
// nothing about other models: those checks are in ensemble_check.cc).
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "common/checked_math.h"
#include "config/model_source.h"

namespace es {
namespace {

constexpr int64_t kMaxBatchSize = int64_t{1} << 20;
// The largest tensor a config may declare: the limits' byte sizes (arena,
// request) stop at the same 1 TiB, and every size the router derives from
// dims (output reservations, batch sizes) then stays far from 2^64.
constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 40;
constexpr int64_t kMaxComputeMs = int64_t{7} * 24 * 3600 * 1000;  // a week, as limits.max_compute_ms

std::string SupportedDataTypes() {
  std::string names;
  for (uint32_t t = 1; t <= static_cast<uint32_t>(DataType::kFp64); ++t) {
    names += (names.empty() ? "" : ", ") + std::string(DataTypeName(static_cast<DataType>(t)));
  }
  return names;
}

Status ParseDims(const yaml::Field& field, std::vector<int64_t>* dims) {
  if (!field.present()) return yaml::Error(field, "missing required field");
  if (!field.node.IsSequence()) return yaml::CheckSequence(field);
  for (const yaml::Field& item : yaml::Items(field)) {
    ES_ASSIGN_OR_RETURN(int64_t dim, yaml::ReadInt(item));
    if (dim != -1 && dim <= 0) {
      return yaml::Error(item, "dimension " + std::to_string(dim) +
                                   " is invalid (expected -1 for variable, or > 0)");
    }
    dims->push_back(dim);
  }
  return Status::Ok();
}

Status ParseTensor(const yaml::Field& field, TensorSpec* tensor) {
  ES_RETURN_IF_ERROR(yaml::CheckMap(field, {"name", "datatype", "dims"}));
  ES_RETURN_IF_ERROR(yaml::ReadRequiredString(field, "name", &tensor->name));
  std::string datatype;
  ES_RETURN_IF_ERROR(yaml::ReadRequiredString(field, "datatype", &datatype));
  std::optional<DataType> parsed = ParseDataType(datatype);
  if (!parsed) {
    return yaml::Error(yaml::Child(field, "datatype"), "unknown datatype '" + datatype +
                                                           "' (expected one of " +
                                                           SupportedDataTypes() + ")");
  }
  tensor->datatype = *parsed;
  return ParseDims(yaml::Child(field, "dims"), &tensor->dims);
}

// The tensor's bytes at the largest batch, variable dims counted as 1 (the
// least they can be), computed with checked arithmetic: a product that
// overflows or passes kMaxTensorBytes is an error at the tensor's dims.
Status CheckTensorSize(const yaml::Field& item, const TensorSpec& tensor, int64_t max_batch_size) {
  std::vector<int64_t> fixed{std::max<int64_t>(1, max_batch_size)};
  for (int64_t d : tensor.dims) fixed.push_back(d < 0 ? 1 : d);
  const std::optional<uint64_t> bytes = TensorBytes(fixed, DataTypeSize(tensor.datatype));
  if (!bytes || *bytes > kMaxTensorBytes) {
    return yaml::Error(yaml::Child(item, "dims"),
                       "tensor '" + tensor.name + "' would be " +
                           (bytes ? std::to_string(*bytes) + " bytes" : std::string("more than 2^64 bytes")) +
                           " at max_batch_size " + std::to_string(max_batch_size) + " (at most 2^40 = " +
                           std::to_string(kMaxTensorBytes) + ")");
  }
  return Status::Ok();
}

Status ParseTensors(const yaml::Field& field, int64_t max_batch_size, std::vector<TensorSpec>* tensors) {
  ES_RETURN_IF_ERROR(yaml::CheckSequence(field));
  std::set<std::string> names;
  for (const yaml::Field& item : yaml::Items(field)) {
    TensorSpec tensor;
    ES_RETURN_IF_ERROR(ParseTensor(item, &tensor));
    ES_RETURN_IF_ERROR(CheckTensorSize(item, tensor, max_batch_size));
    if (!names.insert(tensor.name).second) {
      return yaml::Error(yaml::Child(item, "name"), "duplicate tensor name '" + tensor.name + "'");
    }
    tensors->push_back(std::move(tensor));
  }
  return Status::Ok();
}

Status ParseHosts(const yaml::Field& field, LoadedModel* model) {
  ES_RETURN_IF_ERROR(yaml::CheckSequence(field));
  std::set<std::string> names;
  for (const yaml::Field& item : yaml::Items(field)) {
    ES_ASSIGN_OR_RETURN(std::string host, yaml::ReadString(item));
    if (host.empty()) return yaml::Error(item, "must not be empty");
    if (!names.insert(host).second) return yaml::Error(item, "duplicate host '" + host + "'");
    model->config.hosts.push_back(host);
    model->source.host_lines.push_back(item.line);
  }
  return Status::Ok();
}

StatusOr<CombineRule> ParseCombineRule(const yaml::Field& field) {
  ES_ASSIGN_OR_RETURN(std::string name, yaml::ReadString(field));
  for (CombineRule rule :
       {CombineRule::kMean, CombineRule::kWeightedMean, CombineRule::kMajorityVote, CombineRule::kCascade}) {
    if (name == CombineRuleName(rule)) return rule;
  }
  return yaml::Error(field, "unknown combine rule '" + name +
                                "' (expected mean, weighted_mean, majority_vote or cascade)");
}

StatusOr<double> ReadWeight(const yaml::Field& field) {
  ES_ASSIGN_OR_RETURN(double value, yaml::ReadDouble(field));
  if (!std::isfinite(value) || value <= 0) return yaml::Error(field, "weight must be a finite number > 0");
  return value;
}

// `packed: [names]` (at least two) and their optional `weights: [...]`.
Status ParsePacked(const yaml::Field& field, EnsembleMember* member) {
  const yaml::Field packed = yaml::Child(field, "packed");
  const yaml::Field weights = yaml::Child(field, "weights");
  if (!packed.present()) {
    if (weights.present()) return yaml::Error(weights, "weights are for a packed member's members (packed: [...])");
    return Status::Ok();
  }
  ES_RETURN_IF_ERROR(yaml::CheckSequence(packed));
  for (const yaml::Field& item : yaml::Items(packed)) {
    ES_ASSIGN_OR_RETURN(std::string name, yaml::ReadString(item));
    if (name.empty()) return yaml::Error(item, "a packed member needs a name");
    member->packed.push_back(std::move(name));
  }
  if (member->packed.size() < 2) {
    return yaml::Error(packed, "a packed member names at least two members (one is a plain member)");
  }
  if (!weights.present()) return Status::Ok();
  if (yaml::Child(field, "weight").present()) {
    return yaml::Error(weights, "give either weight (the same for every packed member) or weights, not both");
  }
  ES_RETURN_IF_ERROR(yaml::CheckSequence(weights));
  for (const yaml::Field& item : yaml::Items(weights)) {
    ES_ASSIGN_OR_RETURN(double value, ReadWeight(item));
    member->packed_weights.push_back(value);
  }
  if (member->packed_weights.size() != member->packed.size()) {
    return yaml::Error(weights, std::to_string(member->packed_weights.size()) + " weights for " +
                                    std::to_string(member->packed.size()) + " packed members");
  }
  return Status::Ok();
}

Status ParseMember(const yaml::Field& field, EnsembleMember* member) {
  ES_RETURN_IF_ERROR(yaml::CheckMap(field, {"model", "weight", "version", "packed", "weights"}));
  ES_RETURN_IF_ERROR(yaml::ReadRequiredString(field, "model", &member->model));
  // Optional: pins the member's version (default: its highest ready one).
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "version", int64_t{1}, int64_t{1} << 40, &member->version));
  const yaml::Field weight = yaml::Child(field, "weight");
  if (weight.present()) {
    ES_ASSIGN_OR_RETURN(member->weight, ReadWeight(weight));
  }
  return ParsePacked(field, member);
}

Status ParseDynamicBatching(const yaml::Field& field, ModelConfig* config) {
  if (!field.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(field, {"max_queue_delay_us", "preferred_batch_sizes", "max_queue_size",
                                            "priority_levels", "default_priority", "max_queue_bytes"}));
  if (config->max_batch_size <= 0) {
    return yaml::Error(field, "dynamic batching needs max_batch_size > 0");
  }
  DynamicBatching& b = config->dynamic_batching;
  b.enabled = true;
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "max_queue_delay_us", int64_t{0}, int64_t{60000000},
                                           &b.max_queue_delay_us));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "max_queue_size", int64_t{1}, int64_t{1} << 24,
                                           &b.max_queue_size));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "max_queue_bytes", int64_t{1}, int64_t{1} << 40,
                                           &b.max_queue_bytes));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "priority_levels", 1, 16, &b.priority_levels));
  b.default_priority = b.priority_levels;
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "default_priority", 1, b.priority_levels, &b.default_priority));
  const yaml::Field preferred = yaml::Child(field, "preferred_batch_sizes");
  ES_RETURN_IF_ERROR(yaml::CheckSequence(preferred));
  for (const yaml::Field& item : yaml::Items(preferred)) {
    ES_ASSIGN_OR_RETURN(int64_t size, yaml::ReadInt(item));
    if (size < 1 || size > config->max_batch_size) {
      return yaml::Error(item, "preferred batch size must be in [1, max_batch_size " +
                                   std::to_string(config->max_batch_size) + "]");
    }
    if (!b.preferred_batch_sizes.empty() && size <= b.preferred_batch_sizes.back()) {
      return yaml::Error(item, "preferred batch sizes must be ascending");
    }
    b.preferred_batch_sizes.push_back(size);
  }
  return Status::Ok();
}

// `stages` and `exit_threshold`: only with combine: cascade, which needs the
// threshold; stages name members, each exactly once.
Status ParseCascade(const yaml::Field& field, EnsembleSpec* spec) {
  const yaml::Field stages = yaml::Child(field, "stages");
  const yaml::Field threshold = yaml::Child(field, "exit_threshold");
  if (!spec->cascade()) {
    for (const yaml::Field& f : {stages, threshold}) {
      if (f.present()) return yaml::Error(f, "only for combine: cascade");
    }
    return Status::Ok();
  }
  if (!threshold.present()) {
    return yaml::Error(yaml::Child(field, "combine"), "combine: cascade needs exit_threshold (the top-class probability at which a row "
                              "leaves, in (0, 1])");
  }
  ES_ASSIGN_OR_RETURN(double t, yaml::ReadDouble(threshold));
  if (!(t > 0 && t <= 1)) return yaml::Error(threshold, "exit_threshold must be in (0, 1]");
  spec->exit_threshold = t;
  for (const char* key : {"min_members", "member_timeout_ms"}) {
    const yaml::Field f = yaml::Child(field, key);
    if (f.present()) return yaml::Error(f, "not with combine: cascade (a cascade needs every stage it runs)");
  }
  const size_t n = spec->members.size();
  if (!stages.present()) {
    for (size_t m = 0; m < n; ++m) spec->stages.push_back({m});
    return Status::Ok();
  }
  ES_RETURN_IF_ERROR(yaml::CheckSequence(stages));
  std::vector<bool> placed(n, false);
  for (const yaml::Field& stage : yaml::Items(stages)) {
    ES_RETURN_IF_ERROR(yaml::CheckSequence(stage));
    std::vector<size_t> members;
    for (const yaml::Field& item : yaml::Items(stage)) {
      ES_ASSIGN_OR_RETURN(std::string name, yaml::ReadString(item));
      size_t m = 0;
      while (m < n && spec->members[m].model != name) ++m;
      if (m == n) return yaml::Error(item, "'" + name + "' is not one of the ensemble's members");
      if (placed[m]) return yaml::Error(item, "member '" + name + "' is in more than one stage");
      placed[m] = true;
      members.push_back(m);
    }
    if (members.empty()) return yaml::Error(stage, "a stage needs at least one member");
    spec->stages.push_back(std::move(members));
  }
  for (size_t m = 0; m < n; ++m) {
    if (!placed[m]) return yaml::Error(stages, "member '" + spec->members[m].model + "' is in no stage");
  }
  return Status::Ok();
}

Status ParseEnsemble(const yaml::Field& field, LoadedModel* model) {
  ES_RETURN_IF_ERROR(
      yaml::CheckMap(field, {"combine", "members", "max_in_flight", "min_members", "member_timeout_ms", "stages",
                             "exit_threshold"}));
  EnsembleSpec& spec = model->config.ensemble;
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "max_in_flight", int64_t{1}, int64_t{1} << 24,
                                           &spec.max_in_flight));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "min_members", int64_t{1}, int64_t{1} << 16, &spec.min_members));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "member_timeout_ms", int64_t{1}, int64_t{3600} * 1000,
                                           &spec.member_timeout_ms));
  const yaml::Field combine = yaml::Child(field, "combine");
  model->source.combine_line = combine.line;
  if (combine.present()) {
    ES_ASSIGN_OR_RETURN(CombineRule rule, ParseCombineRule(combine));
    spec.combine = rule;
  }
  const yaml::Field members = yaml::Child(field, "members");
  ES_RETURN_IF_ERROR(yaml::CheckSequence(members));
  std::set<std::string> names, member_names;
  for (const yaml::Field& item : yaml::Items(members)) {
    EnsembleMember member;
    ES_RETURN_IF_ERROR(ParseMember(item, &member));
    if (!names.insert(member.model).second) {
      return yaml::Error(yaml::Child(item, "model"), "duplicate member '" + member.model + "'");
    }
    // Member outputs are named after the members: a name may not repeat.
    for (size_t k = 0; k < member.Count(); ++k) {
      if (!member_names.insert(member.NameOf(k)).second) {
        return yaml::Error(yaml::Child(item, member.packed.empty() ? "model" : "packed"),
                           "duplicate member name '" + member.NameOf(k) + "'");
      }
    }
    spec.members.push_back(std::move(member));
    model->source.member_lines.push_back(yaml::Child(item, "model").line);
  }
  if (spec.members.empty()) return yaml::Error(members, "an ensemble needs at least one member");
  ES_RETURN_IF_ERROR(ParseCascade(field, &spec));
  if (spec.min_members > static_cast<int64_t>(spec.MemberCount())) {
    return yaml::Error(yaml::Child(field, "min_members"),
                       "min_members " + std::to_string(spec.min_members) + " is more than the ensemble's " +
                           std::to_string(spec.MemberCount()) + " members");
  }
  if (spec.member_timeout_ms > 0 && spec.Quorum() == spec.MemberCount()) {
    return yaml::Error(yaml::Child(field, "member_timeout_ms"),
                       "member_timeout_ms needs min_members below the member count (" +
                           std::to_string(spec.MemberCount()) +
                           "): with every member required there is no quorum to answer without a slow one");
  }
  return Status::Ok();
}

Status ParsePlatform(const yaml::Field& root, LoadedModel* model) {
  ES_RETURN_IF_ERROR(yaml::ReadRequiredString(root, "platform", &model->config.platform));
  const yaml::Field platform = yaml::Child(root, "platform");
  model->source.platform_line = platform.line;
  if (model->config.platform != "torchscript" && model->config.platform != "ensemble") {
    return yaml::Error(platform, "unknown platform '" + model->config.platform +
                                     "' (expected torchscript or ensemble)");
  }
  return Status::Ok();
}

// version_policy: {latest: {num_versions: N}} | {all: {}} | {specific: {versions: [..]}}
Status ParseVersionPolicy(const yaml::Field& field, VersionPolicy* policy) {
  if (!field.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(field, {"latest", "all", "specific"}));
  if (field.node.size() != 1) return yaml::Error(field, "give exactly one of latest, all, specific");
  const yaml::Field latest = yaml::Child(field, "latest");
  const yaml::Field specific = yaml::Child(field, "specific");
  if (yaml::Child(field, "all").node.IsDefined()) {
    policy->kind = VersionPolicy::Kind::kAll;
    return Status::Ok();
  }
  if (latest.node.IsDefined()) {
    policy->kind = VersionPolicy::Kind::kLatest;
    if (!latest.present()) return Status::Ok();
    ES_RETURN_IF_ERROR(yaml::CheckMap(latest, {"num_versions"}));
    return yaml::ReadOptionalInt(latest, "num_versions", int64_t{1}, int64_t{1} << 20, &policy->num_versions);
  }
  policy->kind = VersionPolicy::Kind::kSpecific;
  ES_RETURN_IF_ERROR(yaml::CheckMap(specific, {"versions"}));
  const yaml::Field versions = yaml::Child(specific, "versions");
  ES_RETURN_IF_ERROR(yaml::CheckSequence(versions));
  for (const yaml::Field& item : yaml::Items(versions)) {
    ES_ASSIGN_OR_RETURN(int64_t v, yaml::ReadInt(item));
    if (v < 1) return yaml::Error(item, "versions are numbered from 1");
    policy->versions.push_back(v);
  }
  if (policy->versions.empty()) return yaml::Error(versions, "list at least one version");
  std::sort(policy->versions.begin(), policy->versions.end());
  if (std::adjacent_find(policy->versions.begin(), policy->versions.end()) != policy->versions.end()) {
    return yaml::Error(versions, "a version is listed twice");
  }
  return Status::Ok();
}

// `response_cache: {enable: BOOL}` (Triton's spelling).
Status ParseResponseCache(const yaml::Field& field, LoadedModel* model) {
  if (!field.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(field, {"enable"}));
  model->source.response_cache_line = field.line;
  return yaml::ReadOptionalBool(field, "enable", &model->config.response_cache);
}

// The fields that only one of the two platforms may have.
Status ParsePlatformSections(const yaml::Field& root, LoadedModel* model) {
  const yaml::Field ensemble = yaml::Child(root, "ensemble");
  if (!model->config.is_ensemble()) {
    if (ensemble.present()) {
      return yaml::Error(ensemble, "only a model with platform 'ensemble' has this section");
    }
    ES_RETURN_IF_ERROR(ParseHosts(yaml::Child(root, "hosts"), model));
    ES_RETURN_IF_ERROR(ParseDynamicBatching(yaml::Child(root, "dynamic_batching"), &model->config));
    ES_RETURN_IF_ERROR(ParseVersionPolicy(yaml::Child(root, "version_policy"), &model->config.version_policy));
    ES_RETURN_IF_ERROR(ParseResponseCache(yaml::Child(root, "response_cache"), model));
    // 0 (the default) takes the server's limits.max_compute_ms.
    ES_RETURN_IF_ERROR(
        yaml::ReadOptionalInt(root, "max_compute_ms", int64_t{0}, kMaxComputeMs, &model->config.max_compute_ms));
    return yaml::ReadOptionalInt(root, "instances_per_host", 1, 1 << 16,
                                 &model->config.instances_per_host);
  }
  // An ensemble runs where its members run; placement and batching fields
  // would be ignored (its members batch their own requests).
  for (const char* key : {"hosts", "instances_per_host", "dynamic_batching", "max_compute_ms", "version_policy"}) {
    const yaml::Field field = yaml::Child(root, key);
    if (field.present()) {
      return yaml::Error(field, "an ensemble runs on its members' hosts; set this on the members");
    }
  }
  if (const yaml::Field cache = yaml::Child(root, "response_cache"); cache.present()) {
    return yaml::Error(cache, "an ensemble's answers are cached through its members' caches; set this on the members");
  }
  if (!ensemble.present()) {
    return yaml::Error(ensemble, "missing required field (platform 'ensemble' needs members)");
  }
  return ParseEnsemble(ensemble, model);
}

Status ParseTensorLists(const yaml::Field& root, LoadedModel* model) {
  const yaml::Field inputs = yaml::Child(root, "inputs");
  const yaml::Field outputs = yaml::Child(root, "outputs");
  ES_RETURN_IF_ERROR(ParseTensors(inputs, model->config.max_batch_size, &model->config.inputs));
  ES_RETURN_IF_ERROR(ParseTensors(outputs, model->config.max_batch_size, &model->config.outputs));
  model->source.inputs_declared = inputs.present();
  model->source.outputs_declared = outputs.present();
  // Ensembles may leave them out (copied from the first member later).
  if (model->config.is_ensemble()) return Status::Ok();
  if (model->config.inputs.empty()) return yaml::Error(inputs, "a model needs at least one input");
  if (model->config.outputs.empty()) {
    return yaml::Error(outputs, "a model needs at least one output");
  }
  return Status::Ok();
}

}  // namespace

Status ParseModelConfig(const yaml::Field& root, const std::string& folder_name,
                        LoadedModel* model) {
  ES_RETURN_IF_ERROR(yaml::CheckMap(root, {"name", "platform", "max_batch_size", "inputs",
                                           "outputs", "hosts", "instances_per_host", "dynamic_batching",
                                           "max_compute_ms", "version_policy", "ensemble", "overload",
                                           "response_cache", "experiment"}));
  model->source.file = root.file;
  model->config.name = folder_name;
  std::string name = folder_name;
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(root, "name", &name));
  if (name != folder_name) {
    return yaml::Error(yaml::Child(root, "name"), "name '" + name +
                                                      "' differs from the model's folder name '" +
                                                      folder_name + "'");
  }
  ES_RETURN_IF_ERROR(ParsePlatform(root, model));
  // 2^20 rows: far above any batch a model host computes at once, and small
  // enough that what is sized by it stays bounded: ModelStatistics keeps one
  // counter pair per batch size (16 MiB at this bound), and a fixed-size
  // tensor's bytes at the largest batch are checked below to fit kMaxTensorBytes.
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(root, "max_batch_size", int64_t{0}, kMaxBatchSize,
                                           &model->config.max_batch_size));
  model->source.max_batch_size_line = yaml::Child(root, "max_batch_size").line;
  ES_RETURN_IF_ERROR(ParseTensorLists(root, model));
  ES_RETURN_IF_ERROR(ParsePlatformSections(root, model));
  ES_RETURN_IF_ERROR(ParseExperiment(yaml::Child(root, "experiment"), model));
  return ParseOverload(yaml::Child(root, "overload"), model);
}

}  // namespace es
