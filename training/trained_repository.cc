#include "training/trained_repository.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "torch_utils/served_config.h"

namespace es {
namespace fs = std::filesystem;
namespace {

constexpr double kCascadeTolerancePoints = 0.1;  // accuracy points the cascade may lose

std::string ServerYaml(const std::vector<std::string>& host_devices) {
  std::string yaml =
      "# Written by ensemble-train: serves this folder as it is.\n"
      "#   ensemble-server --config <this folder>/server.yaml\n"
      "repository: .\n"
      "listen_address: 127.0.0.1\n"
      "hosts:\n";
  for (size_t i = 0; i < host_devices.size(); ++i) {
    const std::string& device = host_devices[i];
    const bool cuda = device.rfind("cuda", 0) == 0;
    const std::string index = device.substr(device.find(':') + 1);
    yaml += "  - {name: " + std::string(cuda ? "gpu" : "cpu") + index +
            ", device: " + (cuda ? device : std::string("cpu")) +
            (cuda ? std::string() : ", cpu_affinity: [" + index + "]") + ", threads: 1}\n";
  }
  return yaml;
}

nlohmann::json ScoresJson(const ClassifierScores& s) {
  return {{"accuracy", s.accuracy}, {"nll", s.nll}, {"brier", s.brier}, {"ece", s.ece}, {"rows", s.rows}};
}

std::vector<float> Row(const at::Tensor& tensor, int64_t row) {
  at::Tensor flat = tensor[row].reshape({-1}).contiguous().to(at::kFloat);
  return {flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel()};
}

Status WriteJson(const fs::path& path, const nlohmann::json& json) {
  return WriteTextFile(path.string(), json.dump(2) + "\n");
}

std::string Threshold(double t) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", t);
  return text;
}

std::string StagesText(const std::vector<std::vector<std::string>>& stages) {
  std::string text = "[";
  for (size_t s = 0; s < stages.size(); ++s) {
    text += s > 0 ? ", [" : "[";
    for (size_t m = 0; m < stages[s].size(); ++m) text.append(m > 0 ? ", " : "").append(stages[s][m]);
    text += "]";
  }
  return text + "]";
}

// Writes the cascade variant's folder `parent/<variant>` (its config.yaml).
Status WriteCascadeFolder(const fs::path& folder, int64_t max_batch_size, const CascadeVariant& variant) {
  fs::create_directories(folder);
  return WriteTextFile((folder / "config.yaml").string(), CascadeEnsembleYaml(max_batch_size, variant));
}

}  // namespace

std::string CascadeVariantName(const std::string& ensemble_name) { return ensemble_name + "_cascade"; }

std::optional<CascadeVariant> ChosenCascade(const TrainReport& report) {
  if (!report.cascade) return std::nullopt;
  const CascadeSweep& sweep = *report.cascade;
  CascadeVariant variant;
  variant.name = CascadeVariantName(report.ensemble.name);
  for (const std::vector<size_t>& stage : sweep.stages) {
    std::vector<std::string> names;
    for (size_t m : stage) names.push_back(report.members[m].name);
    variant.stages.push_back(std::move(names));
  }
  variant.exit_threshold = sweep.thresholds[sweep.chosen].threshold;
  return variant;
}

std::string CascadeEnsembleYaml(int64_t max_batch_size, const CascadeVariant& variant) {
  std::vector<std::string> members;
  for (const std::vector<std::string>& stage : variant.stages) {
    members.insert(members.end(), stage.begin(), stage.end());
  }
  std::string yaml = ClassifierEnsembleYaml(max_batch_size, members, "cascade");
  // The cascade's keys go right under `combine:` (the one shared writer of
  // the tensors and the member list stays the only one).
  const std::string combine = "  combine: cascade\n";
  const size_t at = yaml.find(combine);
  if (at == std::string::npos) throw std::runtime_error("ClassifierEnsembleYaml wrote no '  combine: cascade' line");
  yaml.insert(at + combine.size(), "  exit_threshold: " + Threshold(variant.exit_threshold) +
                                       "\n  stages: " + StagesText(variant.stages) + "\n");
  return "# Written by ensemble-train: the cascade variant of the ensemble beside it. Members\n"
         "# cheapest first (forward time per row on the test set); exit_threshold is the\n"
         "# smallest of the sweep whose test accuracy was within 0.1 points of the full\n"
         "# ensemble's (report.json, \"cascade\").\n" +
         yaml;
}

