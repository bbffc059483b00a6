// ensemble-make-demo: writes the demo model repository (three zoo members,
// briefly trained on Fashion-MNIST, and the ensemble over them), so the
// server has something meaningful to serve before anything has been trained
// with ensemble-train.
//
//   ensemble-make-demo --out DIR [--seed N] [--force] [--max-batch-size N] [--hosts A,B]
//                      [--train-steps N] [--data DIR]
//
// --train-steps 0 writes untrained members (seconds faster; what tests that
// only need some model use).
//
// Exit codes: 0 written, 1 could not write (or DIR not empty without
// --force), 2 usage error.
#include <torch/script.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "common/allocator.h"
#include "common/command_line.h"
#include "common/status.h"
#include "common/steady_clock.h"
#include "torch_utils/blas_kernels.h"
#include "torch_utils/model_zoo.h"
#include "torch_utils/served_config.h"
#include "training/demo/demo_training.h"
#include "training/fashion_mnist.h"

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
  int64_t train_steps = 300;  // per member; 0 = untrained
  std::string data = es::kDebianFashionMnistDir;
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
es::Status WriteRepository(const fs::path& out, const DemoOptions& options, const es::Dataset* train,
                           const es::Dataset* test) {
  for (size_t i = 0; i < std::size(kMembers); ++i) {
    const DemoMember& member = kMembers[i];
    const std::string& host = options.hosts[member.host % options.hosts.size()];
    const fs::path dir = out / member.name;
    // Members differ by seed as well as by architecture.
    ES_ASSIGN_OR_RETURN(torch::jit::Module module, es::BuildZooModel(member.name, options.seed + i));
    if (train != nullptr) {
      const es::SteadyClock::time_point start = es::SteadyClock::now();
      es::TrainDemoMember(module, *train, options.train_steps, options.seed + i);
      const double seconds = es::SecondsSince(start);
      std::cout << "trained " << member.name << ": " << options.train_steps << " steps in " << std::fixed
                << std::setprecision(1) << seconds << " s, test accuracy " << 100 * es::DemoAccuracy(module, *test, 2000)
                << "% (first 2000 test images)\n"
                << std::flush;
    }
    fs::remove_all(dir);
    fs::create_directories(dir / "1");
    module.save((dir / "1" / "model.pt").string());
    ES_RETURN_IF_ERROR(es::WriteTextFile((dir / "config.yaml").string(),
                                         es::ClassifierMemberYaml(options.max_batch_size, {host})));
    std::cout << "wrote " << member.name << " (version 1, host " << host << ") to "
              << dir.string() << "\n";
  }
  const fs::path dir = out / kEnsembleName;
  fs::remove_all(dir);
  fs::create_directories(dir);
  ES_RETURN_IF_ERROR(es::WriteTextFile((dir / "config.yaml").string(),
                                       es::ClassifierEnsembleYaml(options.max_batch_size, MemberNames(), "mean")));
  std::cout << "wrote " << kEnsembleName << " (ensemble of mlp, wide_mlp, cnn) to " << dir.string()
            << "\n";
  return es::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  es::ConfigureAllocator();  // keeps freed tensor memory (allocator.h); before threads of its own
  CLI::App app{"Writes the demo model repository: mlp, wide_mlp, cnn (briefly trained on Fashion-MNIST) and "
               "demo_ensemble."};
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
  app.add_option("--train-steps", options.train_steps,
                 "training steps per member on Fashion-MNIST (batches of 64, Adam); 0 writes untrained members")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}))
      ->capture_default_str();
  app.add_option("--data", options.data, "the Fashion-MNIST folder (Debian's dataset-fashion-mnist)")
      ->capture_default_str();
  app.add_option("--hosts", options.hosts,
                 "Host names the members are placed on: mlp and wide_mlp on the first, cnn on the "
                 "second (default cpu0,cpu1, as config/demo.yaml names them)")
      ->delimiter(',');
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "ensemble-make-demo")) {
    return *exit_code;
  }
  es::UseTheCpusBlasKernels(argv);  // it trains: the CPU's own kernels (blas_kernels.h)

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
    std::optional<es::Dataset> train, test;
    if (options.train_steps > 0) {
      for (auto [split, into] : {std::pair{es::DataSplit::kTrain, &train}, std::pair{es::DataSplit::kTest, &test}}) {
        es::StatusOr<es::Dataset> data = es::LoadFashionMnist(options.data, split);
        if (!data.ok()) {
          std::cerr << "ensemble-make-demo: " << data.status().message()
                    << " (install dataset-fashion-mnist, give --data, or --train-steps 0 for untrained members)\n";
          return 1;
        }
        *into = std::move(data).value();
      }
    }
    const es::Status written = WriteRepository(dir, options, train ? &*train : nullptr, test ? &*test : nullptr);
    if (!written.ok()) {
      std::cerr << "ensemble-make-demo: " << written.message() << "\n";
      return 1;
    }
  } catch (const c10::Error& e) {
    std::cerr << "ensemble-make-demo: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ensemble-make-demo: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
