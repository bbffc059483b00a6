#include "training/trained_repository.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
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

// A member's config.yaml. Its requests are batched while they wait for a
// busy host (served_config.h): an ensemble puts a call on every member per
// request, so past capacity each member's calls queue, and one batched call
// costs less a row than a call per row (on a 2-core Xeon, the twelve
// convnets of benchmarks/run_training.sh: the ensemble's capacity went from
// 781 to 919-1,055 requests/s, its best member's from 7,537 to 8,119-9,239;
// benchmarks/RESULTS.md, "Overload ladder"). A lone request is not delayed.
std::string MemberYaml(int64_t max_batch_size) {
  return ClassifierMemberYaml(max_batch_size, {}) + BatchWhatWaitsYaml();
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
  // The cascade's keys continue the `ensemble:` mapping after the member
  // list, the last thing the shared writer of ensembles writes.
  const std::string yaml = ClassifierEnsembleYaml(max_batch_size, members, "cascade") +
                           "  exit_threshold: " + Threshold(variant.exit_threshold) +
                           "\n  stages: " + StagesText(variant.stages) + "\n";
  return "# Written by ensemble-train: the cascade variant of the ensemble beside it. Members\n"
         "# cheapest first (forward time per row on the test set), in the stages of the\n"
         "# training config's ensemble.cascade_stages; exit_threshold is the\n"
         "# smallest of the sweep whose test accuracy was within 0.1 points of the full\n"
         "# ensemble's (report.json, \"cascade\").\n" +
         yaml;
}

std::vector<size_t> CascadeLadderThresholds(const CascadeSweep& sweep, double member_accuracy, double member_cost) {
  const std::vector<CascadeThresholdResult>& t = sweep.thresholds;
  if (t.empty() || sweep.chosen >= t.size()) return {};
  constexpr double kStep = 2.0 / 3;  // each rung costs at most this share of the one above it
  std::vector<size_t> rungs;
  // Above the chosen threshold: the most accurate that still saves a third
  // of the full ensemble, the cheapest of equals (the thresholds come
  // cheapest first), if it is more accurate than the chosen. No lower bound
  // on its cost: one (half again the chosen's) kept out a threshold both
  // more accurate and cheaper than the one it let in (a run's 0.97: 93.59%
  // at 0.25 of the full cost, against 0.99: 93.56% at 0.30), and the
  // cheaper a richer rung, the more load the ladder carries at it.
  const double chosen_cost = t[sweep.chosen].cost_fraction;
  std::optional<size_t> richer;
  for (size_t i = sweep.chosen + 1; i < t.size(); ++i) {
    if (t[i].cost_fraction > kStep || t[i].accuracy <= t[sweep.chosen].accuracy) continue;
    if (!richer || t[i].accuracy > t[*richer].accuracy) richer = i;
  }
  if (richer) rungs.push_back(*richer);
  rungs.push_back(sweep.chosen);
  // Below it: ever cheaper thresholds, while they beat the best member on
  // accuracy and cost more than it (else the member is the better rung).
  double last_cost = chosen_cost;
  for (size_t i = sweep.chosen; i-- > 0 && rungs.size() < 4;) {
    if (t[i].cost_fraction > kStep * last_cost) continue;
    if (t[i].accuracy <= member_accuracy || t[i].cost_fraction <= member_cost) break;
    rungs.push_back(i);
    last_cost = t[i].cost_fraction;
  }
  return rungs;
}

