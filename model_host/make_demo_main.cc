// ensemble-make-demo: writes the demo model repository (three untrained zoo
// members and the ensemble over them), so the server has something to serve
// before anything has been trained.
//
//   ensemble-make-demo --out DIR [--seed N] [--force] [--max-batch-size N] [--hosts A,B]
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

#include "common/command_line.h"
#include "model_host/model_zoo.h"
#include "model_host/served_config.h"

namespace {

namespace fs = std::filesystem;

struct DemoMember {
  const char* name;  // model name = zoo architecture
  size_t host;       // placement: index into the host names (config/demo.yaml's cpu0, cpu1)
};

// mlp and wide_mlp share the first host and cnn has the second, so the demo
// ensemble fans out over two hosts.
constexpr DemoMember kMembers[] = {{"mlp", 0}, {"wide_mlp", 0}, {"cnn", 1}};
constexpr const char* kEnsembleName = "demo_ensemble";

struct DemoOptions {
  uint64_t seed = 1;
  int64_t max_batch_size = 64;
  std::vector<std::string> hosts{"cpu0", "cpu1"};  // one host serves all when only one is named
};

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
void WriteRepository(const fs::path& out, const DemoOptions& options) {
  for (size_t i = 0; i < std::size(kMembers); ++i) {
    const DemoMember& member = kMembers[i];
    const std::string& host = options.hosts[member.host % options.hosts.size()];
    const fs::path dir = out / member.name;
    fs::remove_all(dir);
    fs::create_directories(dir / "1");
    // Members differ by seed as well as by architecture, as trained ones will.
    es::BuildZooModel(member.name, options.seed + i).save((dir / "1" / "model.pt").string());
    es::WriteTextFile((dir / "config.yaml").string(),
                      es::ClassifierMemberYaml(options.max_batch_size, {host}));
    std::cout << "wrote " << member.name << " (version 1, host " << host << ") to "
              << dir.string() << "\n";
  }
  const fs::path dir = out / kEnsembleName;
  fs::remove_all(dir);
  fs::create_directories(dir);
  es::WriteTextFile((dir / "config.yaml").string(),
                    es::ClassifierEnsembleYaml(options.max_batch_size, MemberNames(), "mean"));
  std::cout << "wrote " << kEnsembleName << " (ensemble of mlp, wide_mlp, cnn) to " << dir.string()
            << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes the demo model repository: mlp, wide_mlp, cnn and demo_ensemble."};
  std::string out;
  DemoOptions options;
  bool force = false;
  app.add_option("--out", out, "Repository directory to write")->required();
  app.add_option("--seed", options.seed, "Seed of the first member's weights (members use seed+i)")
      ->capture_default_str();
  app.add_flag("--force", force, "Write into DIR even if it is not empty");
  app.add_option("--max-batch-size", options.max_batch_size, "max_batch_size of every model")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--hosts", options.hosts,
                 "Host names the members are placed on: mlp and wide_mlp on the first, cnn on the "
                 "second (default cpu0,cpu1, as config/demo.yaml names them)")
      ->delimiter(',');
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "ensemble-make-demo")) {
    return *exit_code;
  }

  if (options.hosts.empty() || options.hosts.front().empty()) {
    std::cerr << "ensemble-make-demo: --hosts needs at least one host name\n";
    return 2;
  }
  const fs::path dir(out);
  try {
    if (IsNonEmptyDirectory(dir) && !force) {
      std::cerr << "ensemble-make-demo: " << out
                << " exists and is not empty; pass --force to overwrite the demo models in it\n";
      return 1;
    }
    WriteRepository(dir, options);
  } catch (const c10::Error& e) {
    std::cerr << "ensemble-make-demo: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ensemble-make-demo: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
