// Cross checks between an ensemble and its members. The router combines the
// members' outputs element by element and feeds each member the ensemble's
// inputs unchanged, so their tensors must match exactly, and a batch the
// ensemble accepts must fit every member.
#include "config/model_source.h"

namespace es {
namespace {

std::string DimsString(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(dims[i]);
  }
  return text + "]";
}

const TensorSpec* FindTensor(const std::vector<TensorSpec>& tensors, const std::string& name) {
  for (const TensorSpec& tensor : tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

}  // namespace

std::string CompareTensors(const char* kind, const std::vector<TensorSpec>& wanted,
                           const std::vector<TensorSpec>& member, const std::string& theirs) {
  for (const TensorSpec& want : wanted) {
    const TensorSpec* have = FindTensor(member, want.name);
    if (have == nullptr) return std::string("has no ") + kind + " '" + want.name + "'";
    if (have->datatype != want.datatype) {
      return std::string(kind) + " '" + want.name + "' has datatype " +
             DataTypeName(have->datatype) + ", " + theirs + " is " + DataTypeName(want.datatype);
    }
    if (have->dims != want.dims) {
      return std::string(kind) + " '" + want.name + "' has dims " + DimsString(have->dims) +
             ", " + theirs + " are " + DimsString(want.dims);
    }
  }
  for (const TensorSpec& have : member) {
    if (FindTensor(wanted, have.name) == nullptr) {
      return std::string("has ") + kind + " '" + have.name + "' that the ensemble lacks";
    }
  }
  return "";
}

namespace {

// A packed member's outputs as it declares them: the ensemble's with the
// packed axis (`count` members) after the batch.
std::vector<TensorSpec> PackedOutputs(std::vector<TensorSpec> outputs, size_t count) {
  for (TensorSpec& output : outputs) output.dims.insert(output.dims.begin(), static_cast<int64_t>(count));
  return outputs;
}

// The ensemble's outputs taken from a first member that is packed: its own
// without the packed axis (left whole where that axis is not `count`: the
// member check then names the mismatch).
std::vector<TensorSpec> UnpackedOutputs(std::vector<TensorSpec> outputs, size_t count) {
  for (TensorSpec& output : outputs) {
    if (!output.dims.empty() && output.dims[0] == static_cast<int64_t>(count)) output.dims.erase(output.dims.begin());
  }
  return outputs;
}

Status CheckMember(const LoadedModel& ensemble, size_t index, const LoadedRepository& repo) {
  const ModelConfig& config = ensemble.config;
  const std::string& name = config.ensemble.members[index].model;
  const int line = ensemble.source.member_lines[index];
  const std::string field = "ensemble.members[" + std::to_string(index) + "].model";
  auto error = [&](const std::string& what) {
    return yaml::ErrorAt(ensemble.source.file, line, field, what);
  };
  auto it = repo.find(name);
  if (it == repo.end()) return error("unknown model '" + name + "' (no such model folder)");
  const ModelConfig& member = it->second.config;
  if (member.is_ensemble()) return error("member '" + name + "' is itself an ensemble");
  // Omitted tensors were copied from the first member: say so, or the user
  // looks for a declaration that is not there.
  const std::string first = config.ensemble.members[0].model;
  const std::string inputs_of = ensemble.source.inputs_declared
                                    ? "the ensemble's"
                                    : "the ensemble's (from first member '" + first + "')";
  const std::string outputs_of = ensemble.source.outputs_declared
                                     ? "the ensemble's"
                                     : "the ensemble's (from first member '" + first + "')";
  const EnsembleMember& entry = config.ensemble.members[index];
  if (!entry.packed.empty() && (!member.batched() || !config.batched())) {
    return error("packed member '" + name + "' needs it and the ensemble batched (max_batch_size > 0): its " +
                 "outputs hold the members along the axis after the batch");
  }
  std::string diff = CompareTensors("input", config.inputs, member.inputs, inputs_of);
  if (diff.empty()) {
    diff = entry.packed.empty()
               ? CompareTensors("output", config.outputs, member.outputs, outputs_of)
               : CompareTensors("output", PackedOutputs(config.outputs, entry.Count()), member.outputs,
                                outputs_of + " with the " + std::to_string(entry.Count()) + " packed members first");
  }
  if (!diff.empty()) return error("member '" + name + "' " + diff);
  return Status::Ok();
}

// Batched and unbatched dims mean different shapes, so both sides must agree,
// and the ensemble's largest batch must fit each member.
Status CheckBatching(const LoadedModel& ensemble, const ModelConfig& member) {
  const ModelConfig& config = ensemble.config;
  std::string what;
  if (config.max_batch_size > member.max_batch_size) {
    what = "ensemble max_batch_size " + std::to_string(config.max_batch_size) +
           " exceeds member '" + member.name + "' max_batch_size " +
           std::to_string(member.max_batch_size);
  } else if (!config.batched() && member.batched()) {
    what = "the ensemble is unbatched (0) but member '" + member.name +
           "' is batched; their dims would describe different shapes";
  }
  if (what.empty()) return Status::Ok();
  return yaml::ErrorAt(ensemble.source.file, ensemble.source.max_batch_size_line,
                       "max_batch_size", what);
}

// Majority vote takes the argmax over the class axis of a [batch, classes]
// output; any other shape has no class axis to vote on.
// A cascade reads its one output as class probabilities per row, FP32.
Status CheckClassVectors(const LoadedModel& ensemble) {
  const ModelConfig& config = ensemble.config;
  const CombineRule rule = config.ensemble.combine;
  if (rule != CombineRule::kMajorityVote && rule != CombineRule::kCascade) return Status::Ok();
  auto error = [&](const std::string& what) {
    return yaml::ErrorAt(ensemble.source.file, ensemble.source.combine_line, "ensemble.combine", what);
  };
  for (const TensorSpec& output : config.outputs) {
    if (!config.batched() || output.dims.size() != 1) {
      return error(std::string(CombineRuleName(rule)) +
                   " needs every output to be [batch, classes] (max_batch_size > 0 and "
                   "dims of length 1), but output '" + output.name + "' has dims " + DimsString(output.dims) +
                   " with max_batch_size " + std::to_string(config.max_batch_size));
    }
  }
  if (rule == CombineRule::kCascade &&
      (config.outputs.size() != 1 || config.outputs[0].datatype != DataType::kFp32 || config.outputs[0].dims[0] < 1)) {
    return error("cascade needs exactly one output, FP32 class probabilities of a fixed class count");
  }
  return Status::Ok();
}

Status CheckEnsemble(LoadedModel* ensemble, const LoadedRepository& repo) {
  ModelConfig& config = ensemble->config;
  // Omitted tensors come from the first member; if that member is missing or
  // an ensemble, the loop below reports it.
  auto first = repo.find(config.ensemble.members[0].model);
  if (first != repo.end() && !first->second.config.is_ensemble()) {
    if (!ensemble->source.inputs_declared) config.inputs = first->second.config.inputs;
    if (!ensemble->source.outputs_declared) {
      const EnsembleMember& entry = config.ensemble.members[0];
      config.outputs = entry.packed.empty() ? first->second.config.outputs
                                            : UnpackedOutputs(first->second.config.outputs, entry.Count());
    }
  }
  for (size_t i = 0; i < config.ensemble.members.size(); ++i) {
    ES_RETURN_IF_ERROR(CheckMember(*ensemble, i, repo));
    ES_RETURN_IF_ERROR(CheckBatching(*ensemble, repo.at(config.ensemble.members[i].model).config));
  }
  return CheckClassVectors(*ensemble);
}

}  // namespace

Status CheckOneEnsemble(LoadedModel* ensemble, const LoadedRepository& repository) {
  ES_RETURN_IF_ERROR(CheckEnsemble(ensemble, repository));
  return CheckOverload(*ensemble, repository);
}

Status CheckEnsembles(LoadedRepository* repository) {
  for (auto& [name, model] : *repository) {
    if (model.config.is_ensemble()) ES_RETURN_IF_ERROR(CheckEnsemble(&model, *repository));
  }
  // After every ensemble's tensors are resolved: a rung may be an ensemble.
  for (const auto& [name, model] : *repository) {
    ES_RETURN_IF_ERROR(CheckOverload(model, *repository));
  }
  return Status::Ok();
}

}  // namespace es