std::string OverloadLadderYaml(const TrainConfig& config, const TrainReport& report,
                               const std::optional<CascadeVariant>& cascade) {
  if (config.ensemble.latency_target_ms <= 0 || report.members.empty()) return "";
  auto rung = [](const std::string& model, double accuracy) {
    char text[160];
    std::snprintf(text, sizeof text, "    - {model: %s, accuracy: %.4f}\n", model.c_str(), accuracy);
    return std::string(text);
  };
  char target[64];
  std::snprintf(target, sizeof target, "%g", config.ensemble.latency_target_ms);
  std::string yaml =
      "# Written by ensemble-train: past capacity the server keeps latency_target_ms by answering\n"
      "# from the cheaper rungs below (docs/overload.md); accuracies are the test set's (report.json).\n"
      "overload:\n  latency_target_ms: " + std::string(target) + "\n  ladder:\n";
  yaml += rung(config.ensemble.name, report.ensemble.scores.accuracy);
  if (cascade && report.cascade) {
    yaml += rung(cascade->name, report.cascade->thresholds[report.cascade->chosen].accuracy);
  }
  const ScoredModel* best = &report.members[0];
  for (const ScoredModel& m : report.members) {
    if (m.scores.accuracy > best->scores.accuracy) best = &m;
  }
  return yaml + rung(best->name, best->scores.accuracy);
}

namespace {

// WriteTrainedRepository's writes. std::filesystem and LibTorch (save) throw;
// the caller turns that into a Status.
Status WriteRepositoryFolders(const fs::path& dir, const TrainConfig& config, std::vector<torch::jit::Module>& modules,
                              const std::vector<std::string>& host_devices,
                              const std::optional<CascadeVariant>& cascade, const std::string& overload_yaml) {
  std::vector<std::string> names;
  for (size_t i = 0; i < modules.size(); ++i) {
    const std::string& name = config.members[i].name;
    names.push_back(name);
    const fs::path folder = dir / name;
    fs::remove_all(folder);  // a stale version folder would be served as the latest
    fs::create_directories(folder / "1");
    modules[i].eval();
    modules[i].save((folder / "1" / "model.pt").string());
    ES_RETURN_IF_ERROR(
        WriteTextFile((folder / "config.yaml").string(), ClassifierMemberYaml(config.ensemble.max_batch_size, {})));
  }
  const fs::path ensemble = dir / config.ensemble.name;
  fs::remove_all(ensemble);
  fs::create_directories(ensemble);
  ES_RETURN_IF_ERROR(WriteTextFile(
      (ensemble / "config.yaml").string(),
      ClassifierEnsembleYaml(config.ensemble.max_batch_size, names, config.ensemble.combine) + overload_yaml));
  const fs::path variant = dir / CascadeVariantName(config.ensemble.name);
  fs::remove_all(variant);
  if (cascade) ES_RETURN_IF_ERROR(WriteCascadeFolder(variant, config.ensemble.max_batch_size, *cascade));
  return WriteTextFile((dir / "server.yaml").string(), ServerYaml(host_devices));
}

// The highest numeric sub-folder of `model_dir` (0 when none or no folder).
int64_t HighestVersion(const fs::path& model_dir) {
  int64_t highest = 0;
  std::error_code ec;
  for (fs::directory_iterator it(model_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.size() > 18 || name.find_first_not_of("0123456789") != std::string::npos) continue;
    highest = std::max<int64_t>(highest, std::stoll(name));
  }
  return highest;
}

// PublishTrained's steps, staged under `staging`; appends one line per
// folder to `published`. Throws as WriteRepositoryFolders does.
Status PublishThroughStaging(const fs::path& repo, const fs::path& staging, const TrainConfig& config,
                             std::vector<torch::jit::Module>& modules, const std::optional<CascadeVariant>& cascade,
                             const std::string& overload_yaml, std::vector<std::string>* published) {
  fs::remove_all(staging);
  fs::create_directories(staging);
  std::vector<std::string> names;
  for (size_t i = 0; i < modules.size(); ++i) {
    const std::string& name = config.members[i].name;
    names.push_back(name);
    const fs::path model_dir = repo / name;
    const bool exists = fs::exists(model_dir / "config.yaml");
    const int64_t version = exists ? HighestVersion(model_dir) + 1 : 1;
    // A new model: its whole folder is staged and renamed in; else just the version folder.
    const fs::path staged_model = staging / name;
    const fs::path staged_version = staged_model / std::to_string(version);
    fs::create_directories(staged_version);
    modules[i].eval();
    modules[i].save((staged_version / "model.pt").string());
    if (exists) {
      fs::rename(staged_version, model_dir / std::to_string(version));
    } else {
      ES_RETURN_IF_ERROR(WriteTextFile((staged_model / "config.yaml").string(),
                                       ClassifierMemberYaml(config.ensemble.max_batch_size, {})));
      fs::rename(staged_model, model_dir);
    }
    published->push_back(name + ": version " + std::to_string(version));
  }
  // The cascade variant before the ensemble: the ensemble's overload ladder
  // names it, and a polling server must find it when it loads the ladder.
  if (cascade) {
    const fs::path variant = repo / cascade->name;
    const std::string chose =
        "exit_threshold " + Threshold(cascade->exit_threshold) + ", stages " + StagesText(cascade->stages);
    if (!fs::exists(variant / "config.yaml")) {
      const fs::path staged = staging / cascade->name;
      ES_RETURN_IF_ERROR(WriteCascadeFolder(staged, config.ensemble.max_batch_size, *cascade));
      fs::rename(staged, variant);
      published->push_back(cascade->name + ": new cascade (" + chose + ")");
    } else {
      // Like the ensemble's: the user's file (hosts, a threshold of their
      // own) wins; this run's choice is said, not imposed.
      published->push_back(cascade->name + ": config.yaml kept; this run's sweep chose " + chose);
    }
  }
  const fs::path ensemble = repo / config.ensemble.name;
  if (!fs::exists(ensemble / "config.yaml")) {
    const fs::path staged = staging / config.ensemble.name;
    fs::create_directories(staged);
    ES_RETURN_IF_ERROR(
        WriteTextFile((staged / "config.yaml").string(),
                      ClassifierEnsembleYaml(config.ensemble.max_batch_size, names, config.ensemble.combine) +
                          overload_yaml));
    fs::rename(staged, ensemble);
    published->push_back(config.ensemble.name + ": new ensemble");
  } else {
    published->push_back(config.ensemble.name + ": config.yaml kept (it follows its members' newest versions)");
  }
  return Status::Ok();
}

}  // namespace

