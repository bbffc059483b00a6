// ensemble-train: trains the members of an ensemble, one process per device,
// and writes a model repository that ensemble-server serves as it is.
//
//   ensemble-train --config config/train-fashion-mnist.yaml --devices cpu:2 --out trained
//
// Without torchrun's variables it launches its own ranks (local_launcher.h),
// this machine's share of a several-machine run with --nnodes/--node-rank
// (NNODES/NODE_RANK); with RANK etc. (under torchrun or a scheduler) it is
// that one rank (rank_runner.h). Exit codes: 0 trained, 1 failed, 2 usage or config error.
#include <spdlog/spdlog.h>

#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "common/allocator.h"
#include "common/command_line.h"
#include "torch_utils/blas_kernels.h"
#include "training/local_launcher.h"
#include "training/process_group.h"
#include "training/rank_runner.h"
#include "training/train_config.h"
#include "training/train_options.h"

namespace {

namespace fs = std::filesystem;

// A previous run's checkpoint in --out is continued (--resume), replaced
// (--force), or protected: a typo in --out must not wipe a day of training.
// Checked by the launcher and by every rank started by someone else
// (torchrun); only `may_remove` (the launcher, or rank 0) removes.
bool CheckOutputFolder(const es::TrainOptions& options, bool may_remove) {
  std::error_code ec;
  const std::string checkpoint = es::CheckpointPath(options.out);
  const bool has_checkpoint = fs::exists(checkpoint, ec);
  if (ec) {
    std::cerr << "ensemble-train: cannot look at " << checkpoint << ": " << ec.message() << "\n";
    return false;
  }
  if (options.resume && !has_checkpoint) {
    std::cerr << "ensemble-train: --resume: no checkpoint at " << checkpoint << "\n";
    return false;
  }
  if (!options.resume && !options.force && has_checkpoint) {
    std::cerr << "ensemble-train: " << options.out << " holds a previous run (" << checkpoint
              << "); pass --resume to continue it, --force to start over, or another --out\n";
    return false;
  }
  if (options.force && may_remove && has_checkpoint && !fs::remove(checkpoint, ec)) {
    std::cerr << "ensemble-train: --force: cannot remove " << checkpoint << ": " << ec.message()
              << "\n";
    return false;
  }
  return true;
}

// The command line's flags, each writing into `options`.
void AddFlags(CLI::App* app, es::TrainOptions* options) {
  app->add_option("--config", options->config_path, "Training config (YAML)")
      ->required()
      ->check(CLI::ExistingFile);
  app->add_option("--devices", options->devices,
                  "cpu:N (N ranks, each pinned to its own CPUs) or cuda:I,J,... (one rank per GPU)")
      ->capture_default_str();
  app->add_option("--epochs", options->epochs, "Epochs (overrides the config)")
      ->check(CLI::Range(1, 100000));
  app->add_option("--out", options->out, "Output model repository folder")->capture_default_str();
  CLI::Option* publish = app->add_option("--publish", options->publish,
                  "After training, also write the members and the ensemble into this existing model repository "
                  "as their next versions, atomically (for a server in poll mode to roll them in; "
                  "docs/lifecycle.md)")
      ->check(CLI::ExistingDirectory);
  app->add_option("--shadow", options->shadow_percent,
                  "With --publish: publish the run beside the ensemble serving there, as new models (<name>_r<N>), "
                  "and make it that ensemble's shadow candidate at this percent of its requests (its config.yaml's "
                  "experiment: section; docs/experiments.md)")
      ->check(CLI::Range(0.0, 100.0))
      ->needs(publish);
  CLI::Option* resume =
      app->add_flag("--resume", options->resume, "Continue the run whose checkpoint is in --out");
  app->add_flag("--force", options->force, "Start over even if --out holds a previous run")
      ->excludes(resume);
  app->add_flag("--no-pack", options->no_pack,
                "Write no packed variant (<ensemble>_packed: members of one architecture served as one model)");
  app->add_flag("--pack-training", options->pack_training,
                "Train the members of one architecture packed: one forward and backward for all (the same "
                "trajectory; slower on a CPU, docs/training.md)");
  app->add_option("--max-steps", options->max_steps,
                  "Stop after this many steps in all (a checkpoint is written; --resume continues)")
      ->check(CLI::Range(int64_t{1}, INT64_MAX));
  app->add_option("--metrics-port", options->metrics_port,
                  "Prometheus /metrics of rank r on PORT + local rank (0: free ports; default: off)")
      ->check(CLI::Range(0, 65535));
  app->add_option("--metrics-address", options->metrics_address, "Address /metrics listens on")
      ->capture_default_str();
  app->add_option("--progress-every", options->progress_every_s,
                  "Seconds between progress log lines when stderr is not a terminal (on a terminal one line is "
                  "redrawn every second)")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  // Several machines, spelled as torchrun's flags; the variables are what
  // a job script or Slurm (via srun's SLURM_* variables) sets.
  app->add_option("--nnodes", options->nnodes,
                  "Machines in the run; this process launches this machine's ranks (one per --devices entry)")
      ->envname("NNODES")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app->add_option("--node-rank", options->node_rank, "This machine's index in [0, --nnodes); node 0 hosts the store")
      ->envname("NODE_RANK")
      ->check(CLI::Range(0, 4095))
      ->capture_default_str();
  app->add_option("--master-addr", options->master_addr,
                  "Node 0's address as every machine reaches it (needed with --nnodes > 1)")
      ->envname("MASTER_ADDR");
  app->add_option("--master-port", options->master_port, "The store's port on node 0")
      ->envname("MASTER_PORT")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  app->add_option("--log-level", options->log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
}

int Run(int argc, char** argv) {
  es::ConfigureAllocator();  // before this program starts threads of its own
  CLI::App app{"Trains an ensemble's members (one process per device, c10d all-reduce) and "
               "writes a model repository that ensemble-server serves as it is."};
  es::TrainOptions options;
  AddFlags(&app, &options);
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "ensemble-train")) {
    return *exit_code;
  }
  // After the flags (a bad one is then one line), before the first BLAS
  // call; the process may run again from the top (blas_kernels.h).
  es::UseTheCpusBlasKernels(argv);

