// ensemble-make-demo: writes the demo model repository (three untrained zoo
// members and the ensemble over them), so the server has something to serve
// before anything has been trained.
//
//   ensemble-make-demo --out DIR [--seed N] [--force]
//
// Exit codes: 0 written, 1 could not write (or DIR not empty without
// --force), 2 usage error.
#include <torch/script.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "config/command_line.h"
#include "model_host/model_zoo.h"
#include "model_host/served_config.h"

namespace {

namespace fs = std::filesystem;

struct DemoMember {
  const char* name;  // model name = zoo architecture
  const char* host;  // placement in the demo server config
};

// mlp and wide_mlp share cpu0 and cnn has cpu1, so the demo ensemble fans out
// over two hosts.
constexpr DemoMember kMembers[] = {{"mlp", "cpu0"}, {"wide_mlp", "cpu0"}, {"cnn", "cpu1"}};
constexpr const char* kEnsembleName = "demo_ensemble";

constexpr int64_t kMaxBatchSize = 64;

std::vector<std::string> MemberNames() {
  std::vector<std::string> names;
  for (const DemoMember& member : kMembers) names.emplace_back(member.name);
  return names;
}

bool IsNonEmptyDirectory(const fs::path& dir) {
  return fs::is_directory(dir) && fs::directory_iterator(dir) != fs::directory_iterator();
}

// Writes the repository. With --force only the folders this tool owns are
// replaced: a stale version folder left inside one would otherwise be served
// as the latest version.
void WriteRepository(const fs::path& out, uint64_t seed) {
  for (size_t i = 0; i < std::size(kMembers); ++i) {
    const DemoMember& member = kMembers[i];
    const fs::path dir = out / member.name;
    fs::remove_all(dir);
    fs::create_directories(dir / "1");
    // Members differ by seed as well as by architecture, as trained ones will.
    es::BuildZooModel(member.name, seed + i).save((dir / "1" / "model.pt").string());
    es::WriteTextFile((dir / "config.yaml").string(),
                      es::ClassifierMemberYaml(kMaxBatchSize, {member.host}));
    std::cout << "wrote " << member.name << " (version 1, host " << member.host << ") to "
              << dir.string() << "\n";
  }
  const fs::path dir = out / kEnsembleName;
  fs::remove_all(dir);
  fs::create_directories(dir);
  es::WriteTextFile((dir / "config.yaml").string(),
                    es::ClassifierEnsembleYaml(kMaxBatchSize, MemberNames(), "mean"));
  std::cout << "wrote " << kEnsembleName << " (ensemble of mlp, wide_mlp, cnn) to " << dir.string()
            << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes the demo model repository: mlp, wide_mlp, cnn and demo_ensemble."};
  std::string out;
  uint64_t seed = 1;
  bool force = false;
  app.add_option("--out", out, "Repository directory to write")->required();
  app.add_option("--seed", seed, "Seed of the first member's weights (members use seed+i)")
      ->capture_default_str();
  app.add_flag("--force", force, "Write into DIR even if it is not empty");
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "ensemble-make-demo")) {
    return *exit_code;
  }

  const fs::path dir(out);
  try {
    if (IsNonEmptyDirectory(dir) && !force) {
      std::cerr << "ensemble-make-demo: " << out
                << " exists and is not empty; pass --force to overwrite the demo models in it\n";
      return 1;
    }
    WriteRepository(dir, seed);
  } catch (const c10::Error& e) {
    std::cerr << "ensemble-make-demo: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ensemble-make-demo: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
