// Fuzz target: the model YAML loader (es::LoadRepository), on a repository
// whose model `fuzzed` has the input as its config.yaml.
//
// The repository lives in the process's scratch folder and is reused: only
// fuzzed/config.yaml is rewritten per input. Beside it sit fuzzed/1/model.pt
// and one fixed TorchScript model, `mlp`, that an ensemble input can name as
// its member, so the ensemble checks are reached too (one only: every input
// parses the whole repository again).
// Loading must never crash or throw past the loader, and an accepted model
// must hold what the rest of the router relies on: dims -1 or positive, a
// bounded batch size, every tensor at most 2^40 bytes at the largest batch
// (checked here in 128 bits), batching parameters that agree, and ensemble
// members that exist and are not ensembles.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "config/server_config.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_files.h"

namespace {

constexpr std::string_view kMlp = R"(platform: torchscript
max_batch_size: 8
inputs:
  - {name: input, datatype: FP32, dims: [2, -1]}
outputs:
  - {name: probabilities, datatype: FP32, dims: [10]}
)";

const es::fuzz::FuzzDir& Tree() {
  static const es::fuzz::FuzzDir dir("es_fuzz_model_config_");
  static const bool written = [] {
    dir.Write("repo/mlp/config.yaml", kMlp);
    dir.Write("repo/mlp/1/model.pt", "");
    dir.Write("repo/fuzzed/1/model.pt", "");
    return true;
  }();
  (void)written;
  return dir;
}

void CheckTensor(const es::ModelConfig& model, const es::TensorSpec& t) {
  FUZZ_CHECK(!t.name.empty(), "model '%s': a tensor without a name", model.name.c_str());
  FUZZ_CHECK(es::DataTypeSize(t.datatype) > 0, "model '%s' tensor '%s': datatype %u", model.name.c_str(),
             t.name.c_str(), static_cast<unsigned>(t.datatype));
  unsigned __int128 bytes = es::DataTypeSize(t.datatype) * static_cast<uint64_t>(model.max_batch_size > 0 ? model.max_batch_size : 1);
  for (int64_t d : t.dims) {
    FUZZ_CHECK(d == -1 || d > 0, "model '%s' tensor '%s': dim %lld accepted", model.name.c_str(), t.name.c_str(),
               static_cast<long long>(d));
    bytes *= static_cast<uint64_t>(d > 0 ? d : 1);
    if (bytes > (static_cast<unsigned __int128>(1) << 64)) bytes = static_cast<unsigned __int128>(1) << 64;
  }
  FUZZ_CHECK(bytes <= (static_cast<unsigned __int128>(1) << 40), "model '%s' tensor '%s': over 2^40 bytes accepted",
             model.name.c_str(), t.name.c_str());
}

void CheckAccepted(const std::map<std::string, es::ModelConfig>& models) {
  for (const auto& [name, model] : models) {
    FUZZ_CHECK(name == model.name, "model '%s' stored as '%s'", model.name.c_str(), name.c_str());
    FUZZ_CHECK(model.max_batch_size >= 0 && model.max_batch_size <= (int64_t{1} << 20),
               "model '%s': max_batch_size %lld accepted", name.c_str(), static_cast<long long>(model.max_batch_size));
    FUZZ_CHECK(!model.inputs.empty() && !model.outputs.empty(), "model '%s' without inputs or outputs", name.c_str());
    for (const es::TensorSpec& t : model.inputs) CheckTensor(model, t);
    for (const es::TensorSpec& t : model.outputs) CheckTensor(model, t);
    if (model.is_ensemble()) {
      FUZZ_CHECK(!model.ensemble.members.empty(), "ensemble '%s' without members", name.c_str());
      for (const es::EnsembleMember& m : model.ensemble.members) {
        auto it = models.find(m.model);
        FUZZ_CHECK(it != models.end() && !it->second.is_ensemble(), "ensemble '%s': member '%s' accepted",
                   name.c_str(), m.model.c_str());
      }
      continue;
    }
    FUZZ_CHECK(!model.versions.empty(), "model '%s' without versions", name.c_str());
    const es::DynamicBatching& b = model.dynamic_batching;
    if (b.enabled) {
      FUZZ_CHECK(b.priority_levels >= 1 && b.default_priority >= 1 && b.default_priority <= b.priority_levels,
                 "model '%s': priority levels %d, default %d accepted", name.c_str(), b.priority_levels,
                 b.default_priority);
      FUZZ_CHECK(b.max_queue_size >= 1 && b.max_queue_bytes >= 1 && b.max_queue_delay_us >= 0,
                 "model '%s': batching limits accepted", name.c_str());
      int64_t previous = 0;
      for (int64_t p : b.preferred_batch_sizes) {
        FUZZ_CHECK(p > previous && p <= model.max_batch_size, "model '%s': preferred batch size %lld accepted",
                   name.c_str(), static_cast<long long>(p));
        previous = p;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const es::fuzz::FuzzDir& tree = Tree();
  tree.Write("repo/fuzzed/config.yaml", std::string_view(reinterpret_cast<const char*>(data), size));
  auto models = es::LoadRepository(tree.Path("repo"));
  if (models.ok()) {
    CheckAccepted(*models);
  } else {
    FUZZ_CHECK(!models.status().message().empty(), "an error without a message");
  }
  return 0;
}