std::string OverloadLadderYaml(const TrainConfig& config, const TrainReport& report,
                               const std::optional<CascadeVariant>& cascade) {
  if (config.ensemble.latency_target_ms <= 0 || report.members.empty()) return "";
  auto rung = [](const std::string& model, double accuracy, const std::string& threshold = "") {
    char text[32];
    std::snprintf(text, sizeof text, "accuracy: %.4f}\n", accuracy);
    return "    - {model: " + model + ", " + (threshold.empty() ? "" : "exit_threshold: " + threshold + ", ") + text;
  };
  char target[64];
  std::snprintf(target, sizeof target, "%g", config.ensemble.latency_target_ms);
  std::string yaml =
      "# Written by ensemble-train: past capacity the server keeps latency_target_ms by answering\n"
      "# from the cheaper rungs below (docs/overload.md); accuracies are the test set's (report.json).\n"
      "overload:\n  latency_target_ms: " + std::string(target) + "\n  ladder:\n";
  yaml += rung(config.ensemble.name, report.ensemble.scores.accuracy);
  size_t best = 0;
  for (size_t m = 1; m < report.members.size(); ++m) {
    if (report.members[m].scores.accuracy > report.members[best].scores.accuracy) best = m;
  }
  const double best_accuracy = report.members[best].scores.accuracy;
  if (cascade && report.cascade) {
    const CascadeSweep& sweep = *report.cascade;
    const double best_cost =
        best < sweep.costs.size() && sweep.full_cost > 0 ? sweep.costs[best] / sweep.full_cost : 0;
    for (size_t i : CascadeLadderThresholds(sweep, best_accuracy, best_cost)) {
      // The chosen threshold is the cascade's own (its config.yaml's).
      const std::string threshold = i == sweep.chosen ? "" : Threshold(sweep.thresholds[i].threshold);
      yaml += rung(cascade->name, sweep.thresholds[i].accuracy, threshold);
    }
  }
  return yaml + rung(report.members[best].name, best_accuracy);
}