Status WriteTrainedRepository(const std::string& dir, const TrainConfig& config,
                              std::vector<torch::jit::Module>& modules, const std::vector<std::string>& host_devices,
                              const std::optional<CascadeVariant>& cascade, const std::string& overload_yaml) {
  Status status;
  try {
    status = WriteRepositoryFolders(dir, config, modules, host_devices, cascade, overload_yaml);
  } catch (const std::exception& e) {
    status = Status::Internal(e.what());
  }
  if (status.ok()) return status;
  return Status(status.code(), "writing the model repository " + dir + ": " + status.message());
}

StatusOr<std::vector<std::string>> PublishTrained(const std::string& repo, const TrainConfig& config,
                                                  std::vector<torch::jit::Module>& modules,
                                                  const std::optional<CascadeVariant>& cascade,
                                                  const std::string& overload_yaml) {
  const fs::path staging = fs::path(repo) / (".publish-" + std::to_string(getpid()));
  std::vector<std::string> published;
  Status status;
  try {
    status = PublishThroughStaging(repo, staging, config, modules, cascade, overload_yaml, &published);
  } catch (const std::exception& e) {
    status = Status::Internal(e.what());
  }
  std::error_code ec;
  // What is left: version folders' parents after a success, a half-written
  // folder after a failure; hidden either way, but not worth keeping.
  fs::remove_all(staging, ec);
  if (!status.ok()) {
    return Status(status.code(), "publishing into the model repository " + repo + ": " + status.message());
  }
  return published;
}

