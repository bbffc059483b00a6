// The `overload:` section of an ensemble's config.yaml (OverloadSpec): its
// parsing, and the cross checks against the other models of the repository
// (every rung exists, answers with the ensemble's tensors, fits its batches,
// and has no ladder of its own: ladders do not nest).
#include <cmath>
#include <set>

#include "config/model_source.h"

namespace es {
namespace {

Status ParseRung(const yaml::Field& item, OverloadRung* rung) {
  if (item.node.IsScalar()) {
    ES_ASSIGN_OR_RETURN(rung->model, yaml::ReadString(item));
  } else {
    ES_RETURN_IF_ERROR(yaml::CheckMap(item, {"model", "accuracy", "exit_threshold"}));
    ES_RETURN_IF_ERROR(yaml::ReadRequiredString(item, "model", &rung->model));
    ES_RETURN_IF_ERROR(yaml::ReadOptionalDouble(item, "accuracy", 0.0, 1.0, &rung->accuracy));
    const yaml::Field threshold = yaml::Child(item, "exit_threshold");
    if (threshold.present()) {
      ES_ASSIGN_OR_RETURN(rung->exit_threshold, yaml::ReadDouble(threshold));
      if (!(rung->exit_threshold > 0 && rung->exit_threshold <= 1)) {
        return yaml::Error(threshold, "exit_threshold must be in (0, 1] (the cascade rung's top-class probability "
                                      "at which a row leaves)");
      }
    }
  }
  if (rung->model.empty()) return yaml::Error(item, "a rung names a model");
  return Status::Ok();
}

}  // namespace

Status ParseOverload(const yaml::Field& field, LoadedModel* model) {
  if (!field.present()) return Status::Ok();
  if (!model->config.is_ensemble()) {
    return yaml::Error(field, "only an ensemble has an overload ladder");
  }
  ES_RETURN_IF_ERROR(
      yaml::CheckMap(field, {"latency_target_ms", "ladder", "dwell_ms", "lower_priority_share"}));
  OverloadSpec& spec = model->config.overload;
  const yaml::Field target = yaml::Child(field, "latency_target_ms");
  if (!target.present()) {
    return yaml::Error(target, "missing required field (the p99 latency in ms the ensemble keeps)");
  }
  ES_ASSIGN_OR_RETURN(spec.latency_target_ms, yaml::ReadDouble(target));
  if (!std::isfinite(spec.latency_target_ms) || spec.latency_target_ms <= 0 ||
      spec.latency_target_ms > 3600.0 * 1000) {
    return yaml::Error(target, "latency_target_ms must be a number of milliseconds in (0, 3600000]");
  }
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "dwell_ms", int64_t{0}, int64_t{3600} * 1000, &spec.dwell_ms));
  ES_RETURN_IF_ERROR(
      yaml::ReadOptionalDouble(field, "lower_priority_share", 0.05, 1.0, &spec.lower_priority_share));
  const yaml::Field ladder = yaml::Child(field, "ladder");
  if (!ladder.present()) return yaml::Error(ladder, "missing required field (the rungs, richest first)");
  ES_RETURN_IF_ERROR(yaml::CheckSequence(ladder));
  std::set<std::string> seen;
  for (const yaml::Field& item : yaml::Items(ladder)) {
    OverloadRung rung;
    ES_RETURN_IF_ERROR(ParseRung(item, &rung));
    if (!seen.insert(rung.label()).second) return yaml::Error(item, "rung '" + rung.label() + "' is listed twice");
    if (spec.ladder.empty() && (rung.model != model->config.name || rung.exit_threshold > 0)) {
      return yaml::Error(item, "the ladder starts with the ensemble itself ('" + model->config.name +
                                   "'), then ever cheaper models; '" + rung.model + "' is first");
    }
    spec.ladder.push_back(std::move(rung));
    model->source.rung_lines.push_back(item.line);
  }
  if (spec.ladder.size() < 2) {
    return yaml::Error(ladder, "a ladder needs the ensemble itself and at least one cheaper rung");
  }
  return Status::Ok();
}

Status CheckOverload(const LoadedModel& ensemble, const LoadedRepository& repo) {
  const ModelConfig& config = ensemble.config;
  for (size_t i = 1; i < config.overload.ladder.size(); ++i) {
    const OverloadRung& spec = config.overload.ladder[i];
    const std::string& name = spec.model;
    auto error = [&](const std::string& what) {
      return yaml::ErrorAt(ensemble.source.file, ensemble.source.rung_lines[i],
                           "overload.ladder[" + std::to_string(i) + "]", what);
    };
    auto it = repo.find(name);
    if (it == repo.end()) return error("unknown model '" + name + "' (no such model folder)");
    const ModelConfig& rung = it->second.config;
    if (rung.overload.enabled()) {
      return error("rung '" + name + "' has an overload ladder of its own; ladders do not nest");
    }
    if (spec.exit_threshold > 0 && !(rung.is_ensemble() && rung.ensemble.cascade())) {
      return error("rung '" + name + "' sets exit_threshold but is not a cascade (an ensemble with combine: cascade)");
    }
    // A rung answers in the ensemble's place: the client's request must be
    // one the rung accepts, and the answer one the client expects.
    std::string diff = CompareTensors("input", config.inputs, rung.inputs, "the ensemble's");
    if (diff.empty()) diff = CompareTensors("output", config.outputs, rung.outputs, "the ensemble's");
    if (!diff.empty()) return error("rung '" + name + "' " + std::move(diff));
    if (config.max_batch_size > rung.max_batch_size || config.batched() != rung.batched()) {
      return error("rung '" + name + "' has max_batch_size " + std::to_string(rung.max_batch_size) +
                   ", the ensemble " + std::to_string(config.max_batch_size) +
                   ": a rung must take every batch the ensemble takes, with the same batch dimension");
    }
  }
  return Status::Ok();
}

}  // namespace es
