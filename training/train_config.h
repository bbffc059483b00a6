// TrainConfig: the YAML file of ensemble-train (e.g. config/train-fashion-mnist.yaml),
// loaded and validated as one unit before any process is spawned.
//
// Errors read "<file>:<line>: <field>: <problem>", as the server's config
// errors do (the same reader, config/yaml_reader.h); unknown keys are errors.
// Command-line flags (--epochs, --out) override fields after loading.
//
// Thread safety: a pure function returning a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "training/augmentation.h"

namespace es {

// One ensemble member: a zoo architecture (torch_utils/model_zoo.h) or a
// TorchScript file with initial weights that defines logits(x) and forward(x).
struct MemberSpec {
  std::string name;          // model name in the output repository
  std::string architecture;  // zoo name, or empty when `torchscript` is set
  std::string torchscript;   // absolute path of the initial module, or empty
  uint64_t seed = 0;         // initial weights of a zoo member
};

struct DataSpec {
  std::string dataset = "fashion-mnist";  // or "synthetic"
  std::string path = "/usr/share/datasets/fashion-mnist";
  int64_t synthetic_train_rows = 4096;
  int64_t synthetic_test_rows = 1024;
  int loader_threads = 1;    // background threads gathering batches
  int prefetch_batches = 4;  // batches queued ahead of the training step
  Augmentation augment;      // `augment: {shift: 2, flip: true}`; none by default
};

struct OptimSpec {
  int epochs = 1;
  int64_t batch_size = 64;          // global: rows per step over all ranks
  std::string optimizer = "adam";   // adam or sgd (momentum 0.9)
  double learning_rate = 1e-3;      // peak rate of the schedule
  std::string schedule = "one_cycle";  // one_cycle or constant
  double weight_decay = 0.0;
  uint64_t seed = 1;                // data order
};

struct DistributedSpec {
  double bucket_mb = 25.0;               // gradients all-reduced in buckets of about this size
  int64_t collective_timeout_ms = 30000;  // a collective (or rendezvous) stuck this long fails
};

struct CheckpointSpec {
  int64_t every_steps = 500;  // 0: only at the end of each epoch
};

// The ensemble model the run writes beside its members (the server's own
// es::EnsembleSpec, config/model_config.h, is what that config.yaml becomes
// when served).
struct TrainedEnsembleSpec {
  std::string name = "ensemble";
  std::string combine = "mean";  // mean or majority_vote (weights are not learned)
  int64_t max_batch_size = 64;    // of the served models
  // The overload ladder written into the ensemble's config.yaml (the
  // server's overload.latency_target_ms; 0 = no ladder): past capacity the
  // server answers from the cascade variant, then the best member.
  double latency_target_ms = 100;
  // Also write the packed variant (training/packed_variant.h): the members
  // of one zoo architecture packed into one served model (whether or not
  // training was packed: pack_training).
  bool pack = true;
  // Train the members of one zoo architecture packed (EnsembleTrainer): one
  // forward and backward for all of them, the same trajectory. Off by
  // default: on a CPU the grouped convolutions make a step slower
  // (docs/training.md); it pays where many small member calls cost more
  // than their arithmetic.
  bool pack_training = false;
  // The stages of the cascade variant: "two" (the cheapest member alone,
  // then every other member at once) or "per_member" (one member per stage,
  // cheapest first). Each stage is a round trip through the router and the
  // hosts, and a hard row waits behind their queues once per stage: served,
  // the twelve-CNN recipe's cascade in two stages had 0.5-0.7x the p99 of
  // one member per stage at every depth, at the same accuracy, with 1.3x the
  // throughput at one request in flight, 0.87x at sixteen and the same at
  // 128 (docs/training.md, "The cascade variant").
  std::string cascade_stages = "two";
};

struct TrainConfig {
  std::string path;       // the config file itself
  std::string run = "ensemble-train";  // run name: the rendezvous prefix and log tag
  DataSpec data;
  OptimSpec optim;
  DistributedSpec distributed;
  CheckpointSpec checkpoint;
  std::vector<MemberSpec> members;
  TrainedEnsembleSpec ensemble;
};

StatusOr<TrainConfig> LoadTrainConfig(const std::string& path);

// The zoo members of each architecture (indexes into config.members), in
// the order of the architectures' first members; members from TorchScript
// files are in none. What packing works from (the packed variant, packed
// training).
std::vector<std::pair<std::string, std::vector<size_t>>> MembersByArchitecture(const TrainConfig& config);

}  // namespace es
