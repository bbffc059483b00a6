#include "model_host/training/trained_repository.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model_host/served_config.h"

namespace es {
namespace fs = std::filesystem;
namespace {

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

void WriteJson(const fs::path& path, const nlohmann::json& json) { WriteTextFile(path.string(), json.dump(2) + "\n"); }

}  // namespace

Status WriteTrainedRepository(const std::string& dir, const TrainConfig& config,
                              std::vector<torch::jit::Module>& modules, const std::vector<std::string>& host_devices) {
  try {
    std::vector<std::string> names;
    for (size_t i = 0; i < modules.size(); ++i) {
      const std::string& name = config.members[i].name;
      names.push_back(name);
      const fs::path folder = fs::path(dir) / name;
      fs::remove_all(folder);  // a stale version folder would be served as the latest
      fs::create_directories(folder / "1");
      modules[i].eval();
      modules[i].save((folder / "1" / "model.pt").string());
      WriteTextFile((folder / "config.yaml").string(), ClassifierMemberYaml(config.ensemble.max_batch_size, {}));
    }
    const fs::path ensemble = fs::path(dir) / config.ensemble.name;
    fs::remove_all(ensemble);
    fs::create_directories(ensemble);
    WriteTextFile((ensemble / "config.yaml").string(),
                  ClassifierEnsembleYaml(config.ensemble.max_batch_size, names, config.ensemble.combine));
    WriteTextFile((fs::path(dir) / "server.yaml").string(), ServerYaml(host_devices));
  } catch (const std::exception& e) {
    return Status::Internal("writing the model repository " + dir + ": " + e.what());
  }
  return Status::Ok();
}

namespace {

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

}  // namespace

StatusOr<std::vector<std::string>> PublishTrained(const std::string& repo, const TrainConfig& config,
                                                  std::vector<torch::jit::Module>& modules) {
  const fs::path staging = fs::path(repo) / (".publish-" + std::to_string(getpid()));
  std::vector<std::string> published;
  try {
    fs::remove_all(staging);
    fs::create_directories(staging);
    std::vector<std::string> names;
    for (size_t i = 0; i < modules.size(); ++i) {
      const std::string& name = config.members[i].name;
      names.push_back(name);
      const fs::path model_dir = fs::path(repo) / name;
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
        WriteTextFile((staged_model / "config.yaml").string(),
                      ClassifierMemberYaml(config.ensemble.max_batch_size, {}));
        fs::rename(staged_model, model_dir);
      }
      published.push_back(name + ": version " + std::to_string(version));
    }
    const fs::path ensemble = fs::path(repo) / config.ensemble.name;
    if (!fs::exists(ensemble / "config.yaml")) {
      const fs::path staged = staging / config.ensemble.name;
      fs::create_directories(staged);
      WriteTextFile((staged / "config.yaml").string(),
                    ClassifierEnsembleYaml(config.ensemble.max_batch_size, names, config.ensemble.combine));
      fs::rename(staged, ensemble);
      published.push_back(config.ensemble.name + ": new ensemble");
    } else {
      published.push_back(config.ensemble.name + ": config.yaml kept (it follows its members' newest versions)");
    }
    fs::remove_all(staging);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove_all(staging, ec);
    return Status::Internal("publishing into the model repository " + repo + ": " + e.what());
  }
  return published;
}

TrainReport ScoreEvaluation(const TrainConfig& config, const Evaluation& evaluation, const at::Tensor& labels) {
  TrainReport report;
  for (size_t i = 0; i < evaluation.members.size(); ++i) {
    report.members.push_back({config.members[i].name, ScoreClassifier(evaluation.members[i], labels)});
  }
  report.ensemble = {config.ensemble.name, ScoreClassifier(evaluation.ensemble, labels)};
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
    for (const ScoredModel& member : report.members) {
      json["members"][member.name] = ScoresJson(member.scores);
    }
    json["ensemble"] = ScoresJson(report.ensemble.scores);
    json["ensemble"]["name"] = report.ensemble.name;
    WriteJson(fs::path(dir) / "report.json", json);

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
    WriteJson(fs::path(dir) / "eval_samples.json", samples);
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
  return text;
}

}  // namespace es
