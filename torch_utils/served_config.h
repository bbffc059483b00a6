// The config.yaml texts of the models that our own tools write into a model
// repository (ensemble-make-demo, ensemble-train): Fashion-MNIST-shaped
// classifiers, input "input" FP32 [1, 28, 28], output "probabilities" FP32
// [10], exactly what the zoo's forward() takes and returns. One place, so
// the demo and trained repositories cannot drift apart.
//
// Thread safety: pure functions (WriteTextFile: one writer per path).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace es {

// A TorchScript member; `hosts` empty = no `hosts:` line (every host).
std::string ClassifierMemberYaml(int64_t max_batch_size, const std::vector<std::string>& hosts);

// An ensemble over `members`, combined by `combine` (mean, majority_vote).
std::string ClassifierEnsembleYaml(int64_t max_batch_size, const std::vector<std::string>& members,
                                   const std::string& combine);

// Writes `text` to `path` (truncating); an Internal error naming the path
// (and the system's reason) when it cannot be opened or written.
Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace es
