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
// `packed_members` > 0: a packed model of that many members (its output
// "probabilities" FP32 [packed_members, 10], member k's at [:, k]).
std::string ClassifierMemberYaml(int64_t max_batch_size, const std::vector<std::string>& hosts,
                                 int64_t packed_members = 0);

// The `dynamic_batching` section of the models ensemble-train writes:
// the router batches the requests that wait for a busy host and never
// holds a request back to wait for more (max_queue_delay_us: 0), so a lone
// request goes as it would unbatched and a queue leaves as one call.
std::string BatchWhatWaitsYaml();

// One entry of an ensemble's member list: a model, or a packed model with
// the names of the members it computes (`packed` non-empty).
struct EnsembleEntry {
  std::string model;
  std::vector<std::string> packed = {};
};

// An ensemble over `members`, combined by `combine` (mean, majority_vote).
// The member list is written last, at the `ensemble:` mapping's indentation,
// so a caller may append more keys of that mapping (a cascade's stages).
std::string ClassifierEnsembleYaml(int64_t max_batch_size, const std::vector<std::string>& members,
                                   const std::string& combine);
std::string ClassifierEnsembleYaml(int64_t max_batch_size, const std::vector<EnsembleEntry>& entries,
                                   const std::string& combine);

// Writes `text` to `path` (truncating); an Internal error naming the path
// (and the system's reason) when it cannot be opened or written.
Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace es
