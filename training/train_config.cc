#include "training/train_config.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

#include "config/yaml_reader.h"
#include "training/packed_variant.h"

namespace es {
namespace fs = std::filesystem;
namespace {

// The zoo's trainable names, listed here rather than asked of the zoo so
// that loading a config stays LibTorch-free (it runs before any spawn).
constexpr const char* kZoo[] = {"mlp", "wide_mlp", "cnn", "convnet", "convnet_wide"};

// Names become folders of the output repository and words of its YAML: a
// letter, digit or '_' first (a leading dot would hide the folder from the
// server's loader), then letters, digits, '_', '-' and '.'.
Status CheckModelName(const yaml::Field& map, std::string_view key, const std::string& name) {
  const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  bool ok = !name.empty() && name.size() <= 128 && word(name[0]);
  for (char c : name) ok = ok && (word(c) || c == '-' || c == '.');
  if (ok) return Status::Ok();
  return yaml::Error(yaml::Child(map, key),
                     "'" + name + "' is not a valid model name (letters, digits, '_', '-', '.'; "
                     "starting with a letter, digit or '_')");
}

Status CheckOneOf(const yaml::Field& map, std::string_view key, const std::string& value,
                  std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* option : allowed) {
    if (value == option) return Status::Ok();
    list += (list.empty() ? "" : ", ") + std::string(option);
  }
  return yaml::Error(yaml::Child(map, key), "unknown value '" + value + "' (expected " + list + ")");
}

Status ParseData(const yaml::Field& field, DataSpec* data) {
  if (!field.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(field, {"dataset", "path", "synthetic_train_rows",
                                            "synthetic_test_rows", "loader_threads",
                                            "prefetch_batches", "augment"}));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "dataset", &data->dataset));
  ES_RETURN_IF_ERROR(CheckOneOf(field, "dataset", data->dataset, {"fashion-mnist", "synthetic"}));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "path", &data->path));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "synthetic_train_rows", int64_t{1},
                                           int64_t{1} << 24, &data->synthetic_train_rows));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "synthetic_test_rows", int64_t{1},
                                           int64_t{1} << 24, &data->synthetic_test_rows));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "loader_threads", 1, 64, &data->loader_threads));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "prefetch_batches", 1, 1024, &data->prefetch_batches));
  const yaml::Field augment = yaml::Child(field, "augment");
  if (!augment.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(augment, {"shift", "flip"}));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(augment, "shift", 0, 8, &data->augment.shift));
  return yaml::ReadOptionalBool(augment, "flip", &data->augment.flip);
}

Status ParseOptim(const yaml::Field& field, OptimSpec* optim) {
  if (!field.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(field, {"epochs", "batch_size", "optimizer", "learning_rate",
                                            "schedule", "weight_decay", "seed"}));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "epochs", 1, 100000, &optim->epochs));
  ES_RETURN_IF_ERROR(
      yaml::ReadOptionalInt(field, "batch_size", int64_t{1}, int64_t{1} << 20, &optim->batch_size));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "optimizer", &optim->optimizer));
  ES_RETURN_IF_ERROR(CheckOneOf(field, "optimizer", optim->optimizer, {"adam", "sgd"}));
  ES_RETURN_IF_ERROR(
      yaml::ReadOptionalDouble(field, "learning_rate", 1e-9, 10.0, &optim->learning_rate));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "schedule", &optim->schedule));
  ES_RETURN_IF_ERROR(CheckOneOf(field, "schedule", optim->schedule, {"one_cycle", "constant"}));
  ES_RETURN_IF_ERROR(
      yaml::ReadOptionalDouble(field, "weight_decay", 0.0, 1.0, &optim->weight_decay));
  int64_t seed = static_cast<int64_t>(optim->seed);
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "seed", int64_t{0}, INT64_MAX, &seed));
  optim->seed = static_cast<uint64_t>(seed);
  return Status::Ok();
}

Status ParseDistributed(const yaml::Field& field, DistributedSpec* spec) {
  if (!field.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(field, {"bucket_mb", "collective_timeout_ms"}));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalDouble(field, "bucket_mb", 1e-6, 4096.0, &spec->bucket_mb));
  return yaml::ReadOptionalInt(field, "collective_timeout_ms", int64_t{100},
                               int64_t{24} * 3600 * 1000, &spec->collective_timeout_ms);
}

// A relative TorchScript path is relative to the config file's folder, as
// the server's repository path is.
Status ParseMember(const yaml::Field& field, MemberSpec* member) {
  ES_RETURN_IF_ERROR(yaml::CheckMap(field, {"name", "architecture", "torchscript", "seed"}));
  ES_RETURN_IF_ERROR(yaml::ReadRequiredString(field, "name", &member->name));
  ES_RETURN_IF_ERROR(CheckModelName(field, "name", member->name));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "architecture", &member->architecture));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "torchscript", &member->torchscript));
  int64_t seed = 0;
  ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(field, "seed", int64_t{0}, INT64_MAX, &seed));
  member->seed = static_cast<uint64_t>(seed);
  if (member->architecture.empty() == member->torchscript.empty()) {
    return yaml::Error(field, "a member needs exactly one of `architecture` (a zoo model) or "
                              "`torchscript` (a file)");
  }
  if (!member->architecture.empty()) {
    const bool known = std::any_of(std::begin(kZoo), std::end(kZoo),
                                   [&](const char* name) { return member->architecture == name; });
    if (!known) {
      return yaml::Error(yaml::Child(field, "architecture"),
                         "unknown zoo architecture '" + member->architecture +
                             "' (known: mlp, wide_mlp, cnn, convnet, convnet_wide)");
    }
    return Status::Ok();
  }
  fs::path path(member->torchscript);
  if (path.is_relative()) path = fs::path(field.file).parent_path() / path;
  path = fs::absolute(path).lexically_normal();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return yaml::Error(yaml::Child(field, "torchscript"),
                       "TorchScript file '" + path.string() + "' does not exist");
  }
  member->torchscript = path.string();
  return Status::Ok();
}

