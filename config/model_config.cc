#include "config/model_config.h"

namespace es {

// The spelling used in config.yaml, so errors and logs quote what users write.
const char* CombineRuleName(CombineRule rule) {
  switch (rule) {
    case CombineRule::kMean: return "mean";
    case CombineRule::kWeightedMean: return "weighted_mean";
    case CombineRule::kMajorityVote: return "majority_vote";
  }
  return "unknown";
}

std::string ModelConfig::ModelPath(int64_t version) const {
  return directory + "/" + std::to_string(version) + "/model.pt";
}

}  // namespace es