namespace {

// A TorchScript model's folder: `folder/<version>/model.pt`, and its
// config.yaml when `yaml` is not empty.
Status WriteModelFolder(const fs::path& folder, int64_t version, torch::jit::Module module, const std::string& yaml) {
  const fs::path version_folder = folder / std::to_string(version);
  fs::create_directories(version_folder);
  module.eval();
  module.save((version_folder / "model.pt").string());
  return yaml.empty() ? Status::Ok() : WriteTextFile((folder / "config.yaml").string(), yaml);
}

// An ensemble's folder: its config.yaml.
Status WriteEnsembleFolder(const fs::path& folder, const std::string& yaml) {
  fs::create_directories(folder);
  return WriteTextFile((folder / "config.yaml").string(), yaml);
}

// WriteTrainedRepository's writes. std::filesystem and LibTorch (save) throw;
// the caller turns that into a Status.
Status WriteRepositoryFolders(const fs::path& dir, const TrainConfig& config, std::vector<torch::jit::Module>& modules,
                              const std::vector<std::string>& host_devices, const TrainedVariants& variants) {
  const int64_t max_batch = config.ensemble.max_batch_size;
  std::vector<std::string> names;
  for (size_t i = 0; i < modules.size(); ++i) {
    const std::string& name = config.members[i].name;
    names.push_back(name);
    fs::remove_all(dir / name);  // a stale version folder would be served as the latest
    ES_RETURN_IF_ERROR(WriteModelFolder(dir / name, 1, modules[i], MemberYaml(max_batch)));
  }
  for (const std::string& name : PackedFolderNames(config)) fs::remove_all(dir / name);
  if (variants.packed) {
    for (const PackedGroup& group : variants.packed->groups) {
      ES_RETURN_IF_ERROR(
          WriteModelFolder(dir / group.model, 1, group.module, PackedModelYaml(max_batch, group.members.size())));
    }
    ES_RETURN_IF_ERROR(WriteEnsembleFolder(dir / variants.packed->name, PackedEnsembleYaml(config, *variants.packed)));
  }
  const fs::path ensemble = dir / config.ensemble.name;
  fs::remove_all(ensemble);
  ES_RETURN_IF_ERROR(WriteEnsembleFolder(
      ensemble, ClassifierEnsembleYaml(max_batch, names, config.ensemble.combine) + variants.overload_yaml));
  const fs::path cascade = dir / CascadeVariantName(config.ensemble.name);
  fs::remove_all(cascade);
  if (variants.cascade) ES_RETURN_IF_ERROR(WriteEnsembleFolder(cascade, CascadeEnsembleYaml(max_batch, *variants.cascade)));
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

// Publishes one TorchScript model as its next version (a new model: its
// whole folder, with `yaml`, staged and renamed in; else just the version
// folder). Throws as WriteRepositoryFolders does.
Status PublishModel(const fs::path& repo, const fs::path& staging, const std::string& name,
                    const torch::jit::Module& module, const std::string& yaml, std::vector<std::string>* published) {
  const fs::path model_dir = repo / name;
  const bool exists = fs::exists(model_dir / "config.yaml");
  const int64_t version = exists ? HighestVersion(model_dir) + 1 : 1;
  const fs::path staged_model = staging / name;
  ES_RETURN_IF_ERROR(WriteModelFolder(staged_model, version, module, exists ? "" : yaml));
  if (exists) {
    fs::rename(staged_model / std::to_string(version), model_dir / std::to_string(version));
  } else {
    fs::rename(staged_model, model_dir);
  }
  published->push_back(name + ": version " + std::to_string(version));
  return Status::Ok();
}

// Publishes an ensemble's config.yaml unless the repository has one (the
// user's file, with their hosts or thresholds, wins): then `kept` is said.
Status PublishEnsemble(const fs::path& repo, const fs::path& staging, const std::string& name, const std::string& yaml,
                       const std::string& added, const std::string& kept, std::vector<std::string>* published) {
  if (fs::exists(repo / name / "config.yaml")) {
    published->push_back(name + ": " + kept);
    return Status::Ok();
  }
  ES_RETURN_IF_ERROR(WriteEnsembleFolder(staging / name, yaml));
  fs::rename(staging / name, repo / name);
  published->push_back(name + ": " + added);
  return Status::Ok();
}

// A packed model already in `repo` must compute as many members as this
// run's: its kept config.yaml declares the output's packed axis, and a new
// version of another size would fail every request. Checked before anything
// is published. Our own config.yaml says it as "dims: [M, 10]".
Status CheckPackedModelsFit(const fs::path& repo, const PackedVariant& packed) {
  for (const PackedGroup& group : packed.groups) {
    const fs::path config = repo / group.model / "config.yaml";
    if (!fs::exists(config)) continue;
    std::ifstream in(config);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string dims = "dims: [" + std::to_string(group.members.size()) + ", 10]";
    if (text.find(dims) == std::string::npos) {
      return Status::InvalidArgument(
          "the packed model " + group.model + " in the repository computes another number of members than this "
          "run's " + std::to_string(group.members.size()) + " (its config.yaml has no '" + dims +
          "'): remove its folder (and " + packed.name + "'s) to publish it anew, or publish with --no-pack");
    }
  }
  return Status::Ok();
}

// PublishTrained's steps, staged under `staging`; appends one line per
// folder to `published`. Throws as WriteRepositoryFolders does.
Status PublishThroughStaging(const fs::path& repo, const fs::path& staging, const TrainConfig& config,
                             std::vector<torch::jit::Module>& modules, const TrainedVariants& variants,
                             std::vector<std::string>* published) {
  const int64_t max_batch = config.ensemble.max_batch_size;
  if (variants.packed) ES_RETURN_IF_ERROR(CheckPackedModelsFit(repo, *variants.packed));
  fs::remove_all(staging);
  fs::create_directories(staging);
  std::vector<std::string> names;
  for (size_t i = 0; i < modules.size(); ++i) {
    names.push_back(config.members[i].name);
    ES_RETURN_IF_ERROR(PublishModel(repo, staging, names.back(), modules[i], MemberYaml(max_batch), published));
  }
  if (variants.packed) {
    for (const PackedGroup& group : variants.packed->groups) {
      ES_RETURN_IF_ERROR(PublishModel(repo, staging, group.model, group.module,
                                      PackedModelYaml(max_batch, group.members.size()), published));
    }
    ES_RETURN_IF_ERROR(PublishEnsemble(repo, staging, variants.packed->name,
                                       PackedEnsembleYaml(config, *variants.packed), "new packed ensemble",
                                       "config.yaml kept (it follows its models' newest versions)", published));
  }
  // The cascade variant before the ensemble: the ensemble's overload ladder
  // names it, and a polling server must find it when it loads the ladder.
  if (variants.cascade) {
    const CascadeVariant& cascade = *variants.cascade;
    const std::string chose =
        "exit_threshold " + Threshold(cascade.exit_threshold) + ", stages " + StagesText(cascade.stages);
    ES_RETURN_IF_ERROR(PublishEnsemble(repo, staging, cascade.name, CascadeEnsembleYaml(max_batch, cascade),
                                       "new cascade (" + chose + ")",
                                       "config.yaml kept; this run's sweep chose " + chose, published));
  }
  return PublishEnsemble(repo, staging, config.ensemble.name,
                         ClassifierEnsembleYaml(max_batch, names, config.ensemble.combine) + variants.overload_yaml,
                         "new ensemble", "config.yaml kept (it follows its members' newest versions)", published);
}

}  // namespace

Status WriteTrainedRepository(const std::string& dir, const TrainConfig& config,
                              std::vector<torch::jit::Module>& modules, const std::vector<std::string>& host_devices,
                              const TrainedVariants& variants) {
  Status status;
  try {
    status = WriteRepositoryFolders(dir, config, modules, host_devices, variants);
  } catch (const std::exception& e) {
    status = Status::Internal(e.what());
  }
  if (status.ok()) return status;
  return Status(status.code(), "writing the model repository " + dir + ": " + status.message());
}

std::string WithExperimentSection(const std::string& config_yaml, const std::string& section) {
  std::istringstream in(config_yaml);
  std::string out;
  bool skipping = false;
  for (std::string line; std::getline(in, line);) {
    // A top-level key starts in column 0; the section's own lines are indented.
    const bool top_level = !line.empty() && line[0] != ' ' && line[0] != '\t' && line[0] != '#';
    if (top_level) skipping = line.rfind("experiment:", 0) == 0;
    if (skipping) continue;
    out += line;
    out += '\n';
  }
  return out + section;
}

StatusOr<std::vector<std::string>> PublishAsCandidate(const std::string& repo, const TrainConfig& config,
                                                      std::vector<torch::jit::Module>& modules, double percent) {
  const fs::path root(repo);
  const std::string& serving = config.ensemble.name;
  const fs::path serving_config = root / serving / "config.yaml";
  if (!fs::exists(serving_config)) {
    return Status::NotFound("--shadow: no ensemble '" + serving + "' serves in " + repo +
                            " to shadow (publish without --shadow first)");
  }
  int run = 2;
  while (fs::exists(root / (serving + "_r" + std::to_string(run)))) ++run;
  const std::string suffix = "_r" + std::to_string(run);
  TrainConfig renamed = config;
  renamed.ensemble.name += suffix;
  for (MemberSpec& member : renamed.members) member.name += suffix;
  for (const MemberSpec& member : renamed.members) {
    if (fs::exists(root / member.name)) {
      return Status(StatusCode::kAlreadyExists, "--shadow: " + (root / member.name).string() +
                                   " exists already; the candidate's members would overwrite it");
    }
  }
  ES_ASSIGN_OR_RETURN(std::vector<std::string> published, PublishTrained(repo, renamed, modules));
  std::ifstream in(serving_config);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ostringstream section;
  section << "experiment:\n  candidate: " << renamed.ensemble.name << "\n  mode: shadow\n  percent: " << percent
          << "\n  gate: {min_compared: 1000, min_agreement: 0.97}\n";
  const fs::path temporary = root / serving / (".config.yaml." + std::to_string(getpid()));
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << WithExperimentSection(text, section.str());
    out.close();
    if (!out) return Status::Internal(temporary.string() + ": cannot write");
  }
  std::error_code ec;
  fs::rename(temporary, serving_config, ec);
  if (ec) return Status::Internal(serving_config.string() + ": cannot replace: " + ec.message());
  std::ostringstream line;
  line << serving << ": experiment: shadow candidate " << renamed.ensemble.name << " at " << percent << "%";
  published.push_back(line.str());
  return published;
}

