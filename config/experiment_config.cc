// The `experiment:` section of a model's config.yaml (ExperimentSpec):
//   experiment:
//     candidate: mlp_v2          # another model with the same inputs and outputs
//     mode: shadow               # shadow | canary | off
//     percent: 50                # share of requests, 0 .. 100
//     sticky_by: user            # canary: a request parameter keeping a caller on one side
//     window: 1000               # requests the sliding figures cover
//     gate: {min_compared: 500, min_agreement: 0.98, max_error_increase: 0.01,
//            max_latency_ratio: 1.5, abort_error_rate: 0.2}
#include "config/model_source.h"

namespace es {

const char* ExperimentModeName(ExperimentSpec::Mode mode) {
  switch (mode) {
    case ExperimentSpec::Mode::kOff: return "off";
    case ExperimentSpec::Mode::kShadow: return "shadow";
    case ExperimentSpec::Mode::kCanary: return "canary";
  }
  return "off";
}

Status ParseExperiment(const yaml::Field& field, LoadedModel* model) {
  if (!field.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(field, {"candidate", "mode", "percent", "sticky_by", "window", "gate"}));
  ExperimentSpec& spec = model->config.experiment;
  std::string mode = "shadow";
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "mode", &mode));
  bool known = false;
  for (auto m : {ExperimentSpec::Mode::kOff, ExperimentSpec::Mode::kShadow, ExperimentSpec::Mode::kCanary}) {
    if (mode == ExperimentModeName(m)) {
      spec.mode = m;
      known = true;
    }
  }
  if (!known) return yaml::Error(yaml::Child(field, "mode"), "unknown mode '" + mode + "' (shadow, canary or off)");
  // Off needs no candidate: it stops an experiment.
  if (spec.mode == ExperimentSpec::Mode::kOff) {
    ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "candidate", &spec.candidate));
  } else {
    ES_RETURN_IF_ERROR(yaml::ReadRequiredString(field, "candidate", &spec.candidate));
  }
  if (spec.candidate == model->config.name) {
    return yaml::Error(yaml::Child(field, "candidate"), "a model cannot be its own candidate");
  }
  ES_RETURN_IF_ERROR(yaml::ReadOptionalDouble(field, "percent", 0.0, 100.0, &spec.percent));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "sticky_by", &spec.sticky_by));
  if (!spec.sticky_by.empty() && spec.mode != ExperimentSpec::Mode::kCanary) {
    return yaml::Error(yaml::Child(field, "sticky_by"), "only a canary keeps callers on one side");
  }
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "window", int64_t{10}, int64_t{1} << 20, &spec.window));
  const yaml::Field gate = yaml::Child(field, "gate");
  if (!gate.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(gate, {"min_compared", "min_agreement", "max_error_increase", "max_latency_ratio",
                                           "abort_error_rate"}));
  ExperimentGate& g = spec.gate;
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(gate, "min_compared", int64_t{0}, spec.window, &g.min_compared));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalDouble(gate, "min_agreement", 0.0, 1.0, &g.min_agreement));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalDouble(gate, "max_error_increase", 0.0, 1.0, &g.max_error_increase));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalDouble(gate, "max_latency_ratio", 0.01, 1000.0, &g.max_latency_ratio));
  return yaml::ReadOptionalDouble(gate, "abort_error_rate", 0.0, 1.0, &g.abort_error_rate);
}

StatusOr<ExperimentSpec> ParseExperimentText(const std::string& text, const std::string& model,
                                             const std::string& where) {
  ES_ASSIGN_OR_RETURN(yaml::Field root, yaml::LoadText(text, where));
  if (!root.node.IsMap()) return yaml::Error(root, "expected an object with the experiment's fields");
  LoadedModel loaded;
  loaded.config.name = model;
  ES_RETURN_IF_ERROR(ParseExperiment(root, &loaded));
  return loaded.config.experiment;
}

}  // namespace es
