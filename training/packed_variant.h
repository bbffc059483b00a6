// The packed variant ensemble-train writes beside the ensemble: the members
// that share a zoo architecture, packed into one TorchScript model per
// architecture (torch_utils/packed_model.h), and an ensemble over those
// packed models (and the members left single) that answers what the
// ensemble answers, in one member call per architecture instead of one per
// member.
//
//   <ensemble>_packed_<architecture>/   a packed model: output "probabilities"
//                                       FP32 [M, 10], member k's at [:, k]
//   <ensemble>_packed/                  the ensemble over them (config.yaml)
//
// With several serving hosts an architecture's members are split into one
// packed model per host (`..._<architecture>_1`, `_2`, ...; each of at least
// two members, contiguous in the config's order), so the hosts compute an
// ensemble call's shares at the same time, as they do for separate members.
//
// Only members built from a zoo architecture (`architecture:` in the config)
// are packed, and only where at least two share one; members loaded from a
// `torchscript:` file stay single. Without any such pair there is no
// variant. Whether training was packed (ensemble.pack_training) does not
// matter here: the members come out of training as separate modules.
//
// Thread safety: plain functions over values; the modules are handles to the
// trained members' copies (PackMembers copies every weight).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/script.h>

#include "common/status.h"
#include "training/train_config.h"

namespace es {

// One packed model: the members (indexes into config.members, in the
// config's order) of one architecture.
struct PackedGroup {
  std::string model;         // <ensemble>_packed_<architecture>
  std::string architecture;  // the zoo name, e.g. "convnet"
  std::vector<size_t> members;
  torch::jit::Module module;  // PackMembers of those members
};

struct PackedVariant {
  std::string name;  // <ensemble>_packed
  std::vector<PackedGroup> groups;
};

// `<ensemble name>_packed`, and `<ensemble name>_packed_<architecture>`
// (with `_<part + 1>` when the architecture's members are split in `parts`).
std::string PackedVariantName(const std::string& ensemble_name);
std::string PackedModelName(const std::string& ensemble_name, const std::string& architecture, size_t part = 0,
                            size_t parts = 1);

// Every folder name a packed variant of `config` could take (the variant and
// the packed models of every zoo architecture it names, for any number of
// hosts): the repository writer removes those of an earlier run that this
// run does not write.
std::vector<std::string> PackedFolderNames(const TrainConfig& config);

// Packs the trained `modules` (config.members' order) per architecture, in
// min(hosts, members / 2) packed models per architecture (at least one).
// nullopt when no two zoo members share an architecture, or when
// config.ensemble.pack is false. Errors are PackMembers' (naming the member).
StatusOr<std::optional<PackedVariant>> PackTrainedMembers(const TrainConfig& config,
                                                          const std::vector<torch::jit::Module>& modules,
                                                          size_t hosts = 1);

// config.yaml of a packed model of `members` members.
std::string PackedModelYaml(int64_t max_batch_size, size_t members);

// config.yaml of the variant's ensemble: config.ensemble's combine and
// tensors; each group one `packed:` entry where its first member stands in
// config.members, the members left single as plain entries.
std::string PackedEnsembleYaml(const TrainConfig& config, const PackedVariant& variant);

// How the packed models answer on the test set against the members' own
// answers (Evaluation::members).
struct PackedCheck {
  double max_abs_difference = 0;  // over every row, member and class
  double seconds_per_row = 0;     // the packed models' forwards together, median over batches
};

// Runs each packed model on `images` in batches of `batch_rows` and compares
// member k's answers with `member_probabilities[k]` ([N, 10] each).
// InvalidArgument when the shapes do not match.
StatusOr<PackedCheck> CheckPackedVariant(const PackedVariant& variant, const at::Tensor& images,
                                         const std::vector<at::Tensor>& member_probabilities, int64_t batch_rows);

}  // namespace es