namespace {

// report.json's "cascade": costs in microseconds of forward time per row.
nlohmann::json CascadeJson(const TrainReport& report) {
  const CascadeSweep& sweep = *report.cascade;
  const std::optional<CascadeVariant> variant = ChosenCascade(report);
  nlohmann::json json;
  json["variant"] = variant->name;
  json["stages"] = variant->stages;
  json["cost_unit"] = "microseconds of forward time per row (median over the evaluation's batches, rank 0)";
  for (size_t m = 0; m < sweep.costs.size(); ++m) json["costs"][report.members[m].name] = 1e6 * sweep.costs[m];
  json["full_ensemble"] = {{"accuracy", sweep.full_accuracy}, {"nll", sweep.full_nll}, {"cost", 1e6 * sweep.full_cost}};
  json["tolerance_points"] = sweep.tolerance_points;
  json["thresholds"] = nlohmann::json::array();
  for (const CascadeThresholdResult& t : sweep.thresholds) {
    json["thresholds"].push_back({{"threshold", t.threshold},
                                  {"accuracy", t.accuracy},
                                  {"nll", t.nll},
                                  {"mean_member_cost", 1e6 * t.mean_member_cost},
                                  {"cost_fraction", t.cost_fraction},
                                  {"exits_per_stage", t.exits_per_stage}});
  }
  const CascadeThresholdResult& chosen = sweep.thresholds[sweep.chosen];
  json["chosen"] = {{"threshold", chosen.threshold},
                    {"accuracy", chosen.accuracy},
                    {"cost_fraction", chosen.cost_fraction},
                    {"within_tolerance", sweep.chosen_within_tolerance}};
  return json;
}

std::string FormatCascade(const TrainReport& report) {
  if (!report.cascade) return "cascade: not swept (" + report.cascade_error + ")\n";
  const CascadeSweep& sweep = *report.cascade;
  const std::optional<CascadeVariant> variant = ChosenCascade(report);
  std::string text = "\nCascade (" + variant->name + "), stages cheapest first by forward time per row:";
  char line[256];
  bool first = true;
  for (const std::vector<size_t>& stage : sweep.stages) {
    for (size_t m : stage) {
      std::snprintf(line, sizeof(line), "%s %s %.1f us", first ? "" : ",", report.members[m].name.c_str(),
                    1e6 * sweep.costs[m]);
      text += line;
      first = false;
    }
  }
  std::snprintf(line, sizeof(line), "\nfull ensemble: %.2f%%, NLL %.4f, %.1f us per row\n", 100.0 * sweep.full_accuracy,
                sweep.full_nll, 1e6 * sweep.full_cost);
  text += line;
  std::snprintf(line, sizeof(line), "%9s %9s %8s %11s %8s  %s\n", "threshold", "accuracy", "NLL", "us per row",
                "of full", "exits per stage");
  text += line;
  for (const CascadeThresholdResult& t : sweep.thresholds) {
    std::string exits;
    for (int64_t e : t.exits_per_stage) exits.append(exits.empty() ? "" : "/").append(std::to_string(e));
    std::snprintf(line, sizeof(line), "%9.3f %8.2f%% %8.4f %11.1f %7.1f%%  %s\n", t.threshold, 100.0 * t.accuracy,
                  t.nll, 1e6 * t.mean_member_cost, 100.0 * t.cost_fraction, exits.c_str());
    text += line;
  }
  const CascadeThresholdResult& chosen = sweep.thresholds[sweep.chosen];
  std::snprintf(line, sizeof(line),
                "chosen: exit_threshold %s, %.2f%% (%+.2f points), %.1f%% of the full ensemble's cost",
                Threshold(chosen.threshold).c_str(), 100.0 * chosen.accuracy,
                100.0 * (chosen.accuracy - sweep.full_accuracy), 100.0 * chosen.cost_fraction);
  text += line;
  std::snprintf(line, sizeof(line),
                sweep.chosen_within_tolerance ? " (the smallest within %g points)\n"
                                              : " (none within %g points: the largest threshold)\n",
                sweep.tolerance_points);
  text += line;
  return text;
}

}  // namespace

TrainReport ScoreEvaluation(const TrainConfig& config, const Evaluation& evaluation, const at::Tensor& labels) {
  TrainReport report;
  for (size_t i = 0; i < evaluation.members.size(); ++i) {
    report.members.push_back({config.members[i].name, ScoreClassifier(evaluation.members[i], labels)});
  }
  report.ensemble = {config.ensemble.name, ScoreClassifier(evaluation.ensemble, labels)};
  if (evaluation.member_seconds_per_row.size() != evaluation.members.size()) {
    report.cascade_error = "the evaluation has no member timings";
    return report;
  }
  const std::vector<double>& costs = evaluation.member_seconds_per_row;
  StatusOr<CascadeSweep> sweep = SweepCascade(evaluation.members, labels, costs, StagesCheapestFirst(costs),
                                              DefaultCascadeThresholds(), kCascadeTolerancePoints);
  if (sweep.ok()) {
    report.cascade = std::move(sweep).value();
  } else {
    report.cascade_error = sweep.status().message();
  }
  return report;
}

