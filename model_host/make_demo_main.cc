// ensemble-make-demo: writes the demo model repository (three untrained zoo
// members and the ensemble over them), so the server has something to serve
// before anything has been trained.
//
//   ensemble-make-demo --out DIR [--seed N] [--force]
//
// Exit codes: 0 written, 1 could not write (or DIR not empty without
// --force), 2 usage error.
#include <torch/script.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "model_host/model_zoo.h"

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

constexpr const char* kTensorsYaml =
    "max_batch_size: 64\n"
    "inputs:\n"
    "  - {name: input, datatype: FP32, dims: [1, 28, 28]}\n"
    "outputs:\n"
    "  - {name: probabilities, datatype: FP32, dims: [10]}\n";

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string MemberConfig(const DemoMember& member) {
  return std::string("platform: torchscript\n") + kTensorsYaml + "hosts: [" + member.host + "]\n";
}

std::string EnsembleConfig() {
  std::string yaml = std::string("platform: ensemble\n") + kTensorsYaml +
                     "ensemble:\n"
                     "  combine: mean\n"
                     "  members:\n";
  for (const DemoMember& member : kMembers)
    yaml += std::string("    - {model: ") + member.name + "}\n";
  return yaml;
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
    WriteFile(dir / "config.yaml", MemberConfig(member));
    std::cout << "wrote " << member.name << " (version 1, host " << member.host << ") to "
              << dir.string() << "\n";
  }
  const fs::path dir = out / kEnsembleName;
  fs::remove_all(dir);
  fs::create_directories(dir);
  WriteFile(dir / "config.yaml", EnsembleConfig());
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the one-line error and the --help hint
    return 2;
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
