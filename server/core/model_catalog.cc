#include "server/core/model_catalog.h"

#include <algorithm>
#include <string>
#include <vector>

namespace es {

StatusOr<int64_t> ResolveVersion(const ModelCatalog& catalog, const ModelConfig& model, const std::string& requested) {
  if (requested.empty()) {
    if (const std::optional<int64_t> highest = catalog.HighestReady(model)) return *highest;
    // None ready: the full list below says why.
  }
  const std::vector<int64_t> ready = catalog.ReadyVersions(model);
  if (ready.empty() && model.is_ensemble()) {
    for (const EnsembleMember& m : model.ensemble.members) {
      const ModelConfig* member = catalog.Find(m.model);
      if (member == nullptr) {
        return Status::Unavailable("ensemble '" + model.name + "' is not ready: member '" + m.model +
                                   "' is not loaded");
      }
      const std::vector<int64_t> member_ready = catalog.ReadyVersions(*member);
      if (m.version > 0 && std::find(member_ready.begin(), member_ready.end(), m.version) == member_ready.end()) {
        return Status::Unavailable("ensemble '" + model.name + "' is not ready: member '" + m.model + "' version " +
                                   std::to_string(m.version) + " (pinned in its config) is not ready");
      }
      if (member_ready.empty()) {
        return Status::Unavailable("ensemble '" + model.name + "' is not ready: member '" + m.model +
                                   "' has no version ready");
      }
    }
  }
  if (ready.empty()) return Status::Unavailable("model '" + model.name + "' has no version ready");
  if (requested.empty()) return ready.back();
  int64_t version = 0;
  const bool digits = requested.size() <= 18 && requested.find_first_not_of("0123456789") == std::string::npos;
  if (digits) version = std::stoll(requested);
  if (!digits || std::find(ready.begin(), ready.end(), version) == ready.end()) {
    // Listed only for the error: every request (and member call) resolves a version.
    std::string list;
    for (int64_t v : ready) list += (list.empty() ? "" : ", ") + std::to_string(v);
    return Status::NotFound("model '" + model.name + "' has no served version '" + ShownClientText(requested) +
                            "' (served: " + list + ")");
  }
  return version;
}

}  // namespace es