Status WriteReport(const std::string& dir, const TrainReport& report, const Evaluation& evaluation,
                   const at::Tensor& images, const at::Tensor& labels, int64_t sample_rows) {
  try {
    nlohmann::json json;
    json["dataset"] = report.dataset;
    json["world_size"] = report.world_size;
    json["epochs"] = report.epochs;
    json["steps"] = report.steps;
    json["global_batch"] = report.global_batch;
    json["train_seconds"] = report.train_seconds;
    json["mean_step_seconds"] = report.mean_step_seconds;
    json["mean_allreduce_seconds"] = report.mean_allreduce_seconds;
    json["allreduce_share_of_step"] =
        report.mean_step_seconds > 0 ? report.mean_allreduce_seconds / report.mean_step_seconds : 0;
    json["parameter_divergence"] = report.parameter_divergence;
    for (const ScoredModel& member : report.members) {
      json["members"][member.name] = ScoresJson(member.scores);
    }
    json["ensemble"] = ScoresJson(report.ensemble.scores);
    json["ensemble"]["name"] = report.ensemble.name;
    if (report.cascade) {
      json["cascade"] = CascadeJson(report);
    } else {
      json["cascade"] = {{"error", report.cascade_error}};
    }
    ES_RETURN_IF_ERROR(WriteJson(fs::path(dir) / "report.json", json));

    nlohmann::json samples = nlohmann::json::array();
    for (int64_t row = 0; row < std::min(sample_rows, images.size(0)); ++row) {
      nlohmann::json sample;
      sample["row"] = row;
      sample["label"] = labels[row].item<int64_t>();
      sample["input"] = Row(images, row);
      sample["ensemble"] = Row(evaluation.ensemble, row);
      for (size_t m = 0; m < evaluation.members.size(); ++m) {
        sample["members"][report.members[m].name] = Row(evaluation.members[m], row);
      }
      samples.push_back(std::move(sample));
    }
    ES_RETURN_IF_ERROR(WriteJson(fs::path(dir) / "eval_samples.json", samples));
  } catch (const std::exception& e) {
    return Status::Internal("writing the report into " + dir + ": " + e.what());
  }
  return Status::Ok();
}

std::string FormatReport(const TrainReport& report) {
  std::string text;
  char line[256];
  std::snprintf(line, sizeof(line), "%-20s %9s %8s %8s %8s\n", "model", "accuracy", "NLL", "Brier", "ECE");
  text += line;
  auto add = [&](const ScoredModel& model) {
    std::snprintf(line, sizeof(line), "%-20s %8.2f%% %8.4f %8.4f %8.4f\n", model.name.c_str(),
                  100.0 * model.scores.accuracy, model.scores.nll, model.scores.brier, model.scores.ece);
    text += line;
  };
  for (const ScoredModel& member : report.members) add(member);
  add(report.ensemble);
  if (!report.members.empty()) {
    const ScoredModel& best = *std::max_element(
        report.members.begin(), report.members.end(),
        [](const ScoredModel& a, const ScoredModel& b) { return a.scores.accuracy < b.scores.accuracy; });
    std::snprintf(line, sizeof(line), "ensemble vs best member (%s): %+.2f accuracy points, NLL %+.4f, ECE %+.4f\n",
                  best.name.c_str(), 100.0 * (report.ensemble.scores.accuracy - best.scores.accuracy),
                  report.ensemble.scores.nll - best.scores.nll, report.ensemble.scores.ece - best.scores.ece);
    text += line;
  }
  std::snprintf(line, sizeof(line),
                "%d rank(s), %lld steps of %lld rows in %.1f s; step %.1f ms, all-reduce wait "
                "%.2f ms (%.1f%% of the step)\n",
                report.world_size, static_cast<long long>(report.steps), static_cast<long long>(report.global_batch),
                report.train_seconds, 1e3 * report.mean_step_seconds, 1e3 * report.mean_allreduce_seconds,
                report.mean_step_seconds > 0 ? 100.0 * report.mean_allreduce_seconds / report.mean_step_seconds : 0.0);
  text += line;
  text += FormatCascade(report);
  return text;
}

}  // namespace es
