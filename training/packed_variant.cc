#include "training/packed_variant.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "torch_utils/packed_model.h"
#include "torch_utils/served_config.h"
#include "training/ensemble_trainer.h"

namespace es {

std::string PackedVariantName(const std::string& ensemble_name) { return ensemble_name + "_packed"; }

std::string PackedModelName(const std::string& ensemble_name, const std::string& architecture, size_t part,
                            size_t parts) {
  std::string name = PackedVariantName(ensemble_name) + "_" + architecture;
  return parts > 1 ? name + "_" + std::to_string(part + 1) : name;
}

namespace {

// Packed models for `members` of one architecture: one per host, each of at
// least two members.
size_t PartsFor(size_t members, size_t hosts) { return std::max<size_t>(1, std::min(hosts, members / 2)); }

}  // namespace

std::vector<std::string> PackedFolderNames(const TrainConfig& config) {
  std::vector<std::string> names{PackedVariantName(config.ensemble.name)};
  for (const auto& [architecture, members] : MembersByArchitecture(config)) {
    for (size_t parts = 1; parts <= PartsFor(members.size(), members.size()); ++parts) {
      for (size_t part = 0; part < parts; ++part) {
        const std::string name = PackedModelName(config.ensemble.name, architecture, part, parts);
        if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
      }
    }
  }
  return names;
}

StatusOr<std::optional<PackedVariant>> PackTrainedMembers(const TrainConfig& config,
                                                          const std::vector<torch::jit::Module>& modules,
                                                          size_t hosts) {
  if (modules.size() != config.members.size()) {
    return Status::InvalidArgument("packing: " + std::to_string(modules.size()) + " modules for " +
                                   std::to_string(config.members.size()) + " members");
  }
  if (!config.ensemble.pack) return std::optional<PackedVariant>();
  PackedVariant variant{PackedVariantName(config.ensemble.name), {}};
  for (const auto& [architecture, members] : MembersByArchitecture(config)) {
    if (members.size() < 2) continue;
    // Contiguous shares as even as they come: 12 members on 2 hosts: 6 and 6.
    const size_t parts = PartsFor(members.size(), hosts);
    for (size_t part = 0, next = 0; part < parts; ++part) {
      const size_t count = members.size() / parts + (part < members.size() % parts ? 1 : 0);
      PackedGroup group{PackedModelName(config.ensemble.name, architecture, part, parts), architecture,
                        std::vector<size_t>(members.begin() + static_cast<long>(next),
                                            members.begin() + static_cast<long>(next + count)),
                        {}};
      next += count;
      std::vector<torch::jit::Module> packed_members;
      for (size_t i : group.members) packed_members.push_back(modules[i]);
      StatusOr<torch::jit::Module> packed = PackMembers(packed_members);
      if (!packed.ok()) {
        return Status(packed.status().code(), "packing the " + architecture + " members into " + group.model +
                                                  ": " + packed.status().message());
      }
      group.module = std::move(packed).value();
      variant.groups.push_back(std::move(group));
    }
  }
  if (variant.groups.empty()) return std::optional<PackedVariant>();
  return std::optional<PackedVariant>(std::move(variant));
}

std::string PackedModelYaml(int64_t max_batch_size, size_t members) {
  return "# Written by ensemble-train: " + std::to_string(members) +
         " members in one TorchScript module (packed);\n"
         "# probabilities[:, k] is the k-th member's, in the order of the packed ensemble's `packed:` list.\n" +
         ClassifierMemberYaml(max_batch_size, {}, static_cast<int64_t>(members)) + BatchWhatWaitsYaml();
}

std::string PackedEnsembleYaml(const TrainConfig& config, const PackedVariant& variant) {
  std::vector<EnsembleEntry> entries;
  std::vector<const PackedGroup*> group_of(config.members.size(), nullptr);
  for (const PackedGroup& group : variant.groups) {
    for (size_t i : group.members) group_of[i] = &group;
  }
  for (size_t i = 0; i < config.members.size(); ++i) {
    const PackedGroup* group = group_of[i];
    if (group == nullptr) {
      entries.push_back({config.members[i].name, {}});
    } else if (group->members.front() == i) {
      EnsembleEntry entry{group->model, {}};
      for (size_t m : group->members) entry.packed.push_back(config.members[m].name);
      entries.push_back(std::move(entry));
    }
  }
  return "# Written by ensemble-train: the ensemble beside it with the members of one architecture\n"
         "# packed into one model per serving host (one member call per packed model); the same answers.\n" +
         ClassifierEnsembleYaml(config.ensemble.max_batch_size, entries, config.ensemble.combine);
}

StatusOr<PackedCheck> CheckPackedVariant(const PackedVariant& variant, const at::Tensor& images,
                                         const std::vector<at::Tensor>& member_probabilities, int64_t batch_rows) {
  if (images.dim() != 4 || batch_rows < 1) {
    return Status::InvalidArgument("packed check: images must be [N, 1, 28, 28] and batches at least one row");
  }
  const int64_t rows = images.size(0);
  torch::NoGradGuard no_grad;
  PackedCheck check;
  std::vector<double> full, all;  // seconds per row of each batch, all groups together (as Evaluate's)
  for (int64_t begin = 0; begin < rows; begin += batch_rows) {
    const int64_t n = std::min(batch_rows, rows - begin);
    const at::Tensor batch = images.narrow(0, begin, n);
    double seconds = 0;
    for (const PackedGroup& group : variant.groups) {
      torch::jit::Module module = group.module;  // a handle; forward() is not const
      if (begin == 0) module.forward({batch});  // warm-up, untimed
      const auto start = std::chrono::steady_clock::now();
      const at::Tensor answer = module.forward({batch}).toTensor();
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const int64_t members = static_cast<int64_t>(group.members.size());
      if (answer.dim() != 3 || answer.size(0) != n || answer.size(1) != members) {
        return Status::InvalidArgument("packed check: " + group.model + " answered a tensor of the wrong shape");
      }
      for (int64_t k = 0; k < members; ++k) {
        const size_t member = group.members[static_cast<size_t>(k)];
        if (member >= member_probabilities.size() || member_probabilities[member].size(0) != rows) {
          return Status::InvalidArgument("packed check: no answers of member " + std::to_string(member) +
                                         " for every row");
        }
        const at::Tensor want = member_probabilities[member].narrow(0, begin, n);
        if (want.sizes() != answer.select(1, k).sizes()) {
          return Status::InvalidArgument("packed check: " + group.model + "'s member answers are not [rows, classes]");
        }
        check.max_abs_difference =
            std::max(check.max_abs_difference, (answer.select(1, k) - want).abs().max().item<double>());
      }
    }
    all.push_back(seconds / static_cast<double>(n));
    if (n == batch_rows) full.push_back(all.back());
  }
  check.seconds_per_row = Median(full.empty() ? all : full);
  return check;
}

}  // namespace es