StatusOr<std::vector<std::string>> PublishTrained(const std::string& repo, const TrainConfig& config,
                                                  std::vector<torch::jit::Module>& modules,
                                                  const TrainedVariants& variants) {
  const fs::path staging = fs::path(repo) / (".publish-" + std::to_string(getpid()));
  std::vector<std::string> published;
  Status status;
  try {
    status = PublishThroughStaging(repo, staging, config, modules, variants, &published);
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
  std::string text = "\nCascade (" + variant->name + "), stages with forward time per row:";
  char line[256];
  for (size_t s = 0; s < sweep.stages.size(); ++s) {
    text += s == 0 ? " [" : ", [";
    for (size_t i = 0; i < sweep.stages[s].size(); ++i) {
      const size_t m = sweep.stages[s][i];
      std::snprintf(line, sizeof(line), "%s%s %.1f us", i == 0 ? "" : ", ", report.members[m].name.c_str(),
                    1e6 * sweep.costs[m]);
      text += line;
    }
    text += "]";
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

// report.json's "packed".
nlohmann::json PackedJson(const TrainReport& report) {
  nlohmann::json json;
  json["variant"] = report.packed_variant;
  for (const auto& [model, members] : report.packed_models) json["models"][model] = members;
  json["max_abs_difference_vs_members"] = report.packed->max_abs_difference;
  json["time_unit"] = "microseconds of forward time per row (median over the evaluation's batches, rank 0)";
  json["packed_time"] = 1e6 * report.packed->seconds_per_row;
  json["members_time"] = 1e6 * report.members_seconds_per_row;
  return json;
}

std::string FormatPacked(const TrainReport& report) {
  if (!report.packed) return "";
  std::string models;
  for (const auto& [model, members] : report.packed_models) {
    models.append(models.empty() ? "" : ", ").append(model).append(" (" + std::to_string(members.size()) + " members)");
  }
  char line[256];
  std::snprintf(line, sizeof(line),
                "answers within %.2g of the members'; forward %.1f us per row (the members on their own: %.1f us)\n",
                report.packed->max_abs_difference, 1e6 * report.packed->seconds_per_row,
                1e6 * report.members_seconds_per_row);
  return "\nPacked (" + report.packed_variant + "): " + models + "\n" + line;
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
  const std::vector<std::vector<size_t>> stages =
      config.ensemble.cascade_stages == "per_member" ? StagesCheapestFirst(costs) : StagesCheapestThenRest(costs);
  StatusOr<CascadeSweep> sweep =
      SweepCascade(evaluation.members, labels, costs, stages, DefaultCascadeThresholds(), kCascadeTolerancePoints);
  if (sweep.ok()) {
    report.cascade = std::move(sweep).value();
  } else {
    report.cascade_error = sweep.status().message();
  }
  return report;
}

void AddPackedCheck(const PackedVariant& variant, const PackedCheck& check, const Evaluation& evaluation,
                    TrainReport* report) {
  report->packed_variant = variant.name;
  report->packed_models.clear();
  report->members_seconds_per_row = 0;
  for (const PackedGroup& group : variant.groups) {
    std::vector<std::string> members;
    for (size_t m : group.members) {
      members.push_back(m < report->members.size() ? report->members[m].name : std::to_string(m));
      if (m < evaluation.member_seconds_per_row.size()) {
        report->members_seconds_per_row += evaluation.member_seconds_per_row[m];
      }
    }
    report->packed_models.emplace_back(group.model, std::move(members));
  }
  report->packed = check;
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
    if (report.packed) json["packed"] = PackedJson(report);
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
  return text + FormatPacked(report);
}

}  // namespace es