Status ParseMembers(const yaml::Field& field, std::vector<MemberSpec>* members) {
  if (!field.present()) return yaml::Error(field, "missing required field (at least one member)");
  ES_RETURN_IF_ERROR(yaml::CheckSequence(field));
  std::set<std::string> names;
  for (const yaml::Field& item : yaml::Items(field)) {
    MemberSpec member;
    ES_RETURN_IF_ERROR(ParseMember(item, &member));
    if (!names.insert(member.name).second) {
      return yaml::Error(yaml::Child(item, "name"), "duplicate member name '" + member.name + "'");
    }
    members->push_back(std::move(member));
  }
  if (members->empty()) return yaml::Error(field, "at least one member is required");
  return Status::Ok();
}

Status ParseEnsemble(const yaml::Field& field, TrainedEnsembleSpec* spec) {
  if (!field.present()) return Status::Ok();
  ES_RETURN_IF_ERROR(yaml::CheckMap(
      field, {"name", "combine", "max_batch_size", "latency_target_ms", "pack", "pack_training", "cascade_stages"}));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalBool(field, "pack", &spec->pack));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalBool(field, "pack_training", &spec->pack_training));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalDouble(field, "latency_target_ms", 0.0, 3600.0 * 1000, &spec->latency_target_ms));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "name", &spec->name));
  ES_RETURN_IF_ERROR(CheckModelName(field, "name", spec->name));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "combine", &spec->combine));
  ES_RETURN_IF_ERROR(CheckOneOf(field, "combine", spec->combine, {"mean", "majority_vote"}));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(field, "cascade_stages", &spec->cascade_stages));
  ES_RETURN_IF_ERROR(CheckOneOf(field, "cascade_stages", spec->cascade_stages, {"two", "per_member"}));
  return yaml::ReadOptionalInt(field, "max_batch_size", int64_t{1}, int64_t{1} << 20,
                               &spec->max_batch_size);
}

}  // namespace

StatusOr<TrainConfig> LoadTrainConfig(const std::string& path) {
  ES_ASSIGN_OR_RETURN(yaml::Field root, yaml::LoadFile(path));
  TrainConfig config;
  config.path = path;
  ES_RETURN_IF_ERROR(yaml::CheckMap(root, {"run", "data", "training", "distributed", "checkpoint",
                                            "members", "ensemble"}));
  ES_RETURN_IF_ERROR(yaml::ReadOptionalString(root, "run", &config.run));
  ES_RETURN_IF_ERROR(ParseData(yaml::Child(root, "data"), &config.data));
  ES_RETURN_IF_ERROR(ParseOptim(yaml::Child(root, "training"), &config.optim));
  ES_RETURN_IF_ERROR(ParseDistributed(yaml::Child(root, "distributed"), &config.distributed));
  const yaml::Field checkpoint = yaml::Child(root, "checkpoint");
  if (checkpoint.present()) {
    ES_RETURN_IF_ERROR(yaml::CheckMap(checkpoint, {"every_steps"}));
    ES_RETURN_IF_ERROR(yaml::ReadOptionalInt(checkpoint, "every_steps", int64_t{0}, INT64_MAX,
                                             &config.checkpoint.every_steps));
  }
  ES_RETURN_IF_ERROR(ParseMembers(yaml::Child(root, "members"), &config.members));
  ES_RETURN_IF_ERROR(ParseEnsemble(yaml::Child(root, "ensemble"), &config.ensemble));
  for (const MemberSpec& member : config.members) {
    if (member.name == config.ensemble.name) {
      return yaml::Error(yaml::Child(yaml::Child(root, "ensemble"), "name"),
                         "the ensemble's name '" + member.name + "' is also a member's name");
    }
    if (member.name == config.ensemble.name + "_cascade") {  // the cascade variant's folder
      return yaml::Error(yaml::Child(yaml::Child(root, "ensemble"), "name"),
                         "member '" + member.name + "' has the name of the ensemble's cascade variant (" +
                             config.ensemble.name + "_cascade)");
    }
    for (const std::string& packed : PackedFolderNames(config)) {
      if (member.name == packed) {
        return yaml::Error(yaml::Child(yaml::Child(root, "ensemble"), "name"),
                           "member '" + member.name + "' has the name of a folder of the ensemble's packed variant");
      }
    }
  }
  return config;
}

std::vector<std::pair<std::string, std::vector<size_t>>> MembersByArchitecture(const TrainConfig& config) {
  std::vector<std::pair<std::string, std::vector<size_t>>> groups;
  std::map<std::string, size_t> group_of;
  for (size_t i = 0; i < config.members.size(); ++i) {
    const std::string& architecture = config.members[i].architecture;
    if (architecture.empty()) continue;
    const auto [it, added] = group_of.emplace(architecture, groups.size());
    if (added) groups.push_back({architecture, {}});
    groups[it->second].second.push_back(i);
  }
  return groups;
}

}  // namespace es
