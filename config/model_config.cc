#include "config/model_config.h"

#include <algorithm>
#include <cstdio>

namespace es {

// The spelling used in config.yaml, so errors and logs quote what users write.
const char* CombineRuleName(CombineRule rule) {
  switch (rule) {
    case CombineRule::kMean: return "mean";
    case CombineRule::kWeightedMean: return "weighted_mean";
    case CombineRule::kMajorityVote: return "majority_vote";
    case CombineRule::kCascade: return "cascade";
  }
  return "unknown";
}

std::string ModelConfig::ModelPath(int64_t version) const {
  return directory + "/" + std::to_string(version) + "/model.pt";
}

std::string OverloadRung::label() const {
  if (exit_threshold <= 0) return model;
  char threshold[32];
  std::snprintf(threshold, sizeof threshold, "@%g", exit_threshold);
  return model + threshold;
}

std::vector<int64_t> VersionPolicy::Select(const std::vector<int64_t>& available) const {
  switch (kind) {
    case Kind::kAll: return available;
    case Kind::kLatest: {
      const size_t keep = std::min(available.size(), static_cast<size_t>(std::max<int64_t>(num_versions, 0)));
      return std::vector<int64_t>(available.end() - static_cast<std::ptrdiff_t>(keep), available.end());
    }
    case Kind::kSpecific: {
      std::vector<int64_t> served;
      for (int64_t v : available) {
        if (std::binary_search(versions.begin(), versions.end(), v)) served.push_back(v);
      }
      return served;
    }
  }
  return {};
}

std::vector<int64_t> ModelConfig::ServedVersions() const {
  if (is_ensemble()) return {1};
  return version_policy.Select(versions);
}

}  // namespace es