  es::StatusOr<es::TrainConfig> config = es::LoadTrainConfig(options.config_path);
  if (!config.ok()) {
    std::cerr << "ensemble-train: " << config.status().message() << "\n";
    return 2;
  }
  if (options.epochs > 0) config->optim.epochs = options.epochs;
  if (options.no_pack) config->ensemble.pack = false;
  if (options.pack_training) config->ensemble.pack_training = true;
  es::StatusOr<std::vector<std::string>> devices = es::ParseDevices(options.devices);
  if (!devices.ok()) {
    std::cerr << "ensemble-train: " << devices.status().message() << "\n";
    return 2;
  }
  for (std::string* path : {&options.out, &options.publish}) {
    if (path->empty()) continue;
    std::error_code ec;
    const fs::path absolute = fs::absolute(*path, ec);
    if (ec) {
      std::cerr << "ensemble-train: " << *path << ": " << ec.message() << "\n";
      return 2;
    }
    *path = absolute.lexically_normal().string();
  }

  es::StatusOr<std::optional<es::RankEnv>> env = es::RankEnvFromEnvironment();
  if (!env.ok()) {
    std::cerr << "ensemble-train: " << env.status().message() << "\n";
    return 2;
  }
  if (!env->has_value()) {
    if (options.node_rank >= options.nnodes) {
      std::cerr << "ensemble-train: --node-rank (NODE_RANK) " << options.node_rank << " is not below --nnodes (NNODES) "
                << options.nnodes << "\n";
      return 2;
    }
    if (options.nnodes > 1 && options.master_addr.empty()) {
      std::cerr << "ensemble-train: --nnodes " << options.nnodes
                << " needs --master-addr (MASTER_ADDR): node 0's address as every machine reaches it\n";
      return 2;
    }
  }
  // Every rank takes an equal share of each global batch.
  const int world = env->has_value() ? (*env)->world_size : options.nnodes * static_cast<int>(devices->size());
  if (config->optim.batch_size % world != 0) {
    std::cerr << "ensemble-train: " << options.config_path << ": training.batch_size "
              << config->optim.batch_size << " does not split evenly over " << world
              << " ranks\n";
    return 2;
  }
  if (env->has_value()) {
    if (!CheckOutputFolder(options, /*may_remove=*/(*env)->rank == 0)) return 2;
    return es::RunRank(options, *config, **env);
  }

  // The launcher: checks the output folder once, then starts the ranks.
  // Only global rank 0 writes in --out (checkpoints, the repository), so
  // with several machines sharing it only node 0 removes anything there.
  if (!CheckOutputFolder(options, /*may_remove=*/options.node_rank == 0)) return 2;
  std::error_code ec;
  fs::create_directories(options.out, ec);
  if (ec) {
    std::cerr << "ensemble-train: cannot create " << options.out << ": " << ec.message() << "\n";
    return 1;
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  return es::LaunchLocalRanks(options, *config, args);
}

}  // namespace

int main(int argc, char** argv) {
  // Errors are values across our APIs; what escapes anyway (LibTorch's, the
  // standard library's) ends the command with its message, not an abort.
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "ensemble-train: " << e.what() << "\n";
    return 1;
  }
}
